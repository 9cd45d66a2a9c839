"""Did the service meet its response-time target, and at what cost? ``slo_summary`` reads a run
store (lab or simulator) and the scenario it ran.

**SLO fraction.** An *instance-interval* is one observation (instance, interval (t − Δ, t]) in
which at least one request completed (so it has a mean response time); it *meets* the target
when its mean RT ≤ R_th (``target.mean_rt_s``). An observation in which nothing completed
although the instance has held a request for longer than R_th (``extra
["oldest_in_flight_seconds"]``, which the simulator reports) is a *stalled* instance-interval,
and misses: an instance too overloaded to finish anything must not vanish from the count. An
observation with nothing completed and nothing old in flight is idle and not counted. Instance-intervals right after a change the
service suffers or makes are left out: a change at time d excludes every instance-interval in
its scope that overlaps [d, d + settle_s), i.e. with d < t and d + settle_s > t − Δ. The
changes and their scopes:

* the start of the run (d = 0) and every scenario event (``events[].at_s``): every instance;
* every load step: a point of a ``schedule`` arrival process with ``shape: steps`` (after 0,
  where the rate changes): every instance (ramps and random processes have no steps).

``settle_s`` defaults to boot_s + 2 × interval_s (``scaling.boot_s``, 30 s without scaling): a
change to the whole service may need instances booted, then two intervals to settle.

* every on/off switch of a ``service.interference`` source leaves out only the instance-intervals
  of that host's instances in which it takes effect (t − Δ ≤ d < t, widened by
  ``neighbour_settle_s``, default 0): no policy can see a neighbour before the interval it
  arrived in has ended, and from the next interval on it has had one decision to move the load,
  which needs no boot.

A policy's own ``AddInstance`` / ``RemoveInstance`` exclude nothing: it foresees them, and a
policy that acts more often must not leave more of its intervals out (``exclude_own=True``
gives the stricter rule that leaves out the named instance's intervals for ``settle_s`` after
each, to compare with comparisons recorded under it). Weight changes are the policy's everyday work and exclude nothing.
``slo_fraction`` = met / counted instance-intervals;
``slo_fraction_all`` is the same without exclusions; ``slo_request_fraction`` weighs each counted
instance-interval by its completed requests (a policy that idles most instances and overloads a
few scores well by instance-intervals, not by requests). ``settling_fraction`` is the share of
instance-intervals left out, and ``settling_own_fraction`` the share left out only because of
the policy's own scaling actions (0 unless ``exclude_own``); the settled SLO is always reported
with the SLO over all instance-intervals and the share left out beside it.

**Instance-seconds** (what a cloud bills): each instance from the start of the run (initial
ones) or from the ``AddInstance`` that asked for it (booting counts), to the end of the run, or,
once removed, to the end of the last interval it is reported in (it drains until then; one
cancelled while booting ends at its removal). **Oracle instance-seconds**: the fewest instances
that could have met the target, from ``quell.models.oracle`` (needs a target)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quell.core.action import SCALING_TYPES
from quell.core.observation import OLDEST_KEY
from quell.errors import InputError
from quell.models.oracle import OracleResult
from quell.scenario.model import Scenario
from quell.scenario.service import ServiceModel
from quell.sim.headroom import run_oracle
from quell.sim.service import interference_changes
from quell.store.run import RunStore

DEFAULT_BOOT_S = 30.0


def default_settle_s(scenario: Scenario) -> float:
    boot = scenario.scaling.boot_s if scenario.scaling else DEFAULT_BOOT_S
    return boot + 2.0 * scenario.interval_s


def _observations(store: RunStore) -> dict[str, NDArray[Any]]:
    """time_s, interval_s, instance_id, requests, mean_rt_s and, where no request completed,
    oldest_s (``extra["oldest_in_flight_seconds"]``, NaN if not reported) of every observation,
    as arrays."""
    cols = store.observation_columns(OLDEST_KEY)
    cols["oldest_s"] = cols.pop("extra")
    return cols


def _scaling_actions(store: RunStore) -> list[tuple[float, str, str, str | None]]:
    """(time, "AddInstance" | "RemoveInstance", instance id, host) of every scaling action."""
    out = []
    for t, _, _, actions in store.decisions():
        for a in actions:
            if a.get("type") in SCALING_TYPES:
                out.append((float(t), str(a["type"]), str(a["instance_id"]), a.get("host")))
    return sorted(out, key=lambda x: x[0])


def _hosts_of(
    scenario: Scenario, actions: list[tuple[float, str, str, str | None]]
) -> dict[str, str]:
    """Each instance's host: the scenario's initial ones and every one ``actions`` added."""
    host_of = {i.id: i.host for i in scenario.instances}
    host_of.update({iid: h for _, kind, iid, h in actions if kind == "AddInstance" and h})
    return host_of


def instance_hosts(store: RunStore, scenario: Scenario) -> dict[str, str]:
    """Each instance's host: the scenario's initial ones and every one the policy added."""
    return _hosts_of(scenario, _scaling_actions(store))


def load_steps(scenario: Scenario) -> list[float]:
    arrival = scenario.workload.arrival
    if getattr(arrival, "process", "") != "schedule" or getattr(arrival, "shape", "") != "steps":
        return []
    steps, rate = [], None
    for pt in sorted(arrival.points, key=lambda p: p.at_s):  # type: ignore[union-attr]
        if rate is not None and pt.at_s > 0 and pt.rate_rps != rate:
            steps.append(pt.at_s)
        rate = pt.rate_rps
    return steps


def _within(
    keys: NDArray[np.float64], t: NDArray[np.float64], lo: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """For each query, whether some sorted key k has lo < k < t."""
    return np.asarray(
        np.searchsorted(keys, t, side="left") > np.searchsorted(keys, lo, side="right")
    )


def excluded(
    obs: dict[str, NDArray[Any]],
    scenario: Scenario,
    actions: list[tuple[float, str, str, str | None]],
    settle_s: float,
    *,
    own: bool = False,
    neighbour_settle_s: float = 0.0,
) -> NDArray[np.bool_]:
    """Which observations fall in a settle window (see the module docstring); ``own=True``:
    also the windows of the policy's own scaling actions (``settle_s`` each), not only those of
    the changes every policy suffers (the start, events, load steps, neighbours)."""
    t = obs["time_s"]
    lo = t - obs["interval_s"] - settle_s
    glob = sorted({0.0, *(e.at_s for e in scenario.events), *load_steps(scenario)})
    out = _within(np.asarray(glob, dtype=np.float64), t, lo)
    # per host and per instance: one sorted key line, each group shifted far from the others
    span = 4.0 * (scenario.duration_s + settle_s + scenario.interval_s) + 1.0
    host_of = _hosts_of(scenario, actions)
    host_index = {h.id: j for j, h in enumerate(scenario.hosts)}
    row_host = np.asarray([host_index.get(host_of.get(i, ""), -1) for i in obs["instance"]])
    svc = scenario.service or ServiceModel()
    it_t, it_h, _ = interference_changes(
        svc.interference, scenario.hosts, scenario.duration_s, scenario.seed
    )
    keys = np.sort(it_h * span + it_t)
    lo_host = t - obs["interval_s"] - neighbour_settle_s
    hit = np.searchsorted(keys, row_host * span + t, side="left") > np.searchsorted(
        keys, row_host * span + lo_host, side="left"
    )
    out |= (row_host >= 0) & hit
    ids = sorted({iid for _, _, iid, _ in actions}) if own else []
    if ids:
        code = {iid: k for k, iid in enumerate(ids)}
        keys = np.sort(np.asarray([code[iid] * span + at for at, _, iid, _ in actions]))
        row = np.asarray([code.get(i, -1) for i in obs["instance"]])
        out |= (row >= 0) & _within(keys, row * span + t, row * span + lo)
    return out


def _times_by_instance(obs: dict[str, NDArray[Any]]) -> dict[str, NDArray[np.float64]]:
    ids = obs["instance"].astype(str)
    order = np.lexsort((obs["time_s"], ids))
    ids, times = ids[order], obs["time_s"][order]
    names, first = np.unique(ids, return_index=True)
    bounds = [*first.tolist(), ids.size]
    return {str(n): times[bounds[k] : bounds[k + 1]] for k, n in enumerate(names)}


def instance_seconds(
    obs: dict[str, NDArray[Any]],
    scenario: Scenario,
    actions: list[tuple[float, str, str, str | None]],
    end_s: float,
) -> float:
    """Billed instance time (see the module docstring)."""
    lives: dict[str, list[list[float]]] = {i.id: [[0.0, np.nan]] for i in scenario.instances}
    for at, kind, iid, _ in actions:
        life = lives.get(iid, [[0.0, 0.0]])[-1]
        is_open = np.isnan(life[1])
        if kind == "AddInstance" and not is_open:
            lives.setdefault(iid, []).append([at, np.nan])
        elif kind == "RemoveInstance" and is_open:
            life[1] = at
    seen = _times_by_instance(obs)
    total = 0.0
    for iid, ls in lives.items():
        times = seen.get(iid, np.empty(0))
        for k, (start, removed) in enumerate(ls):
            if np.isnan(removed):
                total += max(end_s - start, 0.0)
                continue
            nxt = ls[k + 1][0] if k + 1 < len(ls) else np.inf
            draining = times[(times >= removed) & (times <= nxt)]
            total += (float(draining.max()) if draining.size else removed) - start
    return total


def _rt_overall(store: RunStore, obs: dict[str, NDArray[Any]]) -> dict[str, Any]:
    if store.request_count():
        req = store.request_arrays()
        ok = (req["status"] >= 200) & (req["status"] < 400) & np.isfinite(req["latency_s"])
        lat = req["latency_s"][ok]
        return {
            "rt_source": "requests",
            "mean_rt_ms": round(float(lat.mean()) * 1e3, 3) if lat.size else None,
            "p95_rt_ms": round(float(np.percentile(lat, 95)) * 1e3, 3) if lat.size else None,
        }
    agg = store.interval_aggregates(float("-inf"), float("inf")).values()
    rt_w = sum(a["rt_weight"] or 0 for a in agg)
    p95_w = sum(a["p95_weight"] or 0 for a in agg)
    rt = sum(a["rt_sum"] or 0.0 for a in agg) / rt_w if rt_w else None
    p95 = sum(a["p95_sum"] or 0.0 for a in agg) / p95_w if p95_w else None
    return {
        "rt_source": "intervals",
        "mean_rt_ms": round(rt * 1e3, 3) if rt is not None else None,
        "p95_rt_ms": round(p95 * 1e3, 3) if p95 is not None else None,
    }


def slo_summary(
    store: RunStore,
    scenario: Scenario,
    *,
    settle_s: float | None = None,
    oracle: OracleResult | None = None,
    base_dir: Path | None = None,
    neighbour_settle_s: float = 0.0,
    exclude_own: bool = False,
) -> dict[str, Any]:
    """The SLO numbers of a run: met fraction, instance-seconds, scaling actions, overall mean
    and p95 RT and, with a target, the oracle's instance-seconds (computed from the scenario,
    with its traces under ``base_dir`` or the run directory, unless ``oracle`` is given)."""
    settle = default_settle_s(scenario) if settle_s is None else settle_s
    obs = _observations(store)
    actions = _scaling_actions(store)
    meta = store.meta()
    end_s = scenario.duration_s if "finished_at" in meta else store.last_time_s()
    out: dict[str, Any] = {
        "target_rt_s": scenario.target.mean_rt_s if scenario.target else None,
        "settle_s": settle,
        "neighbour_settle_s": neighbour_settle_s,
        "instance_seconds": round(instance_seconds(obs, scenario, actions, end_s), 3),
        "scaling_actions": len(actions),
        "instances_added": sum(1 for a in actions if a[1] == "AddInstance"),
        "instances_removed": sum(1 for a in actions if a[1] == "RemoveInstance"),
        **_rt_overall(store, obs),
    }
    if scenario.target is None:
        return out
    target = scenario.target.mean_rt_s
    stalled = (obs["requests"] == 0) & (obs["oldest_s"] > target)
    has = (obs["requests"] > 0) | stalled
    skip = excluded(
        obs, scenario, actions, settle, own=exclude_own, neighbour_settle_s=neighbour_settle_s
    )
    skip_env = (
        excluded(obs, scenario, actions, settle, neighbour_settle_s=neighbour_settle_s)
        if exclude_own
        else skip
    )
    met = (obs["requests"] > 0) & (obs["mean_rt_s"] <= target)
    counted = has & ~skip
    n_has, n_counted = int(has.sum()), int(counted.sum())
    req_counted = int(obs["requests"][counted].sum())
    req_met = int(obs["requests"][met & ~skip].sum())
    out.update(
        {
            "instance_intervals": n_has,
            "stalled_intervals": int(stalled.sum()),
            "excluded_intervals": int((has & skip).sum()),
            "excluded_own_intervals": int((has & skip & ~skip_env).sum()),
            "counted_intervals": n_counted,
            "met_intervals": int((met & ~skip).sum()),
            "slo_fraction": round(int((met & ~skip).sum()) / n_counted, 5) if n_counted else None,
            "slo_fraction_all": round(int(met.sum()) / n_has, 5) if n_has else None,
            "slo_request_fraction": round(req_met / req_counted, 5) if req_counted else None,
            "settling_fraction": round(int((has & skip).sum()) / n_has, 5) if n_has else None,
            "settling_own_fraction": (
                round(int((has & skip & ~skip_env).sum()) / n_has, 5) if n_has else None
            ),
        }
    )
    if oracle is None:
        try:
            oracle = run_oracle(scenario, base_dir or Path(store.path))
        except InputError as exc:  # e.g. a trace file that is not beside the run
            out["oracle"] = {"error": str(exc)}
    if oracle is not None:
        out["oracle"] = oracle.to_dict()
        out["oracle_instance_seconds"] = round(oracle.instance_seconds, 3)
        feasible = has & ~in_infeasible(obs["time_s"], oracle)
        n_feasible = int(feasible.sum())
        out["feasible_intervals"] = n_feasible
        out["slo_fraction_feasible"] = (
            round(int((met & feasible).sum()) / n_feasible, 5) if n_feasible else None
        )
    return out


def in_infeasible(time_s: NDArray[np.float64], oracle: OracleResult) -> NDArray[np.bool_]:
    """Whether each instance-interval ending at ``time_s`` ends inside an interval in which no
    placement of instances, each at its true capacity, could carry the load within R_th (the
    oracle's infeasible ones): the interval (end − length, end] of the oracle's that holds it."""
    ends = oracle.interval_end_s
    k = np.searchsorted(ends, np.asarray(time_s, dtype=np.float64) - 1e-9, side="left")
    inside = k < ends.size
    out = np.zeros(k.size, dtype=np.bool_)
    out[inside] = oracle.infeasible[k[inside]]
    return out

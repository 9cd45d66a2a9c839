"""The paper's Table 4 from recorded runs: the mean response time of the interfered instances
during each antagonist period, over its first ``first_s`` seconds and after, and when the
policy reconfigured the server (detection and clearing latency).

The paper's Table 4 gives, for the baseline (a fixed configuration), httpd-basic (IC2
reconfiguring by a graceful restart) and httpd-online (without restarting), the mean response
time in the first half (60 s) and the second half of each interference period, and the
reduction against the baseline. ``period_rt`` reads one run; ``table4`` puts several runs of
the same scenario side by side, the first as the baseline.

The interval figures count a request in the interval it *ended* in. A run with a request log
also gets the same figures by the time each request was *sent* (``sent_*``), each request's
whole response time however long it waited, and how many of those sent during interference
waited longer than ``first_s`` or failed: a configuration that leaves some users without a
worker until the interference ends shows there, while the interval figures book those waits
in the clean interval where they end.

Both kinds of mean count answered requests only, so a configuration that makes users give up
(the load generator's timeout) looks faster for it. The ``*_waited_s`` means count every
request sent, a request without an answer at what its user waited for it: the workload's
timeout (``workload.timeout_s``; the lab's users log a timeout without a latency), or the
latency of an error answer. Those are the figures a policy cannot improve by failing requests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quell.errors import InputError, Problem
from quell.scenario.model import Scenario
from quell.store.run import RunStore
from quell.studies.ic2.campaign import interfered_instances

FIRST_S = 60.0
"""The paper's first half of a 120 s interference period."""


def _weighted(rows: list[tuple[int, float]]) -> float | None:
    n = sum(k for k, _ in rows)
    return sum(k * rt for k, rt in rows) / n if n else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def sent_rt(store: RunStore, scenario: Scenario, first_s: float = FIRST_S) -> dict[str, Any]:
    """From the request log, the interfered instances' requests by the time they were sent:
    the mean response time of those answered, sent in the first ``first_s`` of an antagonist
    period, after it, in all of it, and outside the periods more than ``first_s`` after one
    ended; how many were sent during the periods, and of them how many waited longer than
    ``first_s`` or failed (a failure the log gives the instance as ``server``, or any failure
    without a server when the scenario has one instance); and the means of what users waited.
    Empty without a request log."""
    if not store.request_count():
        return {}
    req = store.request_arrays()
    server = req["server"].astype(str)
    timeout_s = scenario.workload.timeout_s
    # a request that got no answer names no server; with one instance it was that one's
    unnamed = server == "" if len(scenario.instances) == 1 else np.zeros(server.size, bool)
    first, rest, clean = [], [], []
    first_waited, rest_waited = [], []
    during, over, failed = 0, 0, 0
    for iid, timeline in interfered_instances(scenario).items():
        mine = (server == iid) | unnamed
        send, rt = req["send_s"][mine], req["latency_s"][mine]
        ok = np.isfinite(rt) & (req["status"][mine] >= 200) & (req["status"][mine] < 400)
        in_first = np.zeros(send.size, dtype=bool)
        in_rest = np.zeros(send.size, dtype=bool)
        settled = np.ones(send.size, dtype=bool)
        for start, stop in timeline.union():
            in_first |= (send >= start) & (send < min(start + first_s, stop))
            in_rest |= (send >= start + first_s) & (send < stop)
            settled &= (send < start) | (send >= stop + first_s)
        first.append(rt[in_first & ok])
        rest.append(rt[in_rest & ok])
        clean.append(rt[settled & ok])
        waited = np.where(np.isfinite(rt), rt, timeout_s)
        first_waited.append(waited[in_first])
        rest_waited.append(waited[in_rest])
        sent = in_first | in_rest
        during += int(sent.sum())
        over += int((sent & (~ok | (np.where(ok, rt, 0.0) > first_s))).sum())
        failed += int((sent & ~ok).sum())
    f, r = np.concatenate(first), np.concatenate(rest)
    fw, rw = np.concatenate(first_waited), np.concatenate(rest_waited)
    return {
        "sent_first_waited_s": _mean(fw),
        "sent_after_waited_s": _mean(rw),
        "sent_waited_s": _mean(np.concatenate([fw, rw])),
        "sent_failed": failed,
        "sent_first_rt_s": _mean(f),
        "sent_after_rt_s": _mean(r),
        "sent_rt_s": _mean(np.concatenate([f, r])),
        "sent_clean_rt_s": _mean(np.concatenate(clean)),
        "sent_requests": during,
        "sent_over_first_s": over,
    }


def period_rt(store: RunStore, scenario: Scenario, first_s: float = FIRST_S) -> dict[str, Any]:
    """Per interfered instance and antagonist period: the request-weighted mean response time
    over the intervals ending in (start, start + first_s] and (start + first_s, stop]; the
    first reconfiguration of the instance in the period (detection) and after it, before the
    next period (clearing); and the same over all periods. A reconfiguration counts as the
    policy decided it (an environment that refused it records a cycle error beside).

    Beside them, the CPU the interfered instances spent per answered request, in the periods
    and outside them (``interfered_cpu_s_per_request``, ``clean_cpu_s_per_request``): how hard
    the neighbour reached the service in this run, which on a shared machine can differ from
    one run to the next more than a policy moves the response time."""
    reconf: dict[str, list[float]] = {}
    for t, _policy, _reason, actions in store.decisions():
        for a in actions:
            if a.get("type") == "ReconfigureServer":
                reconf.setdefault(str(a["instance_id"]), []).append(t)
    periods_out: list[dict[str, Any]] = []
    first_all: list[tuple[int, float]] = []
    after_all: list[tuple[int, float]] = []
    clean_all: list[tuple[int, float]] = []
    detect: list[float] = []
    clear: list[float] = []
    cpu = {True: [0.0, 0], False: [0.0, 0]}  # in a period or not: CPU seconds, requests
    for iid, timeline in interfered_instances(scenario).items():
        observed = list(store.observations(iid))
        obs = [
            (o.time_s, o.requests, o.mean_rt_seconds)
            for o in observed
            if o.mean_rt_seconds is not None and o.requests
        ]
        spans = timeline.union()
        for o in observed:
            if o.cpu_util is not None:
                tally = cpu[any(a < o.time_s <= b for a, b in spans)]
                tally[0] += o.cpu_util * o.interval_s
                tally[1] += o.requests
        for k, (start, stop) in enumerate(spans):
            end = min(stop, scenario.duration_s)
            nxt = spans[k + 1][0] if k + 1 < len(spans) else scenario.duration_s
            first = [(n, rt) for t, n, rt in obs if start < t <= min(start + first_s, end)]
            after = [(n, rt) for t, n, rt in obs if start + first_s < t <= end]
            first_all += first
            after_all += after
            times = reconf.get(iid, [])
            on = next((t - start for t in times if start <= t < end), None)
            off = next((t - end for t in times if end <= t < nxt), None)
            if on is not None:
                detect.append(on)
            if off is not None and end < scenario.duration_s:
                clear.append(off)
            periods_out.append(
                {
                    "instance": iid,
                    "start_s": start,
                    "stop_s": end,
                    "first_rt_s": _weighted(first),
                    "after_rt_s": _weighted(after),
                    "detect_s": on,
                    "clear_s": off,
                }
            )
        clean_all += [(n, rt) for t, n, rt in obs if not any(a < t <= b for a, b in spans)]
    return {
        "first_s": first_s,
        "first_rt_s": _weighted(first_all),
        "after_rt_s": _weighted(after_all),
        "clean_rt_s": _weighted(clean_all),
        "detect_latency_s": statistics.median(detect) if detect else None,
        "clear_latency_s": statistics.median(clear) if clear else None,
        "reconfigurations": sum(len(v) for v in reconf.values()),
        "interfered_cpu_s_per_request": cpu[True][0] / cpu[True][1] if cpu[True][1] else None,
        "clean_cpu_s_per_request": cpu[False][0] / cpu[False][1] if cpu[False][1] else None,
        **sent_rt(store, scenario, first_s),
        "periods": periods_out,
    }


def _reduction_pct(base: float | None, mine: float | None) -> float | None:
    if base is None or mine is None or base <= 0:
        return None
    return round(100.0 * (base - mine) / base, 1)


MEANS = (
    "first_rt_s",
    "after_rt_s",
    "clean_rt_s",
    "sent_first_rt_s",
    "sent_after_rt_s",
    "sent_rt_s",
    "sent_clean_rt_s",
    "sent_first_waited_s",
    "sent_after_waited_s",
    "sent_waited_s",
    "interfered_cpu_s_per_request",
    "clean_cpu_s_per_request",
)
"""A label's figures over its repetitions: the mean of the runs' own."""
SUMS = ("sent_requests", "sent_over_first_s", "sent_failed")
"""...and these counted over all of them."""
REDUCTIONS = (
    ("first_reduction_pct", "first_rt_s"),
    ("after_reduction_pct", "after_rt_s"),
    ("sent_reduction_pct", "sent_rt_s"),
    ("first_waited_reduction_pct", "sent_first_waited_s"),
    ("after_waited_reduction_pct", "sent_after_waited_s"),
    ("waited_reduction_pct", "sent_waited_s"),
)


def _over_runs(each: list[dict[str, Any]], duration_s: float) -> dict[str, Any]:
    """One label's row from its runs' ``period_rt``: the means of the runs' figures (a run
    without one left out), the counts summed, the median latencies over every period (a
    clearing only where the period ended before the run), and the reconfigurations per run."""
    row: dict[str, Any] = {"first_s": each[0]["first_s"]}
    for key in MEANS:
        values = [r[key] for r in each if r.get(key) is not None]
        if any(key in r for r in each):
            row[key] = statistics.fmean(values) if values else None
    for key in SUMS:
        if any(key in r for r in each):
            row[key] = sum(r.get(key, 0) for r in each)
    periods = [p for r in each for p in r["periods"]]
    detect = [p["detect_s"] for p in periods if p["detect_s"] is not None]
    clear = [p["clear_s"] for p in periods if p["clear_s"] is not None and p["stop_s"] < duration_s]
    row["detect_latency_s"] = statistics.median(detect) if detect else None
    row["clear_latency_s"] = statistics.median(clear) if clear else None
    row["reconfigurations"] = round(statistics.fmean(r["reconfigurations"] for r in each), 1)
    row["periods"] = periods
    return row


def table4(
    scenario: Scenario, runs: Sequence[tuple[str, Path]], first_s: float = FIRST_S
) -> dict[str, Any]:
    """``period_rt`` of each (label, run directory), the first label the baseline, with each
    label's reduction of the first-half and second-half response time against it.

    Runs with the same label are repetitions: the label's figures are the means over its runs
    (``repetitions`` of them), each reduction that of those means. With two or more runs of a
    label and of the baseline, the k-th run of each is a pair (run them interleaved, as ``quell
    lab compare`` run again does): ``<reduction>_se`` is the standard error of the pairs' own
    reductions, and ``runs`` gives each run's figures."""
    groups: dict[str, list[Path]] = {}
    for label, run_dir in runs:
        groups.setdefault(label, []).append(run_dir)
    each: dict[str, list[dict[str, Any]]] = {}
    for label, dirs in groups.items():
        each[label] = []
        for run_dir in dirs:
            with RunStore.open(run_dir) as store:
                each[label].append({"run_dir": str(run_dir), **period_rt(store, scenario, first_s)})
    baseline = runs[0][0]
    rows: dict[str, dict[str, Any]] = {}
    for label, mine in each.items():
        if len(mine) == 1:
            row = dict(mine[0])
        else:
            row = {
                "run_dirs": [r["run_dir"] for r in mine],
                **_over_runs(mine, scenario.duration_s),
            }
        row["repetitions"] = len(mine)
        rows[label] = row
    base, base_runs = rows[baseline], each[baseline]
    for label, r in rows.items():
        # each run's own cuts against the baseline's run of the same rank, where there is one
        paired = [
            {out: _reduction_pct(b.get(key), m.get(key)) for out, key in REDUCTIONS if key in m}
            for b, m in zip(base_runs, each[label], strict=False)
        ]
        for out, key in REDUCTIONS:
            if key not in r or key not in base:
                continue
            r[out] = _reduction_pct(base[key], r[key])
            cuts = [c for c in (p.get(out) for p in paired) if c is not None]
            if len(cuts) >= 2 and label != baseline:
                r[f"{out}_se"] = round(statistics.stdev(cuts) / math.sqrt(len(cuts)), 1)
        if len(each[label]) > 1:
            r["runs"] = [
                {k: v for k, v in m.items() if k != "periods"}
                | (paired[k] if k < len(paired) else {})
                for k, m in enumerate(each[label])
            ]
    return {"scenario": scenario.name, "baseline": baseline, "first_s": first_s, "rows": rows}


def table4_of_runs(run_dirs: Sequence[Path], first_s: float = FIRST_S) -> dict[str, Any]:
    """``quell ic2 table4``: ``table4`` of recorded runs of one scenario, each labelled by the
    policy it ran (its ``label``, else its name), the first one's the baseline. Runs whose
    scenarios differ beyond the policy are refused, as is a ``first_s`` that is not positive."""
    from quell.studies.ic2.campaign import recorded_scenario

    problems = []
    if not first_s > 0:
        problems.append(Problem("--first-s", f"must be > 0, got {first_s:g}"))
    labelled: list[tuple[str, Path]] = []
    scenarios: list[dict[str, Any]] = []
    for d in run_dirs:
        with RunStore.open(d) as store:
            recorded = recorded_scenario(store, d)
        pol = recorded.get("policy") or {}
        labelled.append((str(pol.get("label") or pol.get("name") or d.name), d))
        scenarios.append({k: v for k, v in recorded.items() if k not in ("policy", "compare")})
    if any(s != scenarios[0] for s in scenarios[1:]):
        message = "are not runs of one scenario (they differ beyond the policy)"
        problems.append(Problem("RUN_DIRS", message))
    if problems:
        raise InputError("quell ic2 table4", problems)
    scenario = Scenario.model_validate({**scenarios[0], "policy": {"name": "static"}})
    return table4(scenario, labelled, first_s)


__all__ = ["FIRST_S", "period_rt", "sent_rt", "table4", "table4_of_runs"]

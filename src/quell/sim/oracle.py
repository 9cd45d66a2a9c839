"""The oracle: the fewest instances that could have met the response-time target, interval by
interval, had someone known every host's true available capacity and the load in advance.

Model: every instance is an M/G/1 processor-sharing server (its host's link), so its mean
response time is (S / C) / (1 − λS / C) whatever the size distribution (PS insensitivity), with
S the mean request size, C the capacity its host has left and λ its arrival rate. Mean RT ≤ R_th
holds while λ ≤ λ_max = (C − S / R_th) / S. One instance per host, on the hosts a policy may use
(``scaling.hosts`` and the hosts of the initial instances): the fewest that carry the interval's
load λ are the hosts with the largest λ_max, taken in descending order until their sum is ≥ λ.

What "true available capacity" means here, per host and interval: the time average over the
interval of the link capacity left by neighbours with a bitrate (``service.interference`` and
iperf3 antagonists with ``bitrate_mbit``: C − min(taken, 95 % of C), exactly what the simulator
applies). An iperf3 with unlimited streams (k jobs that never finish) is approximated as leaving
C / (k + 1), what one request alone would get. Probes, stress-ng and ``service.slowdown`` are
not counted. The load is the simulator's own: λ = requests arriving in the interval / interval
length (from the scenario's request schedule), S = the mean of the run's drawn request sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem
from quell.scenario.model import Iperf3, Scenario
from quell.scenario.schedule import build_schedule
from quell.scenario.service import ServiceModel
from quell.sim.service import MAX_TAKEN_SHARE, draw_sizes, interference_changes
from quell.workload.schedule import RequestSchedule


def max_rate_rps(
    capacity_bytes_per_s: NDArray[np.float64] | float, mean_size_bytes: float, target_rt_s: float
) -> NDArray[np.float64]:
    """λ_max = (C − S / R_th) / S: the highest arrival rate an M/G/1-PS server of capacity C
    takes with mean response time ≤ R_th (0 where even an idle server is too slow)."""
    c = np.nan_to_num(np.asarray(capacity_bytes_per_s, dtype=np.float64), nan=0.0)
    return np.maximum((c - mean_size_bytes / target_rt_s) / mean_size_bytes, 0.0)


def fewest_instances(
    capacity_bytes_per_s: NDArray[np.float64],
    rate_rps: NDArray[np.float64],
    mean_size_bytes: float,
    target_rt_s: float,
    min_instances: int = 1,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Per interval (rows of ``capacity_bytes_per_s``, one column per available host): the
    fewest instances whose λ_max, largest first, sum to at least the interval's ``rate_rps``
    (never fewer than ``min_instances``), and whether even every host together falls short
    (then the count is every host)."""
    lam_max = -np.sort(-max_rate_rps(capacity_bytes_per_s, mean_size_bytes, target_rt_s), axis=1)
    total = np.cumsum(lam_max, axis=1)
    n_hosts = lam_max.shape[1]
    short = (total < rate_rps[:, None]).sum(axis=1)
    count = np.minimum(short + 1, n_hosts)
    count = np.maximum(count, min(min_instances, n_hosts))
    infeasible = total[:, -1] < rate_rps if n_hosts else np.ones(rate_rps.size, dtype=np.bool_)
    return count.astype(np.int64), infeasible


@dataclass(frozen=True)
class OracleResult:
    hosts: tuple[str, ...]
    """The hosts it may choose from."""
    interval_end_s: NDArray[np.float64]
    interval_s: NDArray[np.float64]
    rate_rps: NDArray[np.float64]
    mean_size_bytes: float
    capacity_bytes_per_s: NDArray[np.float64]
    """Mean available capacity per (interval, host)."""
    instances: NDArray[np.int64]
    infeasible: NDArray[np.bool_]

    @property
    def instance_seconds(self) -> float:
        return float((self.instances * self.interval_s).sum())

    def to_dict(self) -> dict[str, object]:
        return {
            "instance_seconds": round(self.instance_seconds, 3),
            "infeasible_intervals": int(self.infeasible.sum()),
            "mean_instances": round(self.instance_seconds / float(self.interval_s.sum()), 3),
            "max_instances": int(self.instances.max(initial=0)),
            "mean_size_bytes": round(self.mean_size_bytes, 1),
        }


def interval_edges(scenario: Scenario) -> NDArray[np.float64]:
    """0 and the end of every control interval (the loop's ticks; the last one is the end)."""
    n = round(scenario.duration_s / scenario.interval_s)
    ticks = np.minimum(np.arange(1, n + 1) * scenario.interval_s, scenario.duration_s)
    return np.concatenate([[0.0], ticks])


def available_hosts(scenario: Scenario) -> list[str]:
    """Hosts of the initial instances, then ``scaling.hosts``, each once."""
    hosts = [i.host for i in scenario.instances] + list(
        scenario.scaling.hosts if scenario.scaling else []
    )
    return list(dict.fromkeys(hosts))


def _step_means(
    times: NDArray[np.float64], values: NDArray[np.float64], edges: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Mean over each [edges[k], edges[k + 1]) of the step function that is ``values[j]`` from
    ``times[j]`` on (``times[0]`` = 0)."""
    end = max(float(edges[-1]), float(times[-1]))
    bp = np.append(times, end)
    area = np.concatenate([[0.0], np.cumsum(values * np.diff(bp))])
    f = np.interp(edges, bp, area)
    return np.asarray(np.diff(f) / np.diff(edges))


def host_capacity(scenario: Scenario, hosts: Sequence[str]) -> NDArray[np.float64]:
    """Mean available capacity (bytes/s) per (interval, host) as the module docstring defines
    it; hosts without ``link_mbit`` have ``service.capacity_bytes_per_s`` (NaN without it)."""
    svc = scenario.service or ServiceModel()
    edges = interval_edges(scenario)
    index = {h.id: j for j, h in enumerate(scenario.hosts)}
    it_t, it_h, it_level = interference_changes(
        svc.interference, scenario.hosts, scenario.duration_s, scenario.seed
    )
    # iperf3 on each host: (time, bytes/s taken by bitrate streams, unlimited streams)
    by_id = {a.id: a for a in scenario.antagonists if isinstance(a, Iperf3)}
    running: set[str] = set()
    ip: dict[str, list[tuple[float, float, float]]] = {}
    for ev in sorted(scenario.events, key=lambda e: e.at_s):
        touched = {by_id[a].host for a in [*ev.start, *ev.stop] if a in by_id}
        running |= {a for a in ev.start if a in by_id}
        running -= set(ev.stop)
        for host in touched:
            ants = [by_id[a] for a in running if by_id[a].host == host]
            taken = sum(a.streams * a.bitrate_mbit * 1e6 / 8.0 for a in ants if a.bitrate_mbit)
            streams = float(sum(a.streams for a in ants if a.bitrate_mbit is None))
            ip.setdefault(host, [(0.0, 0.0, 0.0)]).append((ev.at_s, taken, streams))
    out = np.full((edges.size - 1, len(hosts)), np.nan)
    for col, hid in enumerate(hosts):
        link_mbit = scenario.hosts[index[hid]].link_mbit
        if link_mbit is None:
            if svc.capacity_bytes_per_s is not None:
                out[:, col] = svc.capacity_bytes_per_s
            continue
        nominal = link_mbit * 1e6 / 8.0
        mine = it_h == index[hid]
        i_t = np.concatenate([[0.0], it_t[mine]])
        i_v = np.concatenate([[0.0], it_level[mine]])
        steps = ip.get(hid, [(0.0, 0.0, 0.0)])
        p_t = np.asarray([s[0] for s in steps])
        p_taken = np.asarray([s[1] for s in steps])
        p_streams = np.asarray([s[2] for s in steps])
        t = np.union1d(i_t, p_t)
        interf = i_v[np.searchsorted(i_t, t, side="right") - 1]
        k = np.searchsorted(p_t, t, side="right") - 1
        taken = np.minimum(p_taken[k] + interf, MAX_TAKEN_SHARE * nominal)
        out[:, col] = _step_means(t, (nominal - taken) / (1.0 + p_streams[k]), edges)
    return out


def run_oracle(
    scenario: Scenario,
    base_dir: Path = Path("."),
    schedule: RequestSchedule | None = None,
    sizes_bytes: NDArray[np.float64] | None = None,
) -> OracleResult:
    """The oracle for ``scenario`` (which needs ``target.mean_rt_s``). ``schedule`` and
    ``sizes_bytes`` default to what the simulator draws from the scenario's seed."""
    if scenario.target is None:
        raise InputError(
            scenario.name, [Problem("target.mean_rt_s", "the oracle needs a response-time target")]
        )
    svc = scenario.service or ServiceModel()
    if schedule is None:
        schedule = build_schedule(scenario, base_dir)
    if sizes_bytes is None:
        sizes_bytes = draw_sizes(svc.size, schedule.size_bytes, scenario.seed)
    edges = interval_edges(scenario)
    widths = np.diff(edges)
    counts, _ = np.histogram(schedule.times_s, bins=edges)
    rate = counts / widths
    mean_size = float(sizes_bytes.mean()) if sizes_bytes.size else 1.0
    hosts = available_hosts(scenario)
    cap = host_capacity(scenario, hosts)
    min_inst = scenario.scaling.min_instances if scenario.scaling else 1
    inst, infeasible = fewest_instances(cap, rate, mean_size, scenario.target.mean_rt_s, min_inst)
    return OracleResult(
        hosts=tuple(hosts),
        interval_end_s=edges[1:],
        interval_s=widths,
        rate_rps=rate,
        mean_size_bytes=mean_size,
        capacity_bytes_per_s=cap,
        instances=inst,
        infeasible=infeasible,
    )

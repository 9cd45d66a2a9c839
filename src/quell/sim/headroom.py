"""The oracle (``quell.models.oracle``) on a scenario: what each host has left for the service,
interval by interval, as the simulator applies its neighbours, and the load as the simulator
draws it.

The hosts: those of the initial instances, then ``scaling.hosts``. The intervals: the control
loop's ticks. A host's capacity left: its link, less what the neighbours with a bitrate take
(``service.interference`` and iperf3 antagonists with ``bitrate_mbit``, at most 95 % of the
link: exactly what the simulator applies), shared with iperf3's unlimited streams as the
model's k; a host without ``link_mbit`` has ``service.capacity_bytes_per_s`` (NaN without it).
Probes, stress-ng and ``service.slowdown`` are not counted. The load: the scenario's request
schedule, S the mean of the run's drawn request sizes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem
from quell.models.oracle import OracleResult, capacity_left, interval_means, oracle
from quell.scenario.model import Iperf3, Scenario
from quell.scenario.schedule import build_schedule
from quell.scenario.service import ServiceModel
from quell.sim.service import MAX_TAKEN_SHARE, draw_sizes, interference_changes
from quell.workload.schedule import RequestSchedule


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


def _iperf3_steps(scenario: Scenario) -> dict[str, list[tuple[float, float, float]]]:
    """Per host, from each event on that starts or stops an iperf3 there: (time, bytes/s its
    bitrate streams take, its unlimited streams)."""
    by_id = {a.id: a for a in scenario.antagonists if isinstance(a, Iperf3)}
    running: set[str] = set()
    steps: dict[str, list[tuple[float, float, float]]] = {}
    for ev in sorted(scenario.events, key=lambda e: e.at_s):
        touched = {by_id[a].host for a in [*ev.start, *ev.stop] if a in by_id}
        running |= {a for a in ev.start if a in by_id}
        running -= set(ev.stop)
        for host in touched:
            ants = [by_id[a] for a in running if by_id[a].host == host]
            taken = sum(a.streams * a.bitrate_mbit * 1e6 / 8.0 for a in ants if a.bitrate_mbit)
            streams = float(sum(a.streams for a in ants if a.bitrate_mbit is None))
            steps.setdefault(host, [(0.0, 0.0, 0.0)]).append((ev.at_s, taken, streams))
    return steps


def host_capacity(scenario: Scenario, hosts: Sequence[str]) -> NDArray[np.float64]:
    """Mean capacity left (bytes/s) per (interval, host), as the module docstring defines it."""
    svc = scenario.service or ServiceModel()
    edges = interval_edges(scenario)
    index = {h.id: j for j, h in enumerate(scenario.hosts)}
    it_t, it_h, it_level = interference_changes(
        svc.interference, scenario.hosts, scenario.duration_s, scenario.seed
    )
    iperf3 = _iperf3_steps(scenario)
    out = np.full((edges.size - 1, len(hosts)), np.nan)
    for col, hid in enumerate(hosts):
        link_mbit = scenario.hosts[index[hid]].link_mbit
        if link_mbit is None:
            if svc.capacity_bytes_per_s is not None:
                out[:, col] = svc.capacity_bytes_per_s
            continue
        mine = it_h == index[hid]
        i_t = np.concatenate([[0.0], it_t[mine]])
        i_v = np.concatenate([[0.0], it_level[mine]])
        steps = iperf3.get(hid, [(0.0, 0.0, 0.0)])
        p_t = np.asarray([s[0] for s in steps])
        p_taken = np.asarray([s[1] for s in steps])
        p_streams = np.asarray([s[2] for s in steps])
        t = np.union1d(i_t, p_t)
        interf = i_v[np.searchsorted(i_t, t, side="right") - 1]
        k = np.searchsorted(p_t, t, side="right") - 1
        nominal = link_mbit * 1e6 / 8.0
        left = capacity_left(nominal, p_taken[k] + interf, p_streams[k], MAX_TAKEN_SHARE)
        out[:, col] = interval_means(t, left, edges)
    return out


def run_oracle(
    scenario: Scenario, base_dir: Path = Path("."), schedule: RequestSchedule | None = None
) -> OracleResult:
    """The oracle for ``scenario`` (which needs ``target.mean_rt_s``) on its request
    ``schedule`` (default: built from the scenario, traces read under ``base_dir``) and the
    request sizes the simulator draws from its seed."""
    if scenario.target is None:
        raise InputError(
            scenario.name, [Problem("target.mean_rt_s", "the oracle needs a response-time target")]
        )
    svc = scenario.service or ServiceModel()
    if schedule is None:
        schedule = build_schedule(scenario, base_dir)
    sizes_bytes = draw_sizes(svc.size, schedule.size_bytes, scenario.seed)
    hosts = available_hosts(scenario)
    return oracle(
        hosts,
        interval_edges(scenario),
        schedule.times_s,
        float(sizes_bytes.mean()) if sizes_bytes.size else 1.0,
        host_capacity(scenario, hosts),
        scenario.target.mean_rt_s,
        scenario.scaling.min_instances if scenario.scaling else 1,
    )

"""The load a scenario asks for. Open loop: the request schedule, its arrival process over its
duration, each request for a file of its mix (or its video sessions' chunks), cut at
``workload.max_requests``; the lab replays it, the simulator consumes the same one. Closed
loop: the population of users (``quell.workload.population``), whose requests depend on the
answers and so are drawn as the run goes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quell.core.rng import component_rng
from quell.errors import InputError, Problem
from quell.scenario.model import Scenario
from quell.workload.arrival import build_arrival
from quell.workload.population import Population
from quell.workload.schedule import RequestSchedule, mix_schedule
from quell.workload.sessions import video_schedule
from quell.workload.spec import ClosedLoopSpec


def build_schedule(scenario: Scenario, base_dir: Path = Path(".")) -> RequestSchedule:
    """The full request schedule of a scenario, cut at ``workload.max_requests``. Closed-loop
    users have none (when they send depends on the answers): ``InputError``."""
    wl = scenario.workload
    if isinstance(wl.arrival, ClosedLoopSpec):
        raise InputError(
            scenario.name,
            [
                Problem(
                    "workload.arrival",
                    "closed-loop users have no request schedule fixed in advance; this command "
                    "needs an open-loop arrival process",
                )
            ],
        )
    if wl.sessions is not None:
        sched = video_schedule(
            wl.sessions, wl.arrival, scenario.duration_s, scenario.seed, base_dir
        )
    else:
        assert wl.requests is not None
        times = build_arrival(wl.arrival, base_dir).times(
            scenario.duration_s, component_rng(scenario.seed, "workload/arrivals")
        )
        sched = mix_schedule(
            times,
            tuple(r.path for r in wl.requests),
            np.array([r.weight for r in wl.requests], dtype=np.float64),
            {f.path: f.size_bytes for f in scenario.files}
            | {p.path: p.response_bytes for p in scenario.pages},
            component_rng(scenario.seed, "workload/paths"),
        )
    return sched.cut(wl.max_requests)


def build_population(scenario: Scenario) -> Population | None:
    """The closed-loop users of a scenario (``workload.arrival.process: closed``); None for an
    open-loop one."""
    wl = scenario.workload
    if not isinstance(wl.arrival, ClosedLoopSpec):
        return None
    assert wl.requests is not None  # closed loops have no video sessions (check_scenario)
    return Population.of(
        wl.arrival,
        [(r.path, r.weight) for r in wl.requests],
        scenario.duration_s,
        wl.max_requests,
        scenario.seed,
    )

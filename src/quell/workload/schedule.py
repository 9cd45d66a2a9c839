"""A request schedule: when each request is sent and what it asks for. Precomputed from the
scenario seed so the lab can replay it exactly and the simulator can consume the same one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.scenario.model import Scenario
from quell.workload.arrival import build_arrival
from quell.workload.sessions import video_schedule


@dataclass(frozen=True)
class RequestSchedule:
    times_s: NDArray[np.float64]
    path_index: NDArray[np.int32]
    paths: tuple[str, ...]
    sizes_bytes: tuple[int, ...]

    def __len__(self) -> int:
        return int(self.times_s.size)

    @property
    def size_bytes(self) -> NDArray[np.int64]:
        return np.asarray(self.sizes_bytes, dtype=np.int64)[self.path_index]


def build_schedule(scenario: Scenario, base_dir: Path = Path(".")) -> RequestSchedule:
    """The full request schedule of a scenario, cut at ``workload.max_requests``."""
    wl = scenario.workload
    if wl.sessions is not None:
        sched = video_schedule(scenario, base_dir)
    else:
        assert wl.requests is not None
        times = build_arrival(wl.arrival, base_dir).times(
            scenario.duration_s, component_rng(scenario.seed, "workload/arrivals")
        )
        paths = tuple(r.path for r in wl.requests)
        size_of = {f.path: f.size_bytes for f in scenario.files}
        weights = np.array([r.weight for r in wl.requests], dtype=np.float64)
        pick = component_rng(scenario.seed, "workload/paths").choice(
            len(paths), size=times.size, p=weights / weights.sum()
        )
        sched = RequestSchedule(
            times, pick.astype(np.int32), paths, tuple(size_of[p] for p in paths)
        )
    n = min(len(sched), wl.max_requests)
    return RequestSchedule(sched.times_s[:n], sched.path_index[:n], sched.paths, sched.sizes_bytes)

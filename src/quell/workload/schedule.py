"""A request schedule: when each request is sent and what it asks for. Precomputed from a seed
so the lab can replay it exactly and the simulator can consume the same one
(``quell.scenario.schedule`` builds a scenario's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


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

    def cut(self, max_requests: int) -> RequestSchedule:
        """The first ``max_requests`` requests."""
        n = min(len(self), max_requests)
        return RequestSchedule(self.times_s[:n], self.path_index[:n], self.paths, self.sizes_bytes)


def mix_schedule(
    times_s: NDArray[np.float64],
    paths: tuple[str, ...],
    weights: NDArray[np.float64],
    size_of: dict[str, int],
    rng: np.random.Generator,
) -> RequestSchedule:
    """Requests at ``times_s``, each for one of ``paths`` drawn with probabilities ∝ ``weights``
    (with one path, nothing is drawn)."""
    if len(paths) == 1:
        pick = np.zeros(times_s.size, dtype=np.int32)
    else:
        pick = rng.choice(len(paths), size=times_s.size, p=weights / weights.sum()).astype(np.int32)
    return RequestSchedule(times_s, pick, paths, tuple(size_of[p] for p in paths))

"""The attribution campaign on this machine: which cells are measured, and what is computed
from them.

Training (schedule seed 1, 7,500 requests a run): the service uncontended at 1, 2 and 3 worker
processes, and under stress-ng ``cpu``, ``matrix`` and ``hrtimers`` tenants (1 and 3 at one
worker; ``cpu`` and ``matrix``, 2 at two and three workers): two that hold the CPU and one that
wakes tens of thousands of times a second and so preempts the service. Held out (schedule seed 2, 50,000 requests a run, the seed's experiment
size): the Fig. 3 grid (``cpu`` tenants 0, 1, 2, 4 × service workers 1, 2, 3), tenant kinds
never trained on (stress-ng ``cache`` and ``switch``, fio on the disk, iperf3 over loopback; 2
tenants at one worker), and the customer's own slowdown (every request twice as heavy, no
tenant). Fig. 4 (schedule seed 3, 10,000 requests): the service alone and beside a periodic
clamav scan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from quell.studies.attribution.experiment import Cell

TRAIN_SEED: Final = 1
TEST_SEED: Final = 2
TRAIN_REQUESTS: Final = 7_500
"""Per training run: eleven runs, 82,500 requests, of which 80 % (66,000) are fitted on."""
TEST_REQUESTS: Final = 50_000
"""Per held-out run: about the seed's 50,000 requests per experiment, so each Fig. 3 cell's p99
rests on 500 requests above it."""
PERIODIC_REQUESTS: Final = 10_000
LOADS: Final = (1, 2, 3)
GRID_TENANTS: Final = (0, 1, 2, 4)
TRAIN_KINDS: Final = ("cpu", "matrix", "hrtimers")
HELD_OUT_KINDS: Final = ("cache", "switch", "fio", "iperf3")
"""Tenant kinds never trained on: two stress-ng stressors, disk I/O and loopback traffic."""


def _cell(prefix: str, seed: int, stressor: str, tenants: int, workers: int, **kw: Any) -> Cell:
    what = "clean" if tenants == 0 else f"{stressor}{tenants}"
    return Cell(f"{prefix}-{what}-w{workers}", seed, workers, stressor, tenants, **kw)


def train_cells(requests: int = TRAIN_REQUESTS) -> list[Cell]:
    cells = [_cell("train", TRAIN_SEED, "cpu", 0, w, requests=requests) for w in LOADS]
    for kind in TRAIN_KINDS:
        cells += [_cell("train", TRAIN_SEED, kind, n, 1, requests=requests) for n in (1, 3)]
    cells += [_cell("train", TRAIN_SEED, "cpu", 2, 2, requests=requests)]
    cells += [_cell("train", TRAIN_SEED, "matrix", 2, 3, requests=requests)]
    return cells


def test_cells(requests: int = TEST_REQUESTS) -> list[Cell]:
    cells = [
        _cell("test", TEST_SEED, "cpu", n, w, requests=requests)
        for n in GRID_TENANTS
        for w in LOADS
    ]
    cells += [_cell("test", TEST_SEED, kind, 2, 1, requests=requests) for kind in HELD_OUT_KINDS]
    cells.append(Cell("test-heavy-w1", TEST_SEED, 1, "cpu", 0, cpu_scale=2.0, requests=requests))
    return cells


PERIODIC_SEED: Final = 3
SCAN_MB: Final = 128
SCAN_PERIOD_S: Final = 10.0


def periodic_cells(requests: int = PERIODIC_REQUESTS) -> list[Cell]:
    """Fig. 4 (schedule seed 3, one worker): the service alone, and beside a clamav scan of
    128 MiB (about 2.3 s of one CPU here) started every 10 s in a cgroup of its own."""
    return [
        Cell("periodic-clean-w1", PERIODIC_SEED, 1, "cpu", 0, requests=requests),
        Cell(
            "periodic-scan-w1",
            PERIODIC_SEED,
            1,
            "cpu",
            0,
            requests=requests,
            scan_mb=SCAN_MB,
            scan_period_s=SCAN_PERIOD_S,
        ),
    ]


PARTS: Final[dict[str, Callable[..., list[Cell]]]] = {
    "train": train_cells,
    "test": test_cells,
    "periodic": periodic_cells,
}


def p99_scatter_seconds(latency_s: np.ndarray, seed: int = 0, rounds: int = 400) -> float:
    """Half the width of the bootstrap 95 % interval of a run's latency p99: the run's own
    scatter, against which a clean run's attributed p99 is judged."""
    rng = np.random.default_rng(seed)
    n = len(latency_s)
    boots = [np.percentile(latency_s[rng.integers(0, n, n)], 99) for _ in range(rounds)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(hi - lo) / 2


@dataclass(frozen=True)
class Group:
    """Runs of one schedule at one service load: the uncontended run and the others."""

    clean: str
    contended: tuple[str, ...]

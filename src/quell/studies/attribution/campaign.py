"""The attribution campaign on this machine: which cells are measured, and what is computed
from them.

Training (schedule seed 1, 6,000 requests a run): the service uncontended at 1, 2 and 3 worker
processes, and under stress-ng ``cpu``, ``matrix`` and ``hrtimers`` tenants (1 and 3 at one
worker; ``cpu`` 2 and 4 at two workers, ``matrix`` 2 and 4 at three, ``matrix`` 4 at one and
``hrtimers`` 2 at two): two kinds that hold the CPU and one that wakes tens of thousands of
times a second and so preempts the service, from 1 to 4 tenants at every load. Held out (schedule seed 2, 50,000 requests a run, the seed's experiment
size): the Fig. 3 grid (``cpu`` tenants 0, 1, 2, 4 × service workers 1, 2, 3), tenant kinds
never trained on (stress-ng ``cache`` and ``switch``, fio on the disk, iperf3 over loopback; 2
tenants at one worker), and the customer's own slowdown (every request twice as heavy, no
tenant). Fig. 4 (schedule seed 3, 10,000 requests): the service beside a light background
tenant, and beside it and a periodic clamav scan (and alone, the labels' reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from quell.studies.attribution.experiment import Cell, run_cells

TRAIN_SEED: Final = 1
TEST_SEED: Final = 2
TRAIN_REQUESTS: Final = 6_000
"""Per training run: fifteen runs, 90,000 requests, of which 80 % (72,000) are fitted on."""
TEST_REQUESTS: Final = 50_000
"""Per held-out run: about the seed's 50,000 requests per experiment, so each Fig. 3 cell's p99
rests on 500 requests above it."""
PERIODIC_REQUESTS: Final = 10_000
LOADS: Final = (1, 2, 3)
GRID_TENANTS: Final = (0, 1, 2, 4)
TRAIN_KINDS: Final = ("cpu", "matrix", "hrtimers")
HELD_OUT_KINDS: Final = ("cache", "switch", "fio", "iperf3")
"""Tenant kinds never trained on: two stress-ng stressors, disk I/O and loopback traffic."""
HELD_OUT_STRESS_NG: Final = ("cache", "switch")
"""The held-out kinds the issue's acceptance names: stress-ng classes never trained on ("train
on some stress-ng classes, test on others"). fio and iperf3 are other kinds of tenant again,
scored beside them and with them, not in that figure."""


def _cell(prefix: str, seed: int, stressor: str, tenants: int, workers: int, **kw: Any) -> Cell:
    what = "clean" if tenants == 0 else f"{stressor}{tenants}"
    return Cell(f"{prefix}-{what}-w{workers}", seed, workers, stressor, tenants, **kw)


def train_cells(requests: int = TRAIN_REQUESTS) -> list[Cell]:
    cells = [_cell("train", TRAIN_SEED, "cpu", 0, w, requests=requests) for w in LOADS]
    for kind in TRAIN_KINDS:
        cells += [_cell("train", TRAIN_SEED, kind, n, 1, requests=requests) for n in (1, 3)]
    more = [("cpu", 2, 2), ("cpu", 4, 2), ("hrtimers", 2, 2), ("matrix", 2, 3), ("matrix", 4, 3)]
    more.append(("matrix", 4, 1))
    cells += [_cell("train", TRAIN_SEED, kind, n, w, requests=requests) for kind, n, w in more]
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
BACKGROUND_LOAD_PCT: Final = 30
"""Fig. 4's background: one ``cpu`` tenant busy 30 % of the time (the seed's "overall contention
low (30 %)")."""


def periodic_cells(requests: int = PERIODIC_REQUESTS) -> list[Cell]:
    """Fig. 4 (schedule seed 3, one worker), as the seed compares two cases: the service beside
    a light background (one ``cpu`` tenant at 30 %), and beside the same background and a
    clamav scan of 128 MiB (about 3 s of one CPU here) started every 10 s, each in a cgroup of
    its own on the service's CPU. The service alone is measured too: the labels' reference."""

    def beside(name: str, scan_mb: int = 0) -> Cell:
        return Cell(
            name,
            PERIODIC_SEED,
            1,
            "cpu",
            1,
            requests=requests,
            scan_mb=scan_mb,
            scan_period_s=SCAN_PERIOD_S,
            tenant_load_pct=BACKGROUND_LOAD_PCT,
        )

    return [
        Cell("periodic-clean-w1", PERIODIC_SEED, 1, "cpu", 0, requests=requests),
        beside("periodic-base-w1"),
        beside("periodic-scan-w1", SCAN_MB),
    ]


PARTS: Final[dict[str, Callable[..., list[Cell]]]] = {
    "train": train_cells,
    "test": test_cells,
    "periodic": periodic_cells,
}


def measure(
    out: Path,
    part: str = "train",
    cpu: int = 1,
    requests: int | None = None,
    ebpf: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """``quell attribute measure``: the cells of ``part`` (at ``requests`` a run, default the
    part's own) run on ``cpu`` of this machine into ``out/<cell>/``, those measured already
    kept (``run_cells``); with ``ebpf`` the run-queue split attached for them, its per-thread
    map inherited by the service. Needs root; a bad part or CPU is named before anything
    starts."""
    import os

    from quell.errors import InputError, PrerequisiteError, Problem

    problems = []
    if part not in PARTS:
        problems.append(Problem("--part", f"one of {', '.join(PARTS)}, not {part!r}"))
    if cpu not in os.sched_getaffinity(0):
        problems.append(Problem("--cpu", f"CPU {cpu} is not available here"))
    if problems:
        raise InputError("quell attribute measure", problems)
    if os.geteuid() != 0:
        raise PrerequisiteError("root", "cgroups for the service and its tenants")
    cells = PARTS[part]() if requests is None else PARTS[part](requests)
    if not ebpf:
        return run_cells(cells, out, cpu, progress)
    from quell.instrument import bpf

    with bpf.attached() as split:
        return run_cells(cells, out, cpu, progress, rq_threads_fd=split.threads_fd())


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

"""Cap a control group's CPU bandwidth (CFS quota per period)."""

from __future__ import annotations

import math
from pathlib import Path

from quell.errors import ComponentError, InputError, Problem
from quell.signals.cgroup import CgroupLayout, group_dir

MIN_QUOTA_US = 1_000  # the kernel rejects quotas below 1 ms
MIN_PERIOD_US = 1_000
MAX_PERIOD_US = 1_000_000


def _write(path: Path, text: str) -> None:
    try:
        with path.open("w") as f:
            f.write(text)
    except OSError as exc:
        raise ComponentError("cgroup", f"writing {text!r} to {path}: {exc}") from exc


def set_cpu_cap(
    layout: CgroupLayout, group: str, cpus: float | None, period_us: int = 100_000
) -> None:
    """Limit ``group`` to ``cpus`` CPUs' worth of time per period; None removes the cap.

    v1 writes ``cpu.cfs_period_us`` then ``cpu.cfs_quota_us`` (-1 = unlimited);
    v2 writes ``cpu.max`` as ``"<quota> <period>"`` or ``"max <period>"``.
    """
    problems: list[Problem] = []
    if not MIN_PERIOD_US <= period_us <= MAX_PERIOD_US:
        problems.append(
            Problem("period_us", f"{period_us} is not in {MIN_PERIOD_US}..{MAX_PERIOD_US}")
        )
    quota_us: int | None = None
    if cpus is not None:
        if not math.isfinite(cpus) or cpus <= 0:
            problems.append(Problem("cpus", f"{cpus} must be a positive number"))
        else:
            quota_us = round(cpus * period_us)
            if quota_us < MIN_QUOTA_US:
                problems.append(
                    Problem("cpus", f"{cpus} CPUs is a quota of {quota_us} µs, below 1000 µs")
                )
    if problems:
        raise InputError("set_cpu_cap", problems)
    if layout.cpu is None:
        raise ComponentError("cgroup", f"layout under {layout.root} has no cpu controller")

    directory = group_dir(layout.cpu, group)
    if not directory.is_dir():
        raise ComponentError("cgroup", f"group {directory} does not exist")
    if layout.version == "v1":
        _write(directory / "cpu.cfs_period_us", f"{period_us}\n")
        _write(directory / "cpu.cfs_quota_us", f"{-1 if quota_us is None else quota_us}\n")
    else:
        quota = "max" if quota_us is None else str(quota_us)
        _write(directory / "cpu.max", f"{quota} {period_us}\n")


MIN_SHARES = 2
MAX_SHARES = 262_144


def set_cpu_shares(layout: CgroupLayout, group: str, shares: int) -> None:
    """The group's CFS weight: v1 ``cpu.shares`` (2..262144, default 1024); on v2 the same
    proportion of ``cpu.weight`` (1..10000, default 100)."""
    if not MIN_SHARES <= shares <= MAX_SHARES:
        raise InputError("set_cpu_shares", [Problem("shares", f"{shares} is not in 2..262144")])
    if layout.cpu is None:
        raise ComponentError("cgroup", f"layout under {layout.root} has no cpu controller")
    directory = group_dir(layout.cpu, group)
    if not directory.is_dir():
        raise ComponentError("cgroup", f"group {directory} does not exist")
    if layout.version == "v1":
        _write(directory / "cpu.shares", f"{shares}\n")
    else:
        weight = min(10_000, max(1, round(shares * 100 / 1024)))
        _write(directory / "cpu.weight", f"{weight}\n")

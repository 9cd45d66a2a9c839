"""Per-core CPU time and soft-interrupt counts: ``/proc/stat`` ``cpuN`` lines and
``/proc/softirqs``. The multicore model needs, per core, how busy it was and how much of that
was soft-interrupt work (the paper's class a).

Readers take the procfs root so tests can point them at recorded files; nothing is read at
import time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError
from quell.signals.procfs import PROC, CpuTimes, parse_cpu_times


def parse_per_cpu_times(text: str) -> tuple[CpuTimes, ...]:
    """Every ``cpuN`` line of ``/proc/stat`` text, in CPU order (N = 0, 1, ...)."""
    numbers = sorted(
        int(parts[0][3:])
        for line in text.splitlines()
        if (parts := line.split()) and parts[0].startswith("cpu") and parts[0][3:].isdigit()
    )
    if not numbers:
        raise ComponentError("procfs", "no per-CPU lines in stat")
    return tuple(parse_cpu_times(text, n) for n in numbers)


def parse_softirqs(text: str) -> dict[str, tuple[int, ...]]:
    """``/proc/softirqs`` text: counts per vector (``NET_RX``, ``NET_TX``, ``TIMER``, ...) and
    CPU, since boot."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ComponentError("procfs", "softirqs is empty")
    header = lines[0].split()
    if not header or not all(h.startswith("CPU") for h in header):
        raise ComponentError("procfs", f"unexpected softirqs header {lines[0]!r}")
    out: dict[str, tuple[int, ...]] = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) != len(header):
            raise ComponentError("procfs", f"unexpected softirqs line {line!r}")
        try:
            out[name.strip()] = tuple(int(f) for f in fields)
        except ValueError as exc:
            raise ComponentError("procfs", f"softirqs line {line!r}: {exc}") from exc
    return out


@dataclass(frozen=True, slots=True)
class CoreSample:
    """Cumulative per-core CPU ticks and soft-interrupt counts at one instant."""

    time_s: float
    cpu: tuple[CpuTimes, ...]
    softirqs: dict[str, tuple[int, ...]]


def read_core_sample(proc_root: Path = PROC, now_s: float | None = None) -> CoreSample:
    """Read ``<proc_root>/stat`` and ``<proc_root>/softirqs`` together."""
    try:
        stat = (proc_root / "stat").read_text()
        soft = (proc_root / "softirqs").read_text()
    except OSError as exc:
        raise ComponentError("procfs", f"cannot read per-core counters: {exc}") from exc
    return CoreSample(
        time.monotonic() if now_s is None else now_s,
        parse_per_cpu_times(stat),
        parse_softirqs(soft),
    )


@dataclass(frozen=True, slots=True)
class CoreUsage:
    """What each core did between two samples: busy and soft-interrupt time as fractions of
    the core, and soft interrupts raised per second by vector."""

    interval_s: float
    busy: tuple[float, ...]
    softirq: tuple[float, ...]
    softirqs_per_s: dict[str, tuple[float, ...]]


def core_usage(before: CoreSample, after: CoreSample) -> CoreUsage:
    """Per-core usage between two samples. Busy is everything but idle and iowait."""
    if len(before.cpu) != len(after.cpu):
        raise ComponentError("procfs", "the number of CPUs changed between samples")
    interval = after.time_s - before.time_s
    if interval <= 0:
        raise ComponentError("procfs", "samples are not in time order")
    busy, soft = [], []
    for b, a in zip(before.cpu, after.cpu, strict=True):
        total = a.total - b.total
        if total <= 0:
            busy.append(0.0)
            soft.append(0.0)
            continue
        idle = (a.idle - b.idle) + (a.iowait - b.iowait)
        busy.append(1.0 - idle / total)
        soft.append((a.softirq - b.softirq) / total)
    rates = {
        name: tuple((y - x) / interval for x, y in zip(before.softirqs[name], counts, strict=True))
        for name, counts in after.softirqs.items()
        if name in before.softirqs
    }
    return CoreUsage(interval, tuple(busy), tuple(soft), rates)

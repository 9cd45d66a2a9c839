"""Host and per-process kernel signals read from procfs: CPU ticks, PSI, schedstat, net/dev.

Every reader takes the procfs root as an argument so tests can point it at recorded files.
Nothing is cached and nothing is read at import time.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from quell.errors import ComponentError

PROC = Path("/proc")

_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One ``cpu``/``cpuN`` line of ``/proc/stat``, in USER_HZ ticks since boot."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        """All eight fields; guest time is already counted in ``user`` (and guest_nice in ``nice``)."""
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )


def parse_cpu_times(text: str, cpu: int | None = None) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat`` text, or the ``cpuN`` line when ``cpu`` is N."""
    label = "cpu" if cpu is None else f"cpu{cpu}"
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != label:
            continue
        values = parts[1:]
        if len(values) < len(_CPU_FIELDS):
            raise ComponentError(
                "procfs", f"stat line {label!r} has {len(values)} fields, need {len(_CPU_FIELDS)}"
            )
        try:
            ticks = [int(v) for v in values[: len(_CPU_FIELDS)]]
        except ValueError as exc:
            raise ComponentError("procfs", f"stat line {label!r}: {exc}") from exc
        return CpuTimes(*ticks)
    raise ComponentError("procfs", f"no {label!r} line in stat")


def read_cpu_times(proc_root: Path = PROC, cpu: int | None = None) -> CpuTimes:
    """``<proc_root>/stat``: the aggregate ``cpu`` line, or ``cpuN`` when ``cpu`` is given."""
    return parse_cpu_times((proc_root / "stat").read_text(), cpu)


@dataclass(frozen=True, slots=True)
class Pressure:
    """A PSI file (system-wide or per cgroup2 group). Totals are cumulative µs stalled."""

    some_avg10: float
    some_total_us: int
    full_avg10: float | None
    full_total_us: int | None


def _psi_line(kind: str, fields: list[str]) -> tuple[float, int]:
    values: dict[str, str] = {}
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep:
            raise ComponentError("procfs", f"pressure {kind!r} field {field!r} is not key=value")
        values[key] = value
    try:
        return float(values["avg10"]), int(values["total"])
    except KeyError as exc:
        raise ComponentError("procfs", f"pressure {kind!r} line lacks {exc.args[0]}") from exc
    except ValueError as exc:
        raise ComponentError("procfs", f"pressure {kind!r} line: {exc}") from exc


def parse_pressure(text: str) -> Pressure:
    """Parse PSI text: a ``some`` line and, on kernels ≥5.13 for cpu, a ``full`` line."""
    lines: dict[str, tuple[float, int]] = {}
    for raw in text.splitlines():
        parts = raw.split()
        if not parts:
            continue
        if parts[0] not in ("some", "full"):
            raise ComponentError("procfs", f"unexpected pressure line {raw!r}")
        lines[parts[0]] = _psi_line(parts[0], parts[1:])
    if "some" not in lines:
        raise ComponentError("procfs", "pressure text has no 'some' line")
    some_avg10, some_total = lines["some"]
    full = lines.get("full")
    return Pressure(
        some_avg10=some_avg10,
        some_total_us=some_total,
        full_avg10=None if full is None else full[0],
        full_total_us=None if full is None else full[1],
    )


def read_pressure(path: Path) -> Pressure | None:
    """A PSI file, or None when it does not exist (or PSI is switched off for it)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        # PSI disabled (psi=0, or cgroup.pressure set to 0) reads as EOPNOTSUPP.
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            return None
        raise
    return parse_pressure(text)


def read_system_pressure(
    resource: Literal["cpu", "memory", "io"], proc_root: Path = PROC
) -> Pressure | None:
    """System-wide PSI from ``<proc_root>/pressure/<resource>``; None on kernels without PSI."""
    return read_pressure(proc_root / "pressure" / resource)


@dataclass(frozen=True, slots=True)
class SchedStat:
    """Scheduler statistics: time on CPU, time runnable but waiting for a CPU, timeslices run."""

    run_ns: int
    wait_ns: int
    timeslices: int

    def __add__(self, other: SchedStat) -> SchedStat:
        return SchedStat(
            self.run_ns + other.run_ns,
            self.wait_ns + other.wait_ns,
            self.timeslices + other.timeslices,
        )


_ZERO_SCHEDSTAT = SchedStat(0, 0, 0)


def parse_schedstat(text: str) -> SchedStat:
    """The three numbers of a ``schedstat`` file."""
    parts = text.split()
    if len(parts) != 3:
        raise ComponentError("procfs", f"schedstat has {len(parts)} fields, expected 3: {text!r}")
    try:
        run_ns, wait_ns, slices = (int(p) for p in parts)
    except ValueError as exc:
        raise ComponentError("procfs", f"schedstat: {exc}") from exc
    return SchedStat(run_ns, wait_ns, slices)


def _process_schedstat(pid: int, proc_root: Path) -> SchedStat | None:
    """Sum over the threads of ``pid``; None when the process is gone."""
    task_dir = proc_root / str(pid) / "task"
    try:
        tids = [entry.name for entry in task_dir.iterdir()]
    except (FileNotFoundError, ProcessLookupError):
        return None
    total = _ZERO_SCHEDSTAT
    for tid in tids:
        try:
            text = (task_dir / tid / "schedstat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited between listing and reading
        total = total + parse_schedstat(text)
    return total


def read_process_schedstat(pid: int, proc_root: Path = PROC) -> SchedStat:
    """Whole-process schedstat: the sum of ``<proc_root>/<pid>/task/*/schedstat``.

    ``/proc/<pid>/schedstat`` alone covers only the main thread, hence the sum.
    Threads that vanish while reading are skipped; a vanished process raises ComponentError.
    """
    stat = _process_schedstat(pid, proc_root)
    if stat is None:
        raise ComponentError("procfs", f"process {pid} not found under {proc_root}")
    return stat


def read_processes_schedstat(pids: Iterable[int], proc_root: Path = PROC) -> SchedStat:
    """Schedstat summed over several processes; processes that vanished are skipped."""
    total = _ZERO_SCHEDSTAT
    for pid in pids:
        stat = _process_schedstat(pid, proc_root)
        if stat is not None:
            total = total + stat
    return total


def read_schedstat_by_process(pids: Iterable[int], proc_root: Path = PROC) -> dict[int, SchedStat]:
    """Each process's schedstat (summed over its threads); processes that vanished are left
    out."""
    out = {}
    for pid in pids:
        stat = _process_schedstat(pid, proc_root)
        if stat is not None:
            out[pid] = stat
    return out


def wait_since(before: Mapping[int, int], now: Mapping[int, int]) -> int:
    """Run-queue wait (ns) a changing set of processes added between two readings of each one's
    cumulative wait: a process in both adds its increase; one new since ``before`` (a worker
    started, or a server reloaded) all of its wait, since it began in between; one gone since
    loses its last part. A pid reused in between (a decrease) adds its new process's wait."""
    total = 0
    for pid, wait in now.items():
        prev = before.get(pid, 0)
        total += wait - prev if wait >= prev else wait
    return total


@dataclass(frozen=True, slots=True)
class NetDevCounters:
    """Cumulative counters of one interface from ``net/dev``."""

    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int


def parse_net_dev(text: str) -> dict[str, NetDevCounters]:
    """Parse ``net/dev`` text into counters per interface name."""
    out: dict[str, NetDevCounters] = {}
    for raw in text.splitlines():
        if "|" in raw or not raw.strip():
            continue  # the two header lines
        name, sep, rest = raw.partition(":")
        fields = rest.split()
        if not sep or len(fields) != 16:
            raise ComponentError("procfs", f"unexpected net/dev line {raw!r}")
        try:
            values = [int(f) for f in fields]
        except ValueError as exc:
            raise ComponentError("procfs", f"net/dev line {raw!r}: {exc}") from exc
        out[name.strip()] = NetDevCounters(
            rx_bytes=values[0], rx_packets=values[1], tx_bytes=values[8], tx_packets=values[9]
        )
    return out


def read_net_dev(pid: int | None = None, proc_root: Path = PROC) -> dict[str, NetDevCounters]:
    """Interfaces of the network namespace of ``pid`` (``<proc_root>/<pid>/net/dev``),
    or of the reader's namespace (``<proc_root>/net/dev``) when ``pid`` is None."""
    path = proc_root / "net" / "dev" if pid is None else proc_root / str(pid) / "net" / "dev"
    try:
        text = path.read_text()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ComponentError("procfs", f"cannot read {path}: {exc}") from exc
    return parse_net_dev(text)

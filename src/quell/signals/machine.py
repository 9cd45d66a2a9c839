"""What a run was measured on: the CPU model, logical CPUs, CPU caches, memory, kernel release
and whether it runs under a hypervisor, read from procfs and sysfs.

Lab results depend on the machine (a working set that is half of one machine's last-level
cache fits in another's), so a lab run records these beside its measurements. Both roots are
arguments, so tests point them at recorded files; nothing is read at import time. A file that
is missing leaves its field empty rather than failing the run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quell.signals.procfs import PROC

SYS = Path("/sys")

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True, slots=True)
class Cache:
    """One CPU cache as CPU 0 sees it (``/sys/devices/system/cpu/cpu0/cache/indexN``)."""

    level: int
    kind: str
    """``Data``, ``Instruction`` or ``Unified``."""
    size_bytes: int
    shared_cpu_list: str
    """The logical CPUs that share it, as the kernel lists them (``0-1``)."""


@dataclass(frozen=True, slots=True)
class Machine:
    cpu_model: str | None
    logical_cpus: int | None
    caches: tuple[Cache, ...]
    memory_bytes: int | None
    kernel_release: str | None
    hypervisor: bool | None
    """Whether the CPU flags say it runs under a hypervisor (``None``: no flags read)."""

    @property
    def last_level_cache_bytes(self) -> int | None:
        """The size of the highest-level data or unified cache, if any."""
        caches = [c for c in self.caches if c.kind != "Instruction"]
        return max(caches, key=lambda c: c.level).size_bytes if caches else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_model": self.cpu_model,
            "logical_cpus": self.logical_cpus,
            "caches": [
                {
                    "level": c.level,
                    "type": c.kind,
                    "size_bytes": c.size_bytes,
                    "shared_cpu_list": c.shared_cpu_list,
                }
                for c in self.caches
            ],
            "last_level_cache_bytes": self.last_level_cache_bytes,
            "memory_bytes": self.memory_bytes,
            "kernel_release": self.kernel_release,
            "hypervisor": self.hypervisor,
        }


def cache_size_bytes(text: str) -> int | None:
    """``48K`` → 49152; ``None`` for anything else."""
    m = _SIZE.match(text)
    return None if m is None else int(m.group(1)) * _UNITS[m.group(2)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_caches(sys_root: Path = SYS) -> tuple[Cache, ...]:
    """CPU 0's caches, by level then type; those whose files do not parse are left out."""
    base = sys_root / "devices" / "system" / "cpu" / "cpu0" / "cache"
    try:
        dirs = sorted(d for d in base.iterdir() if d.name.startswith("index"))
    except OSError:
        return ()
    out = []
    for d in dirs:
        level, kind, size, shared = (
            _read(d / name) for name in ("level", "type", "size", "shared_cpu_list")
        )
        size_bytes = None if size is None else cache_size_bytes(size)
        if level is None or not level.strip().isdigit() or kind is None or size_bytes is None:
            continue
        out.append(
            Cache(int(level), kind.strip(), size_bytes, "" if shared is None else shared.strip())
        )
    return tuple(sorted(out, key=lambda c: (c.level, c.kind)))


def read_machine(proc_root: Path = PROC, sys_root: Path = SYS) -> Machine:
    """The machine as ``proc_root`` and ``sys_root`` describe it."""
    model: str | None = None
    cpus: int | None = None
    hypervisor: bool | None = None
    cpuinfo = _read(proc_root / "cpuinfo")
    if cpuinfo is not None:
        cpus = 0
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "processor":
                cpus += 1
            elif key == "model name" and model is None:
                model = value.strip()
            elif key == "flags" and hypervisor is None:
                hypervisor = "hypervisor" in value.split()
    memory: int | None = None
    meminfo = _read(proc_root / "meminfo")
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                memory = int(fields[1]) * 1024
            break
    release = _read(proc_root / "sys" / "kernel" / "osrelease")
    return Machine(
        cpu_model=model,
        logical_cpus=cpus or None,
        caches=read_caches(sys_root),
        memory_bytes=memory,
        kernel_release=None if release is None else release.strip() or None,
        hypervisor=hypervisor,
    )


__all__ = ["SYS", "Cache", "Machine", "cache_size_bytes", "read_caches", "read_machine"]

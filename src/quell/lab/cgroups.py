"""Creating and removing the run's cgroups, on cgroup v1 (cpu, cpuacct, cpuset, plus the unified
hierarchy for per-group PSI where it is mounted) or cgroup v2, whichever the machine has."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError
from quell.signals.cgroup import CgroupLayout


@dataclass(frozen=True)
class Group:
    name: str
    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self.dirs)

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for f in self.procs_files:
            with contextlib.suppress(OSError):
                seen.update(int(x) for x in f.read_text().split())
        return sorted(seen)


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise ComponentError(
            "cgroup", f"cannot write {value!r} to {path}: {exc.strerror}"
        ) from None


def hierarchy_dirs(layout: CgroupLayout) -> list[Path]:
    """The distinct hierarchy roots a group is created in."""
    roots = [layout.cpu, layout.cpuacct, layout.cpuset, layout.unified]
    out: list[Path] = []
    for r in roots:
        if r is not None and r not in out:
            out.append(r)
    return out


def create_group(layout: CgroupLayout, name: str, cpus: Sequence[int] | None) -> Group:
    dirs = []
    for root in hierarchy_dirs(layout):
        d = root / name
        try:
            d.mkdir(exist_ok=True)
        except OSError as exc:
            raise ComponentError("cgroup", f"cannot create {d}: {exc.strerror}") from None
        dirs.append(d)
    if layout.cpuset is not None:
        cpuset = layout.cpuset / name
        if layout.version == "v1":
            # v1 cpuset groups start empty: both cpus and mems must be set before adding tasks.
            parent_cpus = (layout.cpuset / "cpuset.cpus").read_text().strip()
            _write(cpuset / "cpuset.mems", (layout.cpuset / "cpuset.mems").read_text().strip())
            _write(cpuset / "cpuset.cpus", ",".join(map(str, cpus)) if cpus else parent_cpus)
        elif cpus and (cpuset / "cpuset.cpus").exists():
            _write(cpuset / "cpuset.cpus", ",".join(map(str, cpus)))
    return Group(name, tuple(dirs))


def enable_v2_controllers(layout: CgroupLayout) -> None:
    """On cgroup v2, let child groups use the cpu and cpuset controllers (best effort)."""
    if layout.version != "v2":
        return
    control = layout.root / "cgroup.subtree_control"
    for ctrl in ("+cpu", "+cpuset"):
        with contextlib.suppress(OSError):
            control.write_text(ctrl)


def remove_group(group: Group, timeout_s: float = 3.0) -> None:
    """Kill what is left in the group, then remove its directories (deepest hierarchy last)."""
    deadline = time.monotonic() + timeout_s
    while (pids := group.pids()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    errors = []
    for d in group.dirs:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:  # EBUSY while the last task exits
                err = exc
                time.sleep(0.05)
        else:
            errors.append(f"{d}: {err.strerror}")
    if errors:
        raise ComponentError("cgroup", "cannot remove " + "; ".join(errors))


def list_groups(layout: CgroupLayout, prefix: str) -> list[Group]:
    """Every group whose name starts with ``prefix``, across the hierarchies."""
    by_name: dict[str, list[Path]] = {}
    for root in hierarchy_dirs(layout):
        with contextlib.suppress(OSError):
            for d in root.iterdir():
                if d.is_dir() and d.name.startswith(prefix):
                    by_name.setdefault(d.name, []).append(d)
    return [Group(n, tuple(ds)) for n, ds in sorted(by_name.items())]

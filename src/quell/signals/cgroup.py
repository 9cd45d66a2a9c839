"""Where the CPU control groups live (v1, hybrid or pure v2) and what they report.

``detect_layout`` finds the controller directories; the readers then take the layout and a
group path relative to each hierarchy's root (e.g. ``"quell/tenant-a"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from quell.errors import ComponentError, InputError, PrerequisiteError, Problem
from quell.signals.procfs import Pressure, read_pressure

CGROUP_ROOT = Path("/sys/fs/cgroup")
MOUNTS_FILE = Path("/proc/self/mounts")

# One file each hierarchy always has, used to tell a mounted controller from an empty directory.
_MARKERS = {
    "cpu": ("cpu.cfs_quota_us", "cpu.shares"),
    "cpuacct": ("cpuacct.usage",),
    "cpuset": ("cpuset.cpus",),
}


@dataclass(frozen=True)
class CgroupLayout:
    """Controller directories. Pure v2: all of them are ``root``. Hybrid v1: ``unified`` is the
    cgroup2 mount that still gives per-group PSI and ``cpu.stat`` usage."""

    version: Literal["v1", "v2"]
    root: Path
    cpu: Path | None
    cpuacct: Path | None
    cpuset: Path | None
    unified: Path | None


def _unescape_mount_path(field: str) -> str:
    # /proc/self/mounts escapes space, tab, newline and backslash as \ooo octal.
    out: list[str] = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts_under(root: Path, mounts: str) -> tuple[dict[str, Path], Path | None]:
    """cgroup v1 controller → mount point, and the cgroup2 mount point, for mounts below root."""
    controllers: dict[str, Path] = {}
    unified: Path | None = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mount_point = Path(_unescape_mount_path(parts[1]))
        if mount_point != root and root not in mount_point.parents:
            continue
        fstype, options = parts[2], parts[3].split(",")
        if fstype == "cgroup2":
            if unified is None or mount_point == root:
                unified = mount_point
        elif fstype == "cgroup":
            for name in _MARKERS:
                if name in options:
                    controllers.setdefault(name, mount_point)
    return controllers, unified


def _has_marker(directory: Path, controller: str) -> bool:
    return any((directory / marker).is_file() for marker in _MARKERS[controller])


def _probe_v1(root: Path, controller: str) -> Path | None:
    """Conventional mount names, including the combined ``cpu,cpuacct`` one."""
    candidates = (
        [controller, "cpu,cpuacct", "cpuacct,cpu"] if controller != "cpuset" else ["cpuset"]
    )
    for name in candidates:
        directory = root / name
        if directory.is_dir() and _has_marker(directory, controller):
            return directory
    return None


def detect_layout(root: Path = CGROUP_ROOT, mounts: str | None = None) -> CgroupLayout:
    """Find the cgroup controllers under ``root``.

    v2 when ``root/cgroup.controllers`` exists. Otherwise v1: controller directories are taken
    from the mount table (``mounts`` text, default ``/proc/self/mounts``) when it lists cgroup
    mounts below ``root``, else from the conventional names under ``root``; each candidate must
    actually hold the controller's files. Raises PrerequisiteError without a usable cpu controller.
    """
    if (root / "cgroup.controllers").is_file():
        available = (root / "cgroup.controllers").read_text().split()
        if "cpu" not in available:
            raise PrerequisiteError(
                f"cgroup2 at {root} does not offer the cpu controller (has: {' '.join(available)})",
                "per-tenant CPU caps and usage",
            )
        return CgroupLayout("v2", root, root, root, root if "cpuset" in available else None, root)

    if mounts is None:
        try:
            mounts = MOUNTS_FILE.read_text()
        except OSError:
            mounts = ""
    mounted, unified_mount = _mounts_under(root, mounts)

    found: dict[str, Path | None] = {}
    for controller in _MARKERS:
        directory = mounted.get(controller)
        if directory is None or not _has_marker(directory, controller):
            directory = _probe_v1(root, controller)
        found[controller] = directory
    if found["cpu"] is None:
        raise PrerequisiteError(
            f"no cgroup cpu controller under {root}", "per-tenant CPU caps and usage"
        )

    unified: Path | None = unified_mount if unified_mount is not None else root / "unified"
    if unified is not None and not (unified / "cgroup.controllers").is_file():
        unified = None
    return CgroupLayout("v1", root, found["cpu"], found["cpuacct"], found["cpuset"], unified)


def group_dir(base: Path, group: str) -> Path:
    """``base/group`` for a relative group path; rejects ``..`` and empty components."""
    parts = PurePosixPath(group.strip("/")).parts
    if any(p in ("..", ".") for p in parts):
        raise InputError("cgroup group", [Problem("group", f"{group!r} must not contain '..'")])
    return base.joinpath(*parts)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError as exc:
        raise ComponentError("cgroup", f"{path} does not exist") from exc
    except OSError as exc:
        raise ComponentError("cgroup", f"cannot read {path}: {exc}") from exc


def _flat_keyed(path: Path) -> dict[str, int]:
    """A ``key value`` per line file such as ``cpu.stat``."""
    out: dict[str, int] = {}
    for line in _read(path).splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            out[parts[0]] = int(parts[1])
        except ValueError as exc:
            raise ComponentError("cgroup", f"{path}: {line!r} is not 'key integer'") from exc
    return out


def _require(values: dict[str, int], path: Path, *keys: str) -> list[int]:
    missing = [k for k in keys if k not in values]
    if missing:
        raise ComponentError("cgroup", f"{path} lacks {', '.join(missing)}")
    return [values[k] for k in keys]


def _v2_dir(layout: CgroupLayout) -> Path | None:
    return layout.root if layout.version == "v2" else layout.unified


def read_cpu_usage_ns(layout: CgroupLayout, group: str) -> int:
    """Cumulative CPU time of the group, ns: v1 ``cpuacct.usage``, v2 ``cpu.stat`` usage_usec.

    On a v1 machine without a cpuacct hierarchy the hybrid cgroup2 ``cpu.stat`` is used.
    """
    if layout.version == "v1" and layout.cpuacct is not None:
        path = group_dir(layout.cpuacct, group) / "cpuacct.usage"
        text = _read(path).strip()
        try:
            return int(text)
        except ValueError as exc:
            raise ComponentError("cgroup", f"{path}: {text!r} is not an integer") from exc
    base = _v2_dir(layout)
    if base is None:
        raise ComponentError("cgroup", "no cpuacct hierarchy and no cgroup2 mount to read usage")
    path = group_dir(base, group) / "cpu.stat"
    (usage_us,) = _require(_flat_keyed(path), path, "usage_usec")
    return usage_us * 1000


def read_group_pressure(
    layout: CgroupLayout, group: str, resource: Literal["cpu", "memory", "io"]
) -> Pressure | None:
    """Per-group PSI from the cgroup2 group (the hybrid ``unified`` mount on v1); None if absent."""
    base = _v2_dir(layout)
    if base is None:
        return None
    return read_pressure(group_dir(base, group) / f"{resource}.pressure")


@dataclass(frozen=True, slots=True)
class Throttling:
    """CFS bandwidth throttling of a group, cumulative since the group was created."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


def read_throttling(layout: CgroupLayout, group: str) -> Throttling:
    """v1 ``cpu.stat`` throttled_time (ns) or v2 ``cpu.stat`` throttled_usec (µs, converted)."""
    if layout.cpu is None:
        raise ComponentError("cgroup", f"layout under {layout.root} has no cpu controller")
    path = group_dir(layout.cpu, group) / "cpu.stat"
    values = _flat_keyed(path)
    if layout.version == "v1":
        periods, throttled, ns = _require(
            values, path, "nr_periods", "nr_throttled", "throttled_time"
        )
        return Throttling(periods, throttled, ns)
    periods, throttled, us = _require(values, path, "nr_periods", "nr_throttled", "throttled_usec")
    return Throttling(periods, throttled, us * 1000)


def read_cpu_cap(layout: CgroupLayout, group: str) -> float | None:
    """The group's CPU bandwidth cap in CPUs (quota / period); None when it has none.

    v1 ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``; v2 ``cpu.max``
    (``"<quota> <period>"``, ``"max <period>"``: none)."""
    if layout.cpu is None:
        raise ComponentError("cgroup", f"layout under {layout.root} has no cpu controller")
    directory = group_dir(layout.cpu, group)
    if layout.version == "v1":
        quota_path, period_path = directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
        quota_text, period_text = _read(quota_path).strip(), _read(period_path).strip()
        where = f"{quota_path}: {quota_text!r} over {period_text!r}"
    else:
        path = directory / "cpu.max"
        text = _read(path).strip()
        quota_text, _, period_text = text.partition(" ")
        where = f"{path}: {text!r}"
    if quota_text in ("max", "-1"):
        return None
    try:
        quota_us, period_us = int(quota_text), int(period_text)
    except ValueError as exc:
        raise ComponentError("cgroup", f"{where} is not a quota and a period in µs") from exc
    if quota_us <= 0 or period_us <= 0:
        raise ComponentError("cgroup", f"{where} is not a quota and a period in µs")
    return quota_us / period_us

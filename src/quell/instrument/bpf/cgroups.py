"""Which cgroup hierarchy the run-queue split names cgroups in, and cgroup ids back to paths.

The program reads a task's cgroup id from the v1 ``cpu`` hierarchy when one is mounted (the
hierarchy whose groups share the CPU), else from cgroup2. Either id is the inode number of the
cgroup's directory, so a walk of the hierarchy's mount maps ids to paths. The mount table and the
roots are passed in, so a test resolves ids against a fixture tree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")


@dataclass(frozen=True)
class CgroupLayout:
    """Where the ids come from: ``v2`` False means the v1 ``cpu`` hierarchy mounted at ``root``."""

    v2: bool
    root: Path


def cgroup_layout(mounts_text: str) -> CgroupLayout | None:
    """The v1 ``cpu`` hierarchy if one is mounted, else the cgroup2 mount; None if neither is."""
    v2_root: Path | None = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mount_point, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup" and "cpu" in options:
            return CgroupLayout(v2=False, root=Path(mount_point))
        if fstype == "cgroup2" and v2_root is None:
            v2_root = Path(mount_point)
    return CgroupLayout(v2=True, root=v2_root) if v2_root is not None else None


def cgroup_paths(root: Path) -> dict[int, str]:
    """Every cgroup under ``root`` by id (its directory's inode number): ``"/"`` for the root,
    ``"/a/b"`` below it. Groups that vanish during the walk are skipped."""
    paths: dict[int, str] = {}
    try:
        paths[os.stat(root).st_ino] = "/"
    except OSError:
        return paths
    for here, dirs, _files in os.walk(root, onerror=lambda _e: None):
        for name in dirs:
            full = Path(here) / name
            try:
                ino = os.stat(full, follow_symlinks=False).st_ino
            except OSError:
                continue
            paths[ino] = "/" + full.relative_to(root).as_posix()
    return paths


def cgroup_of(pid: int, layout: CgroupLayout, proc: Path = Path("/proc")) -> str | None:
    """The path of ``pid``'s cgroup in ``layout``'s hierarchy (from /proc/PID/cgroup)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if layout.v2 and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if not layout.v2 and "cpu" in parts[1].split(","):
            return parts[2]
    return None

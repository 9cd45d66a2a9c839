"""``quell lab clean``: remove what a runner that was killed (even with kill -9) left behind.

Everything a run creates carries its tag: processes (in their environment), namespaces and
cgroups (in their names), files and mounts (under the runtime root). A tag whose runner is
still alive is left alone. What else a kind of run leaves (the consolidation study's PostgreSQL
segments) is removed by the ``cleaners`` the caller passes: this layer knows no study."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from quell.lab.cgroups import list_groups, remove_group
from quell.lab.network import delete_netns, list_netns, netns_pids
from quell.lab.tag import ENV_VAR, PREFIX, RUNTIME_ROOT, tag_of
from quell.signals.cgroup import CgroupLayout, detect_layout

Cleaner = Callable[[Path], list[str]]
"""Removes what else a kind of run may leave behind: called with a run's work directory (under
the runtime root) once the run's processes are killed and before its mounts and files go;
returns what it removed, one item each ("shm 17")."""


def tagged_pids(tag: str, proc_root: Path = Path("/proc")) -> list[int]:
    """Processes whose environment carries ``QUELL_RUN_TAG=<tag>``."""
    needle = f"{ENV_VAR}={tag}".encode()
    out = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(int(entry.name))
    return out


def process_start_ticks(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or
    ``None`` if there is no such process: with the pid, it names one process for good, as a
    pid alone does not once the pid is reused."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) is in parentheses and may hold spaces
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def runner_record(pid: int | None = None) -> dict[str, int | None]:
    """What a lab's state.json says of the process that runs it (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "pid_start_ticks": process_start_ticks(pid)}


def runner_alive(state_file: Path) -> bool:
    """Whether the process that brought the lab up still runs: the same pid with the same
    start time (any program: a test runner as well as ``quell``); for a state file without a
    start time, a live process with "quell" in its command line."""
    try:
        state = json.loads(state_file.read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if pid == os.getpid():
        return False
    started = state.get("pid_start_ticks")
    if isinstance(started, int):
        return process_start_ticks(pid) == started
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"quell" in cmdline


def leftover_tags(layout: CgroupLayout, runtime_root: Path = RUNTIME_ROOT) -> set[str]:
    tags: set[str] = set()
    with contextlib.suppress(OSError):
        tags |= {d.name for d in runtime_root.iterdir() if d.is_dir()}
    tags |= {t for n in list_netns() if (t := tag_of(n))}
    tags |= {t for g in list_groups(layout, PREFIX) if (t := tag_of(g.name))}
    return tags


def clean_tag(
    tag: str,
    layout: CgroupLayout,
    runtime_root: Path = RUNTIME_ROOT,
    cleaners: Sequence[Cleaner] = (),
) -> list[str]:
    """Remove everything of run ``tag`` (and what each of ``cleaners`` finds of it); returns
    what was removed."""
    removed: list[str] = []
    pids = set(tagged_pids(tag))
    names = [n for n in list_netns() if tag_of(n) == tag]
    for n in names:
        pids |= set(netns_pids(n))
    groups = [g for g in list_groups(layout, PREFIX) if tag_of(g.name) == tag]
    for g in groups:
        pids |= set(g.pids())
    pids.discard(os.getpid())
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid}")
    for g in groups:
        remove_group(g)
        removed.append(f"cgroup {g.name}")
    for n in names:
        delete_netns(n)
        removed.append(f"netns {n}")
    work = runtime_root / tag
    for cleaner in cleaners:
        removed += cleaner(work)
    for mount in mounts_under(work):
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False, timeout=30)
        removed.append(f"mount {mount}")
    if work.exists():
        shutil.rmtree(work, ignore_errors=True)
        removed.append(f"files {work}")
    return removed


def mounts_under(directory: Path, mounts_file: Path = Path("/proc/mounts")) -> list[Path]:
    """Mount points at or under ``directory`` (the consolidation lab's tmpfs), deepest first."""
    try:
        text = mounts_file.read_text()
    except OSError:
        return []
    prefix = str(directory).rstrip("/")
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        point = fields[1].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def clean_leftovers(
    runtime_root: Path = RUNTIME_ROOT, cleaners: Sequence[Cleaner] = ()
) -> list[str]:
    """Every run whose runner is gone, removed (``clean_tag``)."""
    layout = detect_layout()
    removed: list[str] = []
    for tag in sorted(leftover_tags(layout, runtime_root)):
        if runner_alive(runtime_root / tag / "state.json"):
            continue
        removed += clean_tag(tag, layout, runtime_root, cleaners)
    return removed

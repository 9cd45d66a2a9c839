"""What a consolidation lab may leave behind, looked up by its tag."""

from __future__ import annotations

from pathlib import Path

from quell.lab.cgroups import list_groups
from quell.lab.cleanup import mounts_under, tagged_pids
from quell.lab.tag import PREFIX, RUNTIME_ROOT, tag_of
from quell.signals.cgroup import detect_layout
from quell.studies.consolidation.lab import LB_PORTS, PG_PORTS, WEB_PORTS, _listening


def shm_ids() -> set[int]:
    """System V shared memory segments on the machine."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines if line.strip()}


def leftovers(tag: str) -> dict[str, list[str]]:
    """Everything of run ``tag`` still on the machine."""
    layout = detect_layout()
    work = RUNTIME_ROOT / tag
    pids = []
    for pid in tagged_pids(tag):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            pids.append(str(pid))
    ports = [*PG_PORTS.values(), *WEB_PORTS.values(), *LB_PORTS.values()]
    return {
        "processes": pids,
        "cgroups": [g.name for g in list_groups(layout, PREFIX) if tag_of(g.name) == tag],
        "mounts": [str(m) for m in mounts_under(work)],
        "files": [str(work)] if work.exists() else [],
        "ports": [str(p) for p in ports if _listening(p)],
    }

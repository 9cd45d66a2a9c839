"""What a lab run may leave behind, looked up by its tag."""

from __future__ import annotations

from pathlib import Path

from quell.experiment.lab import run_lab
from quell.lab.cgroups import list_groups
from quell.lab.cleanup import tagged_pids
from quell.lab.network import list_netns
from quell.lab.tag import PREFIX, RUNTIME_ROOT, tag_of
from quell.scenario.model import Scenario
from quell.signals.cgroup import detect_layout
from quell.store.run import RunStore


def run_tag(run_dir: Path) -> str:
    with RunStore.open(run_dir) as store:
        return str(store.meta()["run_tag"])


def leftovers(tag: str) -> dict[str, list[str]]:
    layout = detect_layout()
    alive = []
    for pid in tagged_pids(tag):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":  # zombies wait for a lazy init to reap them; they hold nothing
            alive.append(str(pid))
    return {
        "netns": [n for n in list_netns() if tag_of(n) == tag],
        "cgroups": [g.name for g in list_groups(layout, PREFIX) if tag_of(g.name) == tag],
        "processes": alive,
        "files": [str(RUNTIME_ROOT / tag)] if (RUNTIME_ROOT / tag).exists() else [],
    }


def nothing_left(tag: str) -> bool:
    return not any(leftovers(tag).values())


def run_clean(scenario: Scenario, tmp_path: Path) -> Path:
    """Run ``scenario`` in the lab under ``tmp_path``, check it left nothing behind, and return
    its run directory."""
    yaml_path = tmp_path / "scenario.yaml"
    yaml_path.write_text("")  # only its directory is used
    run_dir = Path(run_lab(scenario, yaml_path, tmp_path / "runs")["run_dir"])
    assert not any(leftovers(run_tag(run_dir)).values())
    return run_dir

"""``quell replay``: a recorded run decided again. A simulator run of the threshold policy whose
load steps up at 30 s: with nothing changed every decision comes back as recorded; with a
change, the replay stops at the first interval where the policy would have scaled otherwise,
at the interval the threshold's arithmetic names."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.errors import InputError
from quell.experiment.replay import parse_changes, replay_run
from quell.experiment.sim import run_sim
from quell.scenario import load_scenario
from quell.store.run import RunStore
from tests.sim.build import scenario_data

ROOT = Path(__file__).resolve().parents[2]

SCENARIO: dict[str, Any] = scenario_data(
    n_hosts=3,
    rate_rps=20,  # 100 kB at 20/s: 16 % of a 100 Mbit/s link
    name="replay",
    duration_s=100,
    interval_s=5,
    instances=[{"id": "i1", "host": "h0"}],
    workload={
        "arrival": {
            "process": "schedule",
            "points": [{"at_s": 0, "rate_rps": 20}, {"at_s": 30, "rate_rps": 50}],  # then 40 %
        },
        "requests": [{"path": "/f"}],
    },
    scaling={"hosts": ["h1", "h2"], "boot_s": 5},
    policy={"name": "threshold", "params": {"scale_out_util_pct": 30, "scale_in_util_pct": 5}},
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("replay")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return Path(run_sim(load_scenario(path), path, tmp / "runs")["run_dir"])


def recorded_scaling(run_dir: Path) -> list[tuple[float, list[str]]]:
    with RunStore.open(run_dir) as store:
        return [
            (t, [a["type"] for a in actions if a["type"] != "SetWeight"])
            for t, _, _, actions in store.decisions()
            if any(a["type"] != "SetWeight" for a in actions)
        ]


def test_with_nothing_changed_every_decision_comes_back_as_recorded(run_dir: Path) -> None:
    # mean U above 30 % in W + 1 = 2 intervals in a row: (30, 35] and (35, 40]
    assert recorded_scaling(run_dir)[0] == (40.0, ["AddInstance"])
    r = replay_run(run_dir)
    assert r.intervals == r.recorded_intervals == r.same_decisions == 20
    assert r.diverged_at_s is None
    assert [(s.time_s, [a["type"] for a in s.replayed]) for s in r.steps] == recorded_scaling(
        run_dir
    )
    assert all(s.recorded == s.replayed for s in r.steps)
    assert sum(row["recorded"] for row in r.scaling_by_phase().values()) == len(r.steps)


@pytest.fixture(scope="module")
def prima_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated Table VIII run of PRIMA, its model copied beside its scenario."""
    tmp = tmp_path_factory.mktemp("prima")
    scenario = load_scenario(ROOT / "scenarios" / "prima-sim-table8.yaml")
    doc = scenario.model_dump(mode="json") | {"compare": []}
    (tmp / "models").mkdir()
    shutil.copy(ROOT / "scenarios" / "prima-sim-bundle.json", tmp / "models" / "b.json")
    doc["policy"]["params"]["model"] = "models/b.json"
    path = tmp / "t8.yaml"
    path.write_text(yaml.safe_dump(doc))
    return Path(run_sim(load_scenario(path), path, tmp / "runs")["run_dir"])


def test_prima_replays_as_recorded_with_its_model_found_where_the_run_recorded(
    prima_run: Path,
) -> None:
    # PRIMA keeps windows, votes, trials and pending boots: all of it rebuilt from snapshots
    run = prima_run
    with RunStore.open(run) as store:
        assert store.meta()["scenario_dir"] == str(run.parents[1].resolve())
    r = replay_run(run)
    assert r.intervals == r.same_decisions == r.recorded_intervals == 80  # 800 s in 10 s
    assert r.diverged_at_s is None and len(r.steps) >= 1  # it scaled, and again alike


def test_a_longer_wait_scales_later_and_the_replay_stops_where_it_would_have_differed(
    run_dir: Path,
) -> None:
    r = replay_run(run_dir, {"wait_intervals": 2})  # three intervals in a row: not yet at 40 s
    assert r.diverged_at_s == 40.0
    assert r.intervals == 8 and r.recorded_intervals == 20
    assert r.same_decisions == 7  # the same reasons and weights up to it
    (last,) = r.steps
    assert last.replayed == () and [a["type"] for a in last.recorded] == ["AddInstance"]
    assert "above 30 %" in last.recorded_reason and "above" not in last.replayed_reason


def test_a_lower_threshold_scales_out_from_the_start(run_dir: Path) -> None:
    r = replay_run(run_dir, {"scale_out_util_pct": 10})  # 16 % > 10 % at 5 s and 10 s
    assert r.diverged_at_s == 10.0 and r.intervals == 2
    assert r.steps[0].recorded == () and r.steps[0].replayed[0]["host"] == "h1"
    assert r.steps[0].replayed_reason.startswith("threshold: mean utilisation 15.2 % above 10 %")


def test_intervals_the_live_controller_held_are_not_replayed(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    with sqlite3.connect(copy / "run.db") as db:
        db.execute(
            "INSERT INTO decisions (time_s, policy, reason, actions)"
            " VALUES (5.0, 'threshold', 'hold: guard', '[]')"
        )
    r = replay_run(copy)
    assert r.recorded_intervals == r.intervals == r.same_decisions == 19


def test_changes_are_read_as_yaml_and_every_malformed_one_is_named() -> None:
    assert parse_changes(["a=2", "b=0.5", "c=true", "d=median", "e="]) == {
        "a": 2,
        "b": 0.5,
        "c": True,
        "d": "median",
        "e": None,
    }
    with pytest.raises(InputError) as caught:
        parse_changes(["nothing", "=3", "ok=1", "x=[1"])
    said = str(caught.value)
    assert "'nothing' is not key=value" in said and "'=3' is not key=value" in said
    assert "unreadable value '[1'" in said


def quell(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "quell", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def test_the_command_prints_the_difference_and_one_json_document(run_dir: Path) -> None:
    proc = quell("replay", str(run_dir), "--set", "wait_intervals=2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["diverged_at_s"] == 40.0 and doc["changes"] == {"wait_intervals": 2}
    assert "threshold (wait_intervals=2): 7 of 8 decisions as recorded" in proc.stdout
    assert "first scales differently at 40.0 s (interval 8 of 20)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--set", "bogus=1"], "bogus"),
        (["--set", "wait_intervals=-1"], "wait_intervals"),
        (["--set", "nothing"], "'nothing' is not key=value"),
    ],
)
def test_bad_changes_exit_2_naming_them(run_dir: Path, args: list[str], said: str) -> None:
    proc = quell("replay", str(run_dir), *args)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr


def test_a_parameter_prima_no_longer_has_is_refused_by_name(prima_run: Path) -> None:
    # rt_scale and weight_step were measured and not adopted, and went with their code
    proc = quell("replay", str(prima_run), "--set", "rt_scale=fleet", "--set", "weight_step=0.1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "policy.params.rt_scale: unknown parameter" in proc.stderr
    assert "policy.params.weight_step: unknown parameter" in proc.stderr
    assert proc.stdout == ""


def test_a_directory_that_is_not_a_run_exits_2(tmp_path: Path) -> None:
    proc = quell("replay", str(tmp_path))
    assert proc.returncode == 2 and "not a run directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_names_and_reasons_are_printed_as_they_are_never_as_markup() -> None:
    from rich.console import Console

    from quell.report.replay import print_replay

    step = {
        "time_s": 10.0,
        "phase": "[red]base",
        "recorded": [],
        "replayed": [{"type": "AddInstance", "instance_id": "n[1]", "host": "h1"}],
        "recorded_reason": "",
        "replayed_reason": "U=[bold]31[/bold] %",
    }
    doc = {
        "policy": "p",
        "changes": {"w": 2},
        "intervals": 2,
        "recorded_intervals": 20,
        "same_decisions": 1,
        "diverged_at_s": 10.0,
        "scaling_by_phase": {"[red]base": {"recorded": 0, "replayed": 1}},
        "steps": [step],
    }
    console = Console(record=True, width=200, color_system=None)
    print_replay(doc, console)
    text = console.export_text()
    assert "U=[bold]31[/bold] %" in text and "[red]base" in text and "+n[1] on h1" in text
    assert "p (w=2): 1 of 2 decisions as recorded; it first scales differently at 10.0 s" in text

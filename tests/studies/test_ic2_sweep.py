"""The sweep spec is checked whole, each point's scenario is the base one with the value set
and the condition's antagonists, and a sweep resumes after its last point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.errors import InputError
from quell.experiment.sim import run_sim
from quell.studies.ic2.sweep import Sweeper, load_sweep, row

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "scenarios" / "ic2" / "sim-sweep.yaml"
BASE_MRW = yaml.safe_load(BASE.read_text())["instances"][0]["apache"]["max_request_workers"]


def spec(tmp: Path, **over: Any) -> Path:
    doc = {
        "name": "t",
        "environment": "sim",
        "scenario": str(BASE),
        "setting": "max_request_workers",
        "values": [250, 375],
        "conditions": [{"name": "clean"}, {"name": "thrash", "start": ["thrash"]}],
        "duration_s": 90,
        "warmup_s": 30,
        **over,
    }
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_spec_is_checked_whole(tmp_path: Path) -> None:
    path = spec(
        tmp_path,
        values=[250, 377.5, 5000],
        conditions=[{"name": "a", "start": ["nope"]}, {"name": "a"}],
        warmup_s=90,
    )
    with pytest.raises(InputError) as err:
        load_sweep(path)
    messages = [str(p) for p in err.value.problems]
    assert any("377.5 is not a whole number" in m for m in messages)
    assert any("5000 on web" in m for m in messages)  # above server_limit x threads_per_child
    assert any("no antagonist 'nope'" in m for m in messages)
    assert any("two conditions named 'a'" in m for m in messages)
    assert any(m.startswith("warmup_s") for m in messages)


def test_points_and_resume(tmp_path: Path) -> None:
    sweep = load_sweep(spec(tmp_path))
    assert sweep.points() == [
        ("clean", 250, 0),
        ("thrash", 250, 0),
        ("clean", 375, 0),
        ("thrash", 375, 0),
    ]
    s = sweep.point_scenario("thrash", 250, 0)
    assert s.instances[0].apache is not None and s.instances[0].apache.max_request_workers == 250
    assert [(e.at_s, e.start) for e in s.events] == [(0.0, ["thrash"])]
    assert s.policy.name == "static" and s.duration_s == 90
    assert sweep.point_scenario("clean", 375, 0).events == []
    calls: list[str] = []

    def counting(scenario, path, runs_dir, progress):  # type: ignore[no-untyped-def]
        calls.append(scenario.name)
        return run_sim(scenario, path, runs_dir, progress)

    out = tmp_path / "out"
    doc = Sweeper(sweep, out, counting).run()
    assert len(calls) == 4 and len(doc["points"]) == 4
    # 400 users, Z = 2 s: the law's R = N / X - Z from the measured throughput
    p = doc["points"][0]
    assert p["law_rt_s"] == pytest.approx(400 / p["throughput_rps"] - 2.0)
    assert doc["baseline_value"] == BASE_MRW  # the base scenario's own, outside the sweep
    assert doc["row"] == row(doc)
    again = Sweeper(load_sweep(spec(tmp_path)), out, counting).run()
    assert len(calls) == 4 and again["table"] == doc["table"]
    with pytest.raises(InputError, match="another spec"):
        Sweeper(load_sweep(spec(tmp_path, values=[250, 400])), out, counting).run()


def _doc(baseline: float | None, best: dict[str, float]) -> dict[str, Any]:
    """A finished sweep of max_request_workers whose table has ``best`` per condition, the
    first clean."""
    conds = [{"name": c, "start": [] if c == "clean" else [c]} for c in best]
    table = {c: {"mean_rt_s": {}, "best_value": v, "best_mean_rt_s": 0.1} for c, v in best.items()}
    return {
        "spec": {"setting": "max_request_workers", "conditions": conds},
        "baseline_value": baseline,
        "table": table,
    }


def test_the_row_points_from_the_baseline_toward_the_interfered_optima() -> None:
    # the lab's Table 4 service: 64 best clean and under the probe, baseline 32
    same = row(_doc(32, {"clean": 64, "llc_same": 64}))
    assert same["directions"] == "+max_request_workers"
    assert same["per_condition"] == {"llc_same": {"shift": 0, "from_baseline": 1}}
    assert same["why"] == (
        "best: clean 64, llc_same 64; every interfered optimum lies above the baseline 32"
        " (the optimum does not move from the clean 64)"
    )
    # the paper's Fig. 2: the optimum moves down under interference, below the baseline
    paper = row(_doc(1700, {"clean": 1700, "llc": 1100, "dcopy": 1400}))
    assert paper["directions"] == "-max_request_workers"
    assert {c: d["shift"] for c, d in paper["per_condition"].items()} == {"llc": -1, "dcopy": -1}
    # optima on both sides, at the baseline, or no baseline: no direction
    both = row(_doc(32, {"clean": 32, "a": 64, "b": 16}))
    assert both["directions"] is None
    at = row(_doc(32, {"clean": 64, "a": 32}))
    assert at["directions"] is None and at["per_condition"]["a"] == {
        "shift": -1,
        "from_baseline": 0,
    }
    assert at["why"] == "best: clean 64, a 32; every interfered optimum is the baseline 32"
    assert both["why"].endswith("baseline 32: the interfered optima do not all lie on one side")
    none = row(_doc(None, {"clean": 64, "a": 32}))
    assert none["directions"] is None and "no single baseline" in none["why"]


def test_the_command_prints_the_row_it_reads(tmp_path: Path) -> None:
    from tests.cli.test_cli import quell

    out = tmp_path / "out"
    proc = quell("ic2", "sweep", spec(tmp_path), "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["row"] == row(doc)
    item = doc["row"]["directions"]
    said = f"directions: {item!r}" if item is not None else "no direction for IC2's row"
    assert said in proc.stdout + proc.stderr
    assert (out / "sweep.png").is_file()

"""The sweep spec is checked whole, each point's scenario is the base one with the value set
and the condition's antagonists, and a sweep resumes after its last point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.errors import InputError
from quell.experiment.sim import run_sim
from quell.studies.ic2.sweep import Sweeper, load_sweep

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "scenarios" / "ic2" / "sim-sweep.yaml"


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
    again = Sweeper(load_sweep(spec(tmp_path)), out, counting).run()
    assert len(calls) == 4 and again["table"] == doc["table"]
    with pytest.raises(InputError, match="another spec"):
        Sweeper(load_sweep(spec(tmp_path, values=[250, 400])), out, counting).run()

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
from quell.studies.ic2.sweep import Sweeper, load_sweep, measure, row, table

ROOT = Path(__file__).resolve().parents[3]
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


def test_shuffled_values_run_in_an_order_of_their_own_each_repeat(tmp_path: Path) -> None:
    values = [100, 150, 200, 250, 300, 375]
    listed = load_sweep(spec(tmp_path, values=values, repeats=3))
    shuffled = load_sweep(spec(tmp_path, values=values, repeats=3, order="shuffled"))
    assert [v for c, v, r in listed.points() if c == "clean"] == values * 3
    got = shuffled.points()
    assert sorted(got) == sorted(listed.points())  # the same points, in another order
    per_repeat = [[v for c, v, r in got if r == k and c == "clean"] for k in range(3)]
    assert all(sorted(vs) == values for vs in per_repeat)
    assert len({tuple(vs) for vs in per_repeat}) == 3  # each repeat its own order
    # every value still runs clean and under the antagonist back to back
    assert all(got[k][1] == got[k + 1][1] for k in range(0, len(got), 2))
    assert [c for c, _, _ in got[:2]] == ["clean", "thrash"]
    # from the base scenario's seed: the same spec gives the same order, so a sweep resumes
    assert load_sweep(spec(tmp_path, values=values, repeats=3, order="shuffled")).points() == got


def _doc(
    baseline: float | None, best: dict[str, float], loose: dict[str, list[float]] | None = None
) -> dict[str, Any]:
    """A finished sweep of max_request_workers whose table has ``best`` per condition, the
    first clean, each optimum resolved by its repeats but those in ``loose`` (condition → the
    values whose repeats overlap the optimum's)."""
    conds = [{"name": c, "start": [] if c == "clean" else [c]} for c in best]
    loose = loose or {}
    table = {
        c: {
            "mean_rt_s": {},
            "best_value": v,
            "best_mean_rt_s": 0.1,
            "resolved": c not in loose,
            "overlaps": loose.get(c, []),
        }
        for c, v in best.items()
    }
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


def test_an_optimum_its_repeats_do_not_separate_gives_no_direction() -> None:
    # the repeated sweep of the Table 4 service (sweep-lab-table4-mrw-rep.json): under the
    # probe 64 led on the mean, but a repeat at 128 beat one at 64; clean, 96 and 128 overlap
    loose = row(_doc(32, {"clean": 96, "llc_same": 64}, {"clean": [128], "llc_same": [128]}))
    assert loose["directions"] is None
    assert loose["per_condition"] == {"llc_same": {"shift": -1, "from_baseline": 1}}
    assert loose["why"] == (
        "best: clean 96, llc_same 64; every interfered optimum lies above the baseline 32;"
        " not resolved: at clean the repeats at 96 overlap those at 128;"
        " at llc_same the repeats at 64 overlap those at 128"
    )
    # a loose clean optimum leaves the shift unsure, not the direction from the baseline
    clean_only = row(_doc(32, {"clean": 96, "llc_same": 64}, {"clean": [64]}))
    assert clean_only["directions"] == "+max_request_workers"
    assert clean_only["why"].endswith(
        "not resolved: at clean the repeats at 96 overlap those at 64"
    )
    # one repeat a value: the direction stands, and says its scatter is unknown
    once = _doc(32, {"clean": 64, "llc_same": 64})
    for r in once["table"].values():
        r["resolved"] = None
    assert row(once)["directions"] == "+max_request_workers"
    assert row(once)["why"].endswith("; one repeat a value: the optima's scatter is not measured")


def _points(cond: str, rts: dict[float, list[float]]) -> list[dict[str, Any]]:
    return [
        {"condition": cond, "value": v, "repeat": k, "mean_rt_s": rt}
        for v, xs in rts.items()
        for k, rt in enumerate(xs)
    ]


def test_the_table_resolves_an_optimum_only_when_its_repeats_beat_every_other() -> None:
    doc = {
        "spec": {"conditions": [{"name": "clean", "start": []}, {"name": "p", "start": ["p"]}]},
        "points": _points("clean", {64: [0.024, 0.030], 96: [0.017, 0.024], 128: [0.014, 0.032]})
        + _points("p", {64: [0.064, 0.071], 96: [0.072, 0.190], 128: [0.054, 0.186]}),
    }
    tab = table(doc)
    clean, p = tab["clean"], tab["p"]
    assert clean["best_value"] == 96 and clean["mean_rt_s"]["96"] == pytest.approx(0.0205)
    assert clean["resolved"] is False and clean["overlaps"] == [64, 128]
    assert p["best_value"] == 64 and p["resolved"] is False and p["overlaps"] == [128]
    assert p["repeats"] == {"64": 2, "96": 2, "128": 2}
    assert p["range_rt_s"]["96"] == [0.072, 0.19]
    # the repeats at 64 all below every other value's: resolved
    doc["points"] = _points("p", {64: [0.064, 0.071], 96: [0.072, 0.19], 128: [0.08, 0.186]})
    assert table(doc)["p"]["resolved"] is True and table(doc)["p"]["overlaps"] == []
    # a value measured once: the scatter is unknown
    doc["points"] = _points("p", {64: [0.064, 0.071], 96: [0.19]})
    assert table(doc)["p"]["resolved"] is None
    assert table(doc)["clean"] == {
        "mean_rt_s": {},
        "best_value": None,
        "best_mean_rt_s": None,
        "repeats": {},
        "range_rt_s": {},
        "resolved": None,
        "overlaps": [],
    }


def test_a_point_records_what_the_instances_took_from_their_cpus(tmp_path: Path) -> None:
    from quell.core.observation import Observation, Snapshot
    from quell.scenario.load import load_scenario
    from quell.store.run import RunStore

    scenario = load_scenario(ROOT / "scenarios" / "ic2" / "lab-table4.yaml")
    with RunStore.create(tmp_path) as store:
        for t, cpu, wait in ((1.0, 0.9, 0.5), (2.0, 0.3, 2.0), (3.0, 0.4, 4.0)):
            o = Observation(
                time_s=t, instance_id="web", interval_s=1.0, requests=10,
                mean_rt_seconds=0.05, cpu_util=cpu, runqueue_wait_seconds=wait,
            )  # fmt: skip
            store.add_snapshot(Snapshot(t, "lab", {"web": o}))
        store.commit()
    with RunStore.open(tmp_path) as store:
        m = measure(store, scenario, after_s=1.0)  # the intervals ending at 2 and 3 s
    assert m["requests"] == 20 and m["completed_mean_rt_s"] == pytest.approx(0.05)
    assert m["cpu_util"] == pytest.approx(0.35)
    assert m["runqueue_wait_s_per_s"] == pytest.approx(3.0)


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

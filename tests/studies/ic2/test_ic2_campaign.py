"""IC2's campaign on simulator runs: the three phases run what they should and resume, the
labels follow the scenario's events exactly, a spec is checked whole, and a trained detector
finds the interference of a run it never saw."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from quell.detect.bundle import load_detector
from quell.detect.dataset import concat
from quell.detect.features import feature_matrix
from quell.detect.tree import CostMatrix, CostSensitiveTree
from quell.errors import InputError
from quell.experiment.run import ProgressFn
from quell.experiment.sim import run_sim
from quell.scenario import load_scenario
from quell.scenario.model import Scenario
from quell.store.run import RunStore
from quell.studies.ic2.campaign import (
    Trainer,
    ablation,
    collected_runs,
    interfered_instances,
    load_campaign,
    score_run,
    score_runs,
    tree_sizes,
)
from tests.cli.inprocess import assert_refused, run_quell

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "scenarios" / "interference-smoke.yaml"
IC2 = {"max_request_workers": 64, "keepalive_timeout_s": 5, "php_max_children": 16}


def onoff(tmp: Path, name: str = "onoff.yaml", seed: int = 7) -> Path:
    """interference-smoke over 200 s, iperf3 on h2 from 30 to 70 s and from 110 to 150 s."""
    doc = yaml.safe_load(SMOKE.read_text())
    doc.update(
        name="onoff",
        seed=seed,
        duration_s=200,
        events=[
            {"at_s": 30, "phase": "on1", "start": ["noise"]},
            {"at_s": 70, "phase": "off1", "stop": ["noise"]},
            {"at_s": 110, "phase": "on2", "start": ["noise"]},
            {"at_s": 150, "phase": "off2", "stop": ["noise"]},
        ],
    )
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return path


def spec(tmp: Path, **over: Any) -> Path:
    onoff(tmp)
    doc = {
        "name": "campaign-test",
        "environment": "sim",
        "workload": "f100k",
        "scenarios": ["onoff.yaml"],
        "runs": 2,
        "ic2": IC2,
        **over,
    }
    path = tmp / "train.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class Recorder:
    """run_sim, noting each scenario it ran and whether its detector file existed then."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, str, dict[str, Any], bool]] = []

    def __call__(
        self,
        scenario: Scenario,
        path: Path,
        runs_dir: Path,
        progress: Callable[[], AbstractContextManager[ProgressFn]],
    ) -> dict[str, Any]:
        params = dict(scenario.policy.params)
        det = params.get("detector")
        self.runs.append(
            (scenario.seed, scenario.policy.name, params, det is None or Path(str(det)).exists())
        )
        return run_sim(scenario, path, runs_dir, progress)


def test_three_phases_run_what_they_should_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rec = Recorder()
    bundle = Trainer(load_campaign(spec(tmp_path)), out, rec).train()
    # phase I: IC2 off; II: ic2 with phase I's tree; III: with phase II's; seeds 7, 8 each
    assert [(s, name) for s, name, _, _ in rec.runs] == [(7, "static"), (8, "static")] + [
        (7, "ic2"),
        (8, "ic2"),
    ] * 2
    assert [Path(str(p["detector"])).parent.name for _, _, p, _ in rec.runs[2:]] == [
        "phase-I",
        "phase-I",
        "phase-II",
        "phase-II",
    ]
    assert all(existed for *_, existed in rec.runs)
    assert all(p["workload"] == "f100k" for _, _, p, _ in rec.runs[2:])
    loaded = load_detector(out / "detector.json", "f100k")
    assert loaded.data.tree == bundle.data.tree
    assert [p["phase"] for p in loaded.data.training.phases] == ["I", "II", "III"]
    # phase II trains on half of I and half of II: 400 rows each, 200 + 200
    assert [p["trained_on"]["samples"] for p in loaded.data.training.phases] == [400, 400, 400]
    # run again: nothing runs, the same tree
    again = Recorder()
    Trainer(load_campaign(spec(tmp_path)), out, again).train()
    assert again.runs == []
    assert load_detector(out / "detector.json").data.tree == bundle.data.tree
    # the command on the finished campaign: nothing to run, each phase's data
    done = run_quell("ic2", "train", spec(tmp_path), "--out", out, "--json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "detector": str(out / "detector.json"),
        "phases": loaded.data.training.phases,
    }
    assert "campaign-test: detector in" in done.stdout
    # a run whose data file was lost is read again from its finished run directory
    (out / "phase-II" / "onoff-1.npz").unlink()
    reread = Recorder()
    Trainer(load_campaign(spec(tmp_path)), out, reread).train()
    assert reread.runs == []
    assert (out / "phase-II" / "onoff-1.npz").is_file()
    # a run lost with its directory runs again, alone; the simulator repeats it exactly
    (out / "phase-II" / "onoff-1.npz").unlink()
    for d in (out / "phase-II" / "runs").iterdir():
        with RunStore.open(d) as store:
            seed = store.meta()["seed"]
        if seed == 8:
            shutil.rmtree(d)
    once = Recorder()
    Trainer(load_campaign(spec(tmp_path)), out, once).train()
    assert [(s, name) for s, name, _, _ in once.runs] == [(8, "ic2")]
    assert load_detector(out / "detector.json").data.tree == bundle.data.tree
    # the final tree from every phase's runs: the runs do not depend on it, none runs again
    pooled = Recorder()
    Trainer(load_campaign(spec(tmp_path, final_training="all_phases")), out, pooled).train()
    assert pooled.runs == []
    phases = load_detector(out / "detector.json").data.training.phases
    assert [p["trained_on"]["samples"] for p in phases] == [400, 400, 1200]


def test_labels_follow_the_events(tmp_path: Path) -> None:
    # 200 intervals of 1 s; antagonist on over (30, 70] and (110, 150]; T for 30 s after the
    # start of the run and each of the 4 changes: 150 T; I: (60, 70] and (140, 150]: 20;
    # NI: (100, 110] and (180, 200]: 30.
    out = tmp_path / "out"
    Trainer(load_campaign(spec(tmp_path, runs=1)), out, run_sim).train()
    with np.load(out / "phase-I" / "onoff-0.npz") as f:
        y, t = f["y"], f["time_s"]
    assert np.bincount(y, minlength=3).tolist() == [30, 150, 20]
    assert t[y == 2].tolist() == [*range(61, 71), *range(141, 151)]
    timelines = interfered_instances(load_scenario(onoff(tmp_path)))
    assert list(timelines) == ["i2"]  # i1's host runs no antagonist
    assert timelines["i2"].union() == [(30.0, 70.0), (110.0, 150.0)]


def test_another_spec_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    Trainer(load_campaign(spec(tmp_path, runs=1)), out, run_sim).train()
    with pytest.raises(InputError, match="another spec"):
        Trainer(load_campaign(spec(tmp_path, runs=2)), out, run_sim).train()


def test_a_spec_is_checked_whole(tmp_path: Path) -> None:
    onoff(tmp_path)
    quiet = yaml.safe_load(SMOKE.read_text())
    quiet.update(events=[], antagonists=[])
    (tmp_path / "quiet.yaml").write_text(yaml.safe_dump(quiet))
    path = spec(
        tmp_path,
        scenarios=["onoff.yaml", "missing.yaml", "quiet.yaml"],
        features=["rt_s", "no_such_feature"],
        ic2={**IC2, "detector": "x.json", "c_kat": -1},
    )
    with pytest.raises(InputError) as err:
        load_campaign(path)
    where = {p.location for p in err.value.problems}
    assert {"features", "ic2.detector", "ic2.c_kat", "scenarios[1]", "scenarios[2]"} <= where


def test_a_trained_detector_finds_interference_in_a_run_it_never_saw(tmp_path: Path) -> None:
    # Trained on seeds 7 and 8, scored on seed 99: iperf3 fills h2's shared link, i2's response
    # time rises several-fold, and the detector (through the five-state machine) sees both
    # onsets within 10 s and calls no clean interval interference.
    out = tmp_path / "out"
    Trainer(load_campaign(spec(tmp_path)), out, run_sim).train()
    test = onoff(tmp_path, "test.yaml", seed=99)
    scenario = load_scenario(test)
    summary = run_sim(scenario, test, tmp_path / "runs")
    with RunStore.open(Path(summary["run_dir"])) as store:
        result = score_run(store, scenario, load_detector(out / "detector.json").detector)
    assert result["detect_events"] == 2 and result["detect_missed"] == 0
    assert result["clear_missed"] == 0
    assert result["precision"] == 1.0 and result["ni_as_i"] == 0
    assert result["recall"] >= 0.5
    assert result["detect_latency_s"] <= 10.0
    assert list(result["instances"]) == ["i2"]
    # the command line says the same and keeps it in the run directory
    done = run_quell("ic2", "evaluate", test, "--model", out, "--run", summary["run_dir"], "--json")
    assert done.code == 0, done.stderr
    assert '"recall":' + str(result["recall"]) in done.stdout
    assert (Path(summary["run_dir"]) / "ic2-evaluation.json").is_file()
    # several recorded runs: each scored alone and all of them together, interval by interval
    again = run_sim(scenario, test, tmp_path / "runs2")  # a repeat, as lab runs of it are
    both = run_quell(
        "ic2", "evaluate", test, "--model", out,
        "--run", summary["run_dir"], "--run", again["run_dir"], "--json",
    )  # fmt: skip
    assert both.code == 0, both.stderr
    doc = json.loads(both.stdout.strip().splitlines()[-1])
    assert doc["run_dirs"] == [summary["run_dir"], again["run_dir"]]
    assert doc["runs"][summary["run_dir"]]["recall"] == result["recall"]
    with RunStore.open(Path(summary["run_dir"])) as a, RunStore.open(Path(again["run_dir"])) as b:
        together = score_runs([a, b], scenario, load_detector(out / "detector.json").detector)
    assert doc["recall"] == together["recall"] and doc["samples"] == together["samples"]
    # the simulator repeats a seed exactly: the two runs together score as one, twice over
    assert together["samples"] == 2 * result["samples"]
    assert together["detect_events"] == 2 * result["detect_events"]
    assert together["recall"] == result["recall"]
    assert together["instances"]["i2"]["samples"] == 2 * result["instances"]["i2"]["samples"]
    assert (Path(again["run_dir"]) / "ic2-evaluation.json").is_file()


def test_evaluate_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    test = onoff(tmp_path)
    not_a_bundle = tmp_path / "x.json"
    not_a_bundle.write_text("{}")
    assert_refused(run_quell("ic2", "evaluate", test, "--model", not_a_bundle), "x.json")
    assert_refused(
        run_quell("ic2", "evaluate", test, "--model", not_a_bundle, "--states", "3"), "--states"
    )
    assert_refused(run_quell("ic2", "evaluate", SMOKE, "--model", tmp_path), "detector.json")
    other = run_sim(load_scenario(SMOKE), SMOKE, tmp_path / "runs")
    bundle_dir = tmp_path / "out"
    Trainer(load_campaign(spec(tmp_path, runs=1)), bundle_dir, run_sim).train()
    assert_refused(
        run_quell("ic2", "evaluate", test, "--model", bundle_dir, "--run", other["run_dir"]),
        "they differ in duration_s, events, name",
    )


def test_the_ablation_regrows_the_final_tree_at_the_spec_cost(tmp_path: Path) -> None:
    # The spec's cost is the paper's 5:1:10 as weights: the ablation's row for it must score
    # exactly as the campaign's own final detector does; every cost gives one row per run.
    # The spec reads features over 3 intervals: the data, the bundle and the scoring all do.
    out = tmp_path / "out"
    path = spec(tmp_path, window_intervals=3)
    Trainer(load_campaign(path), out, run_sim).train()
    assert load_detector(out / "detector.json").detector.window_intervals == 3
    for run_dir in (out / "phase-III" / "runs").iterdir():
        with RunStore.open(run_dir) as store:
            k = int(store.meta()["seed"]) - 7  # run k has the scenario's seed + k
            with np.load(out / "phase-III" / f"onoff-{k}.npz") as data:
                names = tuple(str(n) for n in data["features"])
                rolled = feature_matrix(store.observations("i2"), names, 3)
                assert np.array_equal(data["x"], rolled, equal_nan=True)
    test = onoff(tmp_path, "test.yaml", seed=99)
    scenario = load_scenario(test)
    run_dir = Path(run_sim(scenario, test, tmp_path / "runs")["run_dir"])
    with RunStore.open(run_dir) as store:
        rows = ablation(load_campaign(path), out, [(store, scenario)])
        own = score_run(store, scenario, load_detector(out / "detector.json").detector)
    assert [(r["cost"], r["method"]) for r in rows] == [
        ("1:1:1", "weights"),
        ("5:1:10", "weights"),
        ("5:1:10", "expected"),
    ]
    own.pop("instances")
    assert {k: v for k, v in rows[1].items() if k not in ("test", "cost", "method")} == own
    done = run_quell("ic2", "ablate", path, "--out", out, run_dir, "--json")
    assert done.code == 0, done.stderr
    assert done.stdout.count('"cost":') == 3


def test_tree_sizes_hold_each_collected_run_out_in_turn(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = spec(tmp_path, window_intervals=3, max_depth=2, min_samples_leaf=5)
    campaign = load_campaign(path)
    Trainer(campaign, out, run_sim).train()
    runs = collected_runs(campaign, out)
    assert len(runs) == 6  # three phases of two runs
    rows = tree_sizes(campaign, out, (1, 2), (5, 200))
    assert [(r["max_depth"], r["min_samples_leaf"], r["spec"]) for r in rows] == [
        (1, 5, False),
        (1, 200, False),
        (2, 5, True),
        (2, 200, False),
    ]
    # the cost of depth 2, leaf 5 by hand: each run scored by a tree grown on the other five
    cost = CostMatrix().matrix()
    by_hand = []
    for k, test in enumerate(runs):
        train = concat([r for j, r in enumerate(runs) if j != k])
        tree = CostSensitiveTree(
            train.features, CostMatrix(), "weights", 2, 5, window_intervals=3
        ).fit(train.x, train.y)
        pred = tree.predict(test.x)
        by_hand.append(cost[test.y[pred >= 0], pred[pred >= 0]].mean())
    assert rows[2]["cost"] == pytest.approx(np.mean(by_hand), abs=5e-5)
    # leaves of 200 of 1,000 intervals cannot single out 40 s of interference: more cost
    assert rows[3]["cost"] > rows[2]["cost"]
    done = run_quell("ic2", "sizes", path, "--out", out, "--json")
    assert done.code == 0, done.stderr
    assert done.stdout.count('"min_samples_leaf":') == 25 and "(spec)" in done.stdout
    (out / "phase-II" / "onoff-1.npz").unlink()
    assert_refused(run_quell("ic2", "sizes", path, "--out", out), "phase-II/onoff-1.npz")

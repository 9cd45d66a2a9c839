"""``quell attribute fit|predict|report`` on constructed runs of one schedule: the model it
writes, what it attributes where there is and is not co-located load, the report's files, and
bad input refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from quell.attribute.bundle import load_attribution_model
from quell.report.records import write_records
from tests.attribute.synth import schedule_records
from tests.cli.inprocess import assert_refused, run_quell

N = 2500


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attribution")
    paths = {}
    for name, seed, workers, run_seed in (
        ("clean", 1, 0, 0),
        ("w1", 1, 1, 1),
        ("w3", 1, 3, 1),
        ("test-clean", 2, 0, 5),
        ("test-w2", 2, 2, 5),
    ):
        paths[name] = root / name
        write_records(paths[name], schedule_records(seed, N, workers, run_seed=run_seed))
        (paths[name] / "cell.json").write_text(
            json.dumps({"antagonist_workers": workers, "load": 100})
        )
    model = root / "model.json"
    fit = run_quell(
        "attribute", "fit", "--uncontended", paths["clean"], "--contended", paths["w1"],
        "--contended", paths["w3"], "--out", model, "--inducing", "100", "--iters", "50",
        "--exact-points", "300", "--test-uncontended", paths["test-clean"],
        "--test-contended", paths["test-w2"], "--json",
    )  # fmt: skip
    assert fit.code == 0, fit.stderr
    paths["model"] = model
    paths["fit"] = root / "fit.json"
    paths["fit"].write_text(fit.stdout.splitlines()[-1])
    paths["fit_text"] = root / "fit.txt"
    paths["fit_text"].write_text(fit.stdout)
    return paths


def test_fit_writes_a_model_and_scores_it_beside_the_baselines(runs) -> None:
    doc = json.loads(runs["fit"].read_text())
    scores = {s["model"]: s for s in doc["scores"]}
    assert set(scores) == {
        "sparse_gp",
        "sparse_gp_uncalibrated",
        "runq_wait",
        "linear",
        "boosting",
        "exact_gp",
    }
    assert doc["n_train"] + doc["n_test"] == 3 * N  # the uncontended run's too, at excess 0
    gp, raw = scores["sparse_gp"], scores["sparse_gp_uncalibrated"]
    assert gp["r2"] > 0.95
    # As fitted, the GP's noise is the runs' own: on more requests of them it covers 93-97 %.
    assert 0.93 <= raw["coverage"] <= 0.97
    assert gp["mae_seconds"] < 0.7 * scores["runq_wait"]["mae_seconds"]
    assert doc["acceptance"]["r2"] and doc["acceptance"]["mae_vs_runq"]
    # Calibrated by leaving each of the two contended runs out: each fold extrapolates from one
    # load to the other, so the interval widens for runs unseen, more than on seen ones needs.
    cal = doc["calibration"]
    assert [g["group"] for g in cal["groups"]] == [str(runs["w1"]), str(runs["w3"])]
    assert set(cal["class_scales"]) == {"/php", "/static"} and cal["scale"] > 1
    assert gp["coverage"] >= raw["coverage"]
    assert gp["mean_interval_width_seconds"] > raw["mean_interval_width_seconds"]
    assert "interval calibrated by leaving 2 runs out in turn" in runs["fit_text"].read_text()
    # Another schedule seed and two workers, a load it was not trained on.
    held = doc["held_out"]["held-out runs"]
    other = {s["model"]: s for s in held["scores"]}
    assert other["sparse_gp"]["n"] == N
    assert other["sparse_gp"]["r2"] > 0.9
    assert other["sparse_gp"]["mae_seconds"] < 0.7 * other["runq_wait"]["mae_seconds"]
    # the uncalibrated interval falls short on the run it did not see; calibrated, it does not
    assert other["sparse_gp_uncalibrated"]["coverage"] < 0.93 <= other["sparse_gp"]["coverage"]
    assert held["acceptance"]["r2"] and held["acceptance"]["mae_vs_runq"]
    assert [a["run"] for a in doc["label_agreement"]] == [str(runs["w1"]), str(runs["w3"])]
    model = load_attribution_model(runs["model"])
    assert model.classes == ("/php", "/static")
    assert model.data.meta.n_train == doc["n_train"]


def test_predict_attributes_little_to_the_provider_without_load(runs, tmp_path: Path) -> None:
    out = tmp_path / "pred"
    res = run_quell(
        "attribute", "predict", runs["model"], runs["test-clean"], runs["test-w2"],
        "--out", out, "--json",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    clean, loaded = json.loads(res.stdout.splitlines()[-1])["runs"]
    assert clean["requests"] == loaded["requests"] == N
    assert clean["provider_share"] < 0.1
    assert loaded["provider_share"] > 0.4
    assert loaded["provider_p99_seconds"] > 5 * clean["provider_p99_seconds"]
    rows = (out / "02-test-w2.csv").read_text().splitlines()
    assert len(rows) == N + 1
    assert rows[0].startswith("request_id,request_class,wall_seconds,excess_seconds")
    wall, provider, service = (
        np.array([float(r.split(",")[i]) for r in rows[1:]]) for i in (2, 6, 7)
    )
    np.testing.assert_allclose(provider + service, wall, rtol=1e-12)


def test_report_writes_the_plots_the_heatmap_and_a_page(runs, tmp_path: Path) -> None:
    res = run_quell(
        "attribute", "report", runs["model"], runs["test-clean"], runs["test-w2"],
        "--out", tmp_path, "--json",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout.splitlines()[-1])
    assert doc["images"] == ["heatmap.png", "requests-01.png", "requests-02.png"]
    for name in doc["images"]:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "index.html").read_text()
    assert "test-w2" in page and 'src="heatmap.png"' in page
    assert "latency and its provider part" in res.stdout


def test_bad_input_is_refused(runs, tmp_path: Path) -> None:
    assert_refused(
        run_quell(
            "attribute", "fit", "--uncontended", tmp_path, "--contended", runs["w1"],
            "--out", tmp_path / "m.json",
        ),
        "no records here",
    )  # fmt: skip
    assert_refused(
        run_quell(
            "attribute", "fit", "--uncontended", runs["clean"], "--contended", runs["w1"],
            "--out", tmp_path / "m.json", "--labels", "median",
        ),
        "percentile or paired",
    )  # fmt: skip
    assert_refused(
        run_quell(
            "attribute", "fit", "--uncontended", runs["clean"], "--contended", runs["w1"],
            "--out", tmp_path / "m.json", "--test-uncontended", runs["test-clean"],
        ),
        "both --test-uncontended and --test-contended",
    )  # fmt: skip
    # every bad option named at once, before a run is read (the runs named are not there)
    nowhere = tmp_path / "nowhere"
    refused = run_quell(
        "attribute", "fit", "--uncontended", nowhere, "--contended", nowhere,
        "--out", tmp_path / "m.json", "--labels", "median", "--floor-quantile", "1",
        "--test-contended", runs["w1"],
    )  # fmt: skip
    assert_refused(
        refused,
        "--labels: percentile or paired, not 'median'",
        "--floor-quantile: 0 (no floor) or a quantile below 1, got 1.0",
        "held-out runs: give both --test-uncontended and --test-contended, or neither",
    )
    assert "nowhere" not in refused.stderr and not (tmp_path / "m.json").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    text = (runs["w1"] / "records.csv").read_text().replace("runq_wait_ns", "runq_ns")
    (bad / "records.csv").write_text(text.replace("\n3,", "\nx,", 1))
    assert_refused(
        run_quell("attribute", "predict", runs["model"], bad), "request_id", "not an integer"
    )
    (bad / "records.csv").write_text(text)
    assert_refused(
        run_quell("attribute", "predict", runs["model"], bad), "runq_wait_ns: missing column"
    )
    (tmp_path / "model.json").write_text('{"format": "quell.prima.bundle"}')
    assert_refused(
        run_quell("attribute", "predict", tmp_path / "model.json", runs["w1"]),
        "not a quell attribution model",
    )
    assert_refused(
        run_quell("attribute", "predict", runs["model"], runs["w1"], "--level", "1.5"),
        "--level",
    )


def test_the_campaign_commands_refuse_bad_input(tmp_path: Path) -> None:
    assert_refused(
        run_quell("attribute", "measure", "--out", tmp_path, "--part", "both", "--cpu", "4096"),
        "--part: one of train, test, periodic, not 'both'",
        "--cpu: CPU 4096 is not available here",
    )
    assert list(tmp_path.iterdir()) == []
    assert_refused(
        run_quell("attribute", "analyse", tmp_path, "--data", tmp_path / "d"), "no measured run"
    )
    assert_refused(
        run_quell("attribute", "results", "--data", tmp_path, "--out", tmp_path / "p.md"),
        "results.json: missing",
    )
    foreign = tmp_path / "foreign" / "other-run"
    foreign.mkdir(parents=True)
    (foreign / "cell.json").write_text("{}")
    for command in ("analyse", "periodic"):
        assert_refused(
            run_quell("attribute", command, foreign.parent, "--data", tmp_path / "d2"),
            "no run of the campaign's cells here",
        )

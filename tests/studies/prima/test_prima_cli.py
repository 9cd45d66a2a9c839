"""``quell prima profile`` and ``validate`` on the simulator: the noise floors they print and
write come from the recorded repetitions."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from quell.cli import app
from quell.models.bundle import load_bundle
from quell.probe import severity_factor

ROOT = Path(__file__).resolve().parents[3]
SPEC = """\
name: t
workload: file-100k
instance_type: sim
scenario: profile-base-file.yaml
interference: noise
environment: sim
util_levels_pct: [20, 50]
interference_mbit: [0, 30]
max_total_util_pct: 90
cell_s: 20
warmup_s: 2
repetitions: 2
training: {max_repetitions: 2, rel_width: 0.05}
holdout:
  - {util_pct: 30, interference_mbit: 20}
  - {util_pct: 40, interference_mbit: 25}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """SPEC written beside a copy of its base scenario."""
    shutil.copy(ROOT / "scenarios" / "prima" / "profile-base-file.yaml", tmp_path)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def floor(relative_se: list[float]) -> float:
    return math.sqrt(2 / math.pi) * math.sqrt(sum(x * x for x in relative_se) / len(relative_se))


def test_profile_and_validate_print_the_floors_of_their_own_runs(
    tmp_path: Path, spec: Path
) -> None:
    out = tmp_path / "out"
    runner = CliRunner()
    r = runner.invoke(app, ["prima", "profile", str(spec), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    # The model cells' floor, recomputed from cells.jsonl: with two runs a and b pooled into
    # m, the standard error is |a − b| / 2.
    table = load_bundle(out / "bundle.json").probe_table
    cells: dict[tuple[float, float], list[dict[str, object]]] = {}
    for line in (out / "cells.jsonl").read_text().splitlines():
        c = json.loads(line)
        if c["kind"] == "model":
            cells.setdefault((c["util_target_pct"], c["interference_mbit"]), []).append(c)
    rt_se, sf_se = [], []
    for a, b in cells.values():
        n_a, n_b = a["requests"], b["requests"]
        rt = (a["mean_rt_s"] * n_a + b["mean_rt_s"] * n_b) / (n_a + n_b)  # type: ignore[operator]
        rt_se.append(100 * abs(a["mean_rt_s"] - b["mean_rt_s"]) / 2 / rt)  # type: ignore[operator]
        sf_a, sf_b, sf = (
            float(severity_factor(float(np.mean(p)), table.predict(u)))
            for p, u in (
                (a["probe_s"], a["util_pct"]),
                (b["probe_s"], b["util_pct"]),
                (a["probe_s"] + b["probe_s"], (a["util_pct"] + b["util_pct"]) / 2),  # type: ignore[operator]
            )
        )
        if sf >= 0.1:
            sf_se.append(100 * abs(sf_a - sf_b) / 2 / sf)
    assert len(rt_se) == 4 and sf_se
    assert doc["scatter"]["rt_noise_pct"] == pytest.approx(floor(rt_se))
    assert doc["scatter"]["sf_noise_pct"] == pytest.approx(floor(sf_se))
    assert doc["scatter"]["sf_noise_points"] == len(sf_se)
    assert f"{floor(rt_se):.1f} % in RT" in " ".join(r.stdout.split())

    r = runner.invoke(
        app, ["prima", "validate", str(spec), str(out / "bundle.json"), "--out", str(out), "--json"]
    )
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout.strip().splitlines()[-1])
    assert v == json.loads((out / "validation.json").read_text())
    rows = v["rows"]
    assert [len(x["rt_reps_s"]) for x in rows] == [2, 2]
    rt_se = [100 * abs(x["rt_reps_s"][0] - x["rt_reps_s"][1]) / 2 / x["rt_s"] for x in rows]
    assert v["rtm_noise_pct"] == pytest.approx(floor(rt_se))
    text = " ".join(r.stdout.split())
    assert f"a mean error of about {floor(rt_se):.1f} % in RT" in text


def test_more_repetitions_measure_only_the_missing_runs_and_build_the_same_bundle(
    tmp_path: Path, spec: Path
) -> None:
    # SPEC asks for two runs per point
    runner = CliRunner()

    def profile(out: Path, *extra: str) -> list[dict[str, object]]:
        r = runner.invoke(app, ["prima", "profile", str(spec), "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        return [json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines()]

    deepened = tmp_path / "deepened"
    one = profile(deepened, "--repetitions", "1")
    one_run_bundle = json.loads((deepened / "bundle.json").read_text())
    assert {c["repetition"] for c in one if c["kind"] == "model"} == {0}
    two = profile(deepened, "--repetitions", "2")
    assert two[: len(one)] == one
    added = two[len(one) :]
    model_cells = {
        (c["util_target_pct"], c["interference_mbit"]) for c in one if c["kind"] == "model"
    }
    assert [c["kind"] for c in added] == ["model"] * len(model_cells)
    assert {(c["util_target_pct"], c["interference_mbit"]) for c in added} == model_cells
    assert {c["repetition"] for c in added} == {1}

    fresh = tmp_path / "fresh"
    profile(fresh)
    a = json.loads((deepened / "bundle.json").read_text())
    b = json.loads((fresh / "bundle.json").read_text())
    assert a["rtm_points"] == b["rtm_points"] and a["im_points"] == b["im_points"]

    # Back to one run per cell: nothing is measured, and the bundle and the cells' scatter
    # use the first run of each cell only (one run has no scatter).
    r = runner.invoke(
        app, ["prima", "profile", str(spec), "--out", str(deepened), "--repetitions", "1", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert len((deepened / "cells.jsonl").read_text().splitlines()) == len(two)
    back = json.loads((deepened / "bundle.json").read_text())
    assert back["rtm_points"] == one_run_bundle["rtm_points"]
    scatter = json.loads(r.stdout.strip().splitlines()[-1])["scatter"]
    assert scatter["rt_noise_pct"] is None and scatter["sf_noise_pct"] is None

    r = runner.invoke(
        app,
        [
            "prima",
            "validate",
            str(spec),
            str(deepened / "bundle.json"),
            "--out",
            str(deepened),
            "--repetitions",
            "1",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout.strip().splitlines()[-1])["rows"]
    assert [len(x["rt_reps_s"]) for x in rows] == [1, 1]


@pytest.mark.parametrize("value", ["0", "21", "many"])
def test_a_bad_repetitions_option_is_refused_before_anything_runs(
    tmp_path: Path, spec: Path, value: str
) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app, ["prima", "profile", str(spec), "--out", str(out), "--repetitions", value]
    )
    assert r.exit_code == 2
    assert "--repetitions" in r.output
    assert not out.exists()

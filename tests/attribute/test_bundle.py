"""The attribution model bundle: a round trip that predicts the same, and every refusal named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quell.attribute.bundle import (
    FloorData,
    ModelMeta,
    build_model_bundle,
    load_attribution_model,
)
from quell.attribute.calibration import GroupResidual, IntervalCalibration
from quell.attribute.models import SparseGP
from quell.errors import InputError

FEATURES = ("cpu_seconds", "runq_wait_seconds", "class=/a", "class=/b")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SparseGP, np.ndarray]:
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(size=(400, 2)), np.eye(2)[rng.integers(0, 2, 400)]])
    y = x[:, 1] + 0.3 * x[:, 2] + rng.normal(0, 0.05, 400)
    gp = SparseGP(n_inducing=15, max_iters=15, seed=2).fit(x, y)
    meta = ModelMeta(created="now", n_train=400, n_inducing=15, max_iters=15, seed=2)
    path = tmp_path_factory.mktemp("bundle") / "model.json"
    build_model_bundle(gp, FEATURES, ("/a", "/b"), meta, CALIBRATION, FLOOR).save(path)
    return path, gp, x


FLOOR = FloorData(
    method="uncontended-quantile", quantile=0.995, seconds=0.0125, requests=400, runs=["clean"]
)
CALIBRATION = IntervalCalibration(
    scale=1.6,
    groups=(GroupResidual("run-a", 200, 0.81, 3.0), GroupResidual("run-b", 200, 0.9, 2.5)),
)


def test_a_round_trip_predicts_the_same(saved) -> None:
    path, gp, x = saved
    loaded = load_attribution_model(path)
    assert loaded.features == ("cpu_seconds", "runq_wait_seconds")
    assert loaded.classes == ("/a", "/b")
    a, b = gp.predict(x), loaded.gp.predict(x)
    np.testing.assert_allclose(b.mean_seconds, a.mean_seconds, rtol=1e-12)
    # the interval as calibrated: the GP's own sd times the calibration's scale
    np.testing.assert_allclose(b.std_seconds, 1.6 * a.std_seconds, rtol=1e-12)
    assert loaded.data.version == 3
    assert loaded.floor_seconds == 0.0125 and loaded.data.floor == FLOOR
    cal = loaded.data.calibration
    assert cal is not None and cal.method == "leave-one-group-out" and cal.scale == 1.6
    assert [(g.group, g.n) for g in cal.groups] == [("run-a", 200), ("run-b", 200)]


def test_a_version_1_file_is_read_with_its_old_meaning(saved, tmp_path: Path) -> None:
    """Version 1 had no calibration: its interval is the GP's own (scale 1)."""
    _path, gp, x = saved

    def to_v1(d: dict[str, Any]) -> None:
        d["version"] = 1
        del d["calibration"]
        del d["floor"]

    old = load_attribution_model(_edited(saved, tmp_path, to_v1))
    assert old.data.version == 1 and old.data.calibration is None
    np.testing.assert_allclose(old.gp.predict(x).std_seconds, gp.predict(x).std_seconds)
    with pytest.raises(InputError, match="calibration"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d.pop("calibration")))
    with pytest.raises(InputError, match="calibration"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d.update(version=1)))


def test_a_version_2_file_has_no_floor(saved, tmp_path: Path) -> None:
    """Version 2 attributed every positive predicted excess: read with a floor of 0; version 3
    needs its floor, and a floor of method none is 0."""

    def to_v2(d: dict[str, Any]) -> None:
        d["version"] = 2
        del d["floor"]

    old = load_attribution_model(_edited(saved, tmp_path, to_v2))
    assert old.data.floor is None and old.floor_seconds == 0.0
    with pytest.raises(InputError, match="floor: missing"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d.pop("floor")))
    with pytest.raises(InputError, match="not part of version 2"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d.update(version=2)))
    with pytest.raises(InputError, match="must be 0 for method none"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d["floor"].update(method="none")))


def test_without_a_calibration_the_bundle_says_so(saved, tmp_path: Path) -> None:
    _path, gp, _x = saved
    meta = ModelMeta(created="now", n_train=400, n_inducing=15, max_iters=15, seed=2)
    bundle = build_model_bundle(gp, FEATURES, ("/a", "/b"), meta)
    assert bundle.data.calibration is not None
    assert (bundle.data.calibration.method, bundle.data.calibration.scale) == ("none", 1.0)
    assert bundle.data.floor == FloorData(method="none") and bundle.floor_seconds == 0.0
    with pytest.raises(InputError, match="interval_scale"):
        build_model_bundle(gp.with_interval_scale(2.0), FEATURES, ("/a", "/b"), meta)


def _edited(saved, tmp_path: Path, edit: Any) -> Path:
    doc = json.loads(saved[0].read_text())
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


def test_foreign_corrupt_missing_and_other_versions_are_refused(saved, tmp_path: Path) -> None:
    (tmp_path / "corrupt.json").write_text("{not json")
    (tmp_path / "foreign.json").write_text(json.dumps({"format": "quell.ic2.detector"}))
    for name, match in (
        ("corrupt.json", "corrupt.json"),
        ("foreign.json", "not a quell attribution model"),
        ("missing.json", "missing.json"),
    ):
        with pytest.raises(InputError, match=match):
            load_attribution_model(tmp_path / name)
    with pytest.raises(InputError, match="version 9; this quell reads 1, 2, 3"):
        load_attribution_model(_edited(saved, tmp_path, lambda d: d.update(version=9)))


def test_inconsistent_contents_are_refused_naming_every_problem(saved, tmp_path: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["features"][0] = "cycles"
        d["posterior"]["x_scale"] = d["posterior"]["x_scale"][:-1]
        d["posterior"]["woodbury_inv"] = d["posterior"]["woodbury_inv"][:-1]

    with pytest.raises(InputError) as err:
        load_attribution_model(_edited(saved, tmp_path, edit))
    assert [p.location for p in err.value.problems] == [
        "features[0]",
        "posterior.x_scale",
        "posterior.woodbury_inv",
    ]
    with pytest.raises(InputError, match="noise_variance"):
        load_attribution_model(
            _edited(saved, tmp_path, lambda d: d["posterior"].update(noise_variance=-1.0))
        )

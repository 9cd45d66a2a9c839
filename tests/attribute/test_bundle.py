"""The attribution model bundle: a round trip that predicts the same, and every refusal named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quell.attribute.bundle import ModelMeta, build_model_bundle, load_attribution_model
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
    build_model_bundle(gp, FEATURES, ("/a", "/b"), meta).save(path)
    return path, gp, x


def test_a_round_trip_predicts_the_same(saved) -> None:
    path, gp, x = saved
    loaded = load_attribution_model(path)
    assert loaded.features == ("cpu_seconds", "runq_wait_seconds")
    assert loaded.classes == ("/a", "/b")
    a, b = gp.predict(x), loaded.gp.predict(x)
    np.testing.assert_allclose(b.mean_seconds, a.mean_seconds, rtol=1e-12)
    np.testing.assert_allclose(b.std_seconds, a.std_seconds, rtol=1e-12)


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
    with pytest.raises(InputError, match="version 9; this quell reads 1"):
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

"""The detector bundle: a round trip that predicts the same, and every refusal named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quell.detect.bundle import DetectorMeta, build_detector_bundle, load_detector
from quell.detect.features import DEFAULT_FEATURES
from quell.detect.tree import CostMatrix, CostSensitiveTree
from quell.errors import InputError
from tests.detect.trees import write_detector


def _fitted() -> tuple[CostSensitiveTree, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 1500)
    x = rng.normal(0.0, 1.0, (1500, len(DEFAULT_FEATURES))) + y[:, None]
    x[rng.random(x.shape) < 0.05] = np.nan
    return CostSensitiveTree(DEFAULT_FEATURES, CostMatrix(), "expected").fit(x, y), x


def test_a_round_trip_predicts_the_same(tmp_path: Path) -> None:
    tree, x = _fitted()
    meta = DetectorMeta(workload="php-page", environment="synthetic", created="now", source="t")
    build_detector_bundle(tree, meta, phases=[{"phase": "I", "samples": 1500}]).save(
        tmp_path / "d.json"
    )
    loaded = load_detector(tmp_path / "d.json", "php-page")
    assert loaded.meta == meta
    assert loaded.detector.cost_matrix == CostMatrix()
    assert loaded.detector.cost_method == "expected"
    assert loaded.data.training.phases == [{"phase": "I", "samples": 1500}]
    assert (loaded.detector.predict(x) == tree.predict(x)).all()
    assert loaded.detector.missing_share_ == pytest.approx(tree.missing_share_)
    assert b"pickle" not in (tmp_path / "d.json").read_bytes()
    assert loaded.detector.window_intervals == 1


def test_the_window_travels_with_the_tree(tmp_path: Path) -> None:
    tree, _ = _fitted()
    tree.window_intervals = 3
    meta = DetectorMeta(workload="php-page", environment="synthetic", created="now")
    build_detector_bundle(tree, meta).save(tmp_path / "d.json")
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["training"]["window_intervals"] == 3
    assert load_detector(tmp_path / "d.json").detector.window_intervals == 3
    # a bundle written before the window was recorded reads each interval alone
    del doc["training"]["window_intervals"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert load_detector(tmp_path / "old.json").detector.window_intervals == 1
    doc["training"]["window_intervals"] = 0
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert "window_intervals" in _problems(tmp_path / "bad.json")


def _problems(path: Path, workload: str | None = None) -> str:
    with pytest.raises(InputError) as info:
        load_detector(path, workload)
    assert info.value.exit_code == 2
    return str(info.value)


def _edit(tmp_path: Path, change: Any) -> Path:
    path = write_detector(tmp_path / "d.json")
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    return path


def test_another_workloads_bundle_is_refused(tmp_path: Path) -> None:
    path = write_detector(tmp_path / "d.json", workload="file-100k")
    assert "trained on workload 'file-100k', not 'php-page'" in _problems(path, "php-page")


def test_foreign_old_and_broken_files_are_refused(tmp_path: Path) -> None:
    assert "cannot read detector bundle" in _problems(tmp_path / "none.json")
    (tmp_path / "x.json").write_text('{"format": "quell.prima.bundle"}')
    assert "not a quell detector bundle" in _problems(tmp_path / "x.json")
    path = _edit(tmp_path, lambda d: d.update(version=9))
    assert "detector bundle version 9; this quell reads 1" in _problems(path)
    (tmp_path / "t.json").write_text("{trunc")
    assert "not valid JSON" in _problems(tmp_path / "t.json")


def _bad_feature(doc: dict[str, Any]) -> None:
    doc["features"][3] = "cmr_guess"


def _bad_tree(doc: dict[str, Any]) -> None:
    doc["tree"]["children_left"][0] = 7
    doc["tree"]["feature"][2] = 99


def _bad_cost(doc: dict[str, Any]) -> None:
    doc["cost_matrix"][0][0] = 1.0


def _unknown_key(doc: dict[str, Any]) -> None:
    doc["meta"]["colour"] = "red"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_bad_feature, "unknown feature 'cmr_guess'"),
        (_bad_tree, "tree node 0: children 7, 2 out of order"),
        (_bad_tree, "tree node 2: feature 99 out of range"),
        (_bad_cost, "cost_matrix: must have a zero diagonal"),
        (_unknown_key, "meta.colour: unknown key"),
    ],
)
def test_contents_that_are_not_a_detector_are_refused(
    tmp_path: Path, change: Any, expected: str
) -> None:
    assert expected in _problems(_edit(tmp_path, change))

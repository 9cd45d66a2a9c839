"""The cost-sensitive tree: the cost matrix's form, a constructed leaf whose verdict the costs
flip, raising c lowering missed I, the plain-Python walk against scikit-learn's own predict,
missing values and the abstention without the paper's attributes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.detect.features import DEFAULT_FEATURES, PAPER_FEATURES
from quell.detect.labels import NI, I, T
from quell.detect.tree import LEAF, CostMatrix, CostSensitiveTree, TreeArrays
from quell.errors import InputError
from tests.detect.trees import rt_detector


def test_the_papers_cost_matrix() -> None:
    m = CostMatrix().matrix()
    # rows true, columns predicted: NI, T, I
    assert m.tolist() == [[0, 1, 5], [1, 0, 1], [10, 1, 0]]
    assert CostMatrix().label == "5:1:10" and CostMatrix.uniform().label == "1:1:1"
    assert CostMatrix.from_matrix(m.tolist()) == CostMatrix()
    with pytest.raises(InputError, match="zero diagonal"):
        CostMatrix.from_matrix([[1, 1, 5], [1, 0, 1], [10, 1, 0]])
    with pytest.raises(InputError, match="must be a finite number"):
        CostMatrix(ni_as_i=-1.0)


def _one_leaf(shares: tuple[float, float, float]) -> TreeArrays:
    """A tree of one split on RT whose right leaf has ``shares``."""
    return TreeArrays(
        children_left=(1, LEAF, LEAF),
        children_right=(2, LEAF, LEAF),
        feature=(PAPER_FEATURES.index("rt_s"), -1, -1),
        threshold=(0.1, 0.0, 0.0),
        missing_left=(True, False, False),
        value=((0.5, 0.0, 0.5), (1.0, 0.0, 0.0), shares),
        samples=(20, 10, 10),
    )


def _verdict(cost: CostMatrix, shares: tuple[float, float, float]) -> int:
    tree = CostSensitiveTree(PAPER_FEATURES, cost, "expected").set_tree(_one_leaf(shares))
    row = [math.nan] * 3
    row[PAPER_FEATURES.index("rt_s")] = 1.0  # right leaf
    row[PAPER_FEATURES.index("lpo_cpu_s_per_req")] = 0.01
    row[PAPER_FEATURES.index("workdone_req_cores")] = 1.0
    got = tree.predict_one(row)
    assert got is not None
    return got


def test_the_cost_matrix_flips_a_leafs_verdict() -> None:
    # a leaf of 60 % NI and 40 % I. Expected costs, predicting NI / T / I:
    # 1:1:1   -> 0.4 × 1 = 0.4  / 0.6 + 0.4 = 1.0 / 0.6 × 1 = 0.6   -> NI
    # 5:1:10  -> 0.4 × 10 = 4.0 / 1.0             / 0.6 × 5 = 3.0   -> T
    shares = (0.6, 0.0, 0.4)
    assert _verdict(CostMatrix.uniform(), shares) == NI
    assert _verdict(CostMatrix(), shares) == T
    # with T as dear as the rest (10), 5:1:10 commits: NI 4.0 / T 10.0 / I 3.0 -> I
    assert _verdict(CostMatrix(5, 1, 10, to_transient=10), shares) == I


def test_weights_are_the_row_sums_of_the_cost_matrix() -> None:
    tree = CostSensitiveTree(PAPER_FEATURES, CostMatrix(), "weights")
    assert tree.class_weights().tolist() == [6.0, 2.0, 11.0]
    w = tree.sample_weights(np.array([0, 1, 2, 2]))
    assert w is not None
    assert w.tolist() == pytest.approx([6 / 7.5, 2 / 7.5, 11 / 7.5, 11 / 7.5])
    assert (
        CostSensitiveTree(PAPER_FEATURES, CostMatrix(), "expected").sample_weights(np.array([0, 2]))
        is None
    )


def _overlapping(seed: int, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """NI and I whose RT, LPO and WorkDone overlap (one standard deviation apart), some T."""
    rng = np.random.default_rng(seed)
    y = rng.choice([NI, T, I], n, p=[0.45, 0.1, 0.45])
    shift = np.where(y == I, 1.0, np.where(y == T, 0.5, 0.0))
    x = rng.normal(0.0, 1.0, (n, 3)) + shift[:, None]
    return x, y


@pytest.mark.parametrize("method", ["weights", "expected"])
def test_raising_c_lowers_the_interference_missed(method: str) -> None:
    x, y = _overlapping(1)
    xt, yt = _overlapping(2)

    def missed(c: float) -> int:
        cost = CostMatrix(ni_as_i=1.0, transient_as_other=1.0, i_as_ni=c)
        tree = CostSensitiveTree(PAPER_FEATURES, cost, method, min_samples_leaf=30).fit(x, y)  # type: ignore[arg-type]
        pred = tree.predict(xt)
        return int(np.sum((yt == I) & (pred == NI)))

    counts = [missed(c) for c in (1.0, 3.0, 10.0)]
    assert counts[0] > counts[1] > counts[2], counts
    assert counts[2] < counts[0] / 3, counts


def test_the_walk_agrees_with_scikit_learn_with_missing_values() -> None:
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(5)
    n = 2000
    y = rng.integers(0, 3, n)
    x = rng.normal(0.0, 1.0, (n, len(DEFAULT_FEATURES))) + y[:, None] * 0.7
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, -1] = np.nan  # a feature never measured
    tree = CostSensitiveTree(DEFAULT_FEATURES, CostMatrix(), "weights").fit(x, y)
    sk = DecisionTreeClassifier(
        criterion="entropy", max_depth=6, min_samples_leaf=10, random_state=0
    )
    sk.fit(x, y, sample_weight=tree.sample_weights(y))
    ours = tree.predict(x)
    has_core = ~np.isnan(x[:, list(tree.core_index_)]).any(axis=1)
    assert (ours[~has_core] == -1).all()
    assert (ours[has_core] == sk.predict(x[has_core])).all()
    assert tree.missing_share_[-1] == 1.0
    np.testing.assert_allclose(tree.predict_proba(x[has_core]), sk.predict_proba(x[has_core]))


def test_a_split_on_whether_a_feature_was_measured_keeps_a_finite_threshold() -> None:
    # The run-queue wait missing (NaN) exactly in the I intervals: scikit-learn splits
    # "measured or not" with threshold +inf; the tree keeps a finite one that walks the same.
    n = 60
    y = np.array([NI, T, I] * (n // 3))
    x = np.tile(np.linspace(0.1, 0.3, n)[:, None], (1, len(DEFAULT_FEATURES)))
    runq = DEFAULT_FEATURES.index("runqueue_wait_s_per_s")
    x[:, runq] = np.where(y == I, np.nan, 0.2)
    tree = CostSensitiveTree(DEFAULT_FEATURES, CostMatrix(), "weights", min_samples_leaf=1)
    tree.fit(x, y)
    assert all(math.isfinite(v) for v in tree.tree_.threshold)
    assert (tree.predict(x)[y == I] == I).all()
    assert not (tree.predict(x)[y != I] == I).any()


def test_no_verdict_without_the_papers_attributes() -> None:
    det = rt_detector()
    row = [math.nan] * len(DEFAULT_FEATURES)
    assert det.predict_one(row) is None
    row[DEFAULT_FEATURES.index("rt_s")] = 0.3
    row[DEFAULT_FEATURES.index("lpo_cpu_s_per_req")] = 0.01
    assert det.predict_one(row) is None  # WorkDone missing
    row[DEFAULT_FEATURES.index("workdone_req_cores")] = 2.0
    assert det.predict_one(row) == I  # PSI and the rest may be missing


def test_training_data_is_checked() -> None:
    tree = CostSensitiveTree(PAPER_FEATURES)
    with pytest.raises(InputError) as info:
        tree.fit(np.array([[1.0, np.inf, 2.0]]), np.array([3]))
    text = str(info.value)
    assert "infinite" in text and "class codes" in text

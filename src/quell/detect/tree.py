"""IC2's interference detector: a cost-sensitive decision tree over the classes NI, T and I
(Section 4, "Decision Tree for Detecting Interference"; costs of Section 5.1.3).

**The cost matrix.** ``cost[true, predicted]``, rows and columns in the order NI, T, I. The
paper's a : b : c (5 : 1 : 10 in production, 1 : 1 : 1 by default): a = NI predicted I, b = T
predicted anything else, c = I predicted NI; a correct prediction costs 0. It is silent on NI or
I predicted T: here ``to_transient`` (default 1, the default cost): a T verdict only delays the
state machine by an interval, it reconfigures nothing.

**Cost-sensitivity**, two ways (``cost_method``), as Weka's CostSensitiveClassifier offers them:

* ``weights`` (Weka's default, and so most likely the paper's): the tree is grown with each
  training sample weighted by the total cost of misclassifying its class (its row sum,
  normalised to a mean weight of 1), so costly classes shape the splits; a leaf predicts its
  class of highest weighted share.
* ``expected``: the tree is grown unweighted; a leaf predicts the class of minimum expected
  cost, argmin_k Σ_j p_j cost[j, k], over its class shares p. With ``to_transient`` at 1 an
  uncertain leaf answers T (it costs at most 1 whatever the truth), where ``weights`` commits
  to NI or I.

Either way a leaf's verdict is fixed when the tree is fitted (``leaf_class_``), so predicting is
a walk down the tree and one lookup.

**Missing values** (NaN) are routed as scikit-learn's tree learned to (each split's
``missing_go_to_left``; a split that saw none in training sends them to its larger child).

**Predicting one interval** (``predict_one``) walks plain Python lists, with no numpy and no
scikit-learn: a few microseconds. scikit-learn is needed only to fit, and is imported there.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from quell.detect.features import CORE_FEATURES, DEFAULT_FEATURES, check_features, core_present
from quell.detect.labels import CLASSES
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

CostMethod = Literal["weights", "expected"]
LEAF: Final = -1
"""``children_left`` / ``children_right`` of a leaf."""


@dataclass(frozen=True)
class CostMatrix:
    """The paper's a : b : c, and the cost of NI or I predicted T."""

    ni_as_i: float = 5.0
    """a: no interference predicted as interference (a needless reconfiguration)."""
    transient_as_other: float = 1.0
    """b: a transient predicted as anything else."""
    i_as_ni: float = 10.0
    """c: interference predicted as none (interference left unmitigated)."""
    to_transient: float = 1.0
    """NI or I predicted as T; the paper is silent (see the module's docstring)."""

    def __post_init__(self) -> None:
        bad = [
            Problem(name, f"must be a finite number >= 0, got {v}")
            for name, v in self.__dict__.items()
            if not (math.isfinite(v) and v >= 0)
        ]
        if bad:
            raise InputError("cost matrix", bad)

    @classmethod
    def uniform(cls) -> CostMatrix:
        """1 : 1 : 1, every error alike (the paper's default)."""
        return cls(1.0, 1.0, 1.0, 1.0)

    @property
    def label(self) -> str:
        return f"{self.ni_as_i:g}:{self.transient_as_other:g}:{self.i_as_ni:g}"

    def matrix(self) -> FloatArray:
        """cost[true, predicted], NI, T, I."""
        a, b, c, t = self.ni_as_i, self.transient_as_other, self.i_as_ni, self.to_transient
        return np.array([[0.0, t, a], [b, 0.0, b], [c, t, 0.0]])

    @classmethod
    def from_matrix(cls, m: Sequence[Sequence[float]], source: str = "cost_matrix") -> CostMatrix:
        """The inverse of ``matrix``; a matrix not of that form is refused."""
        a = np.asarray(m, dtype=float)
        if a.shape != (3, 3):
            raise InputError(source, [Problem("", f"must be 3 x 3, got shape {a.shape}")])
        made = cls(a[0, 2], a[1, 0], a[2, 0], a[0, 1])
        if not np.array_equal(made.matrix(), a):
            raise InputError(
                source,
                [
                    Problem(
                        "",
                        "must have a zero diagonal, T's row alike off it, and NI→T = I→T"
                        f" (got {a.tolist()})",
                    )
                ],
            )
        return made


@dataclass(frozen=True)
class TreeArrays:
    """A fitted binary tree as parallel lists, node 0 the root. A node goes left when its
    feature is ``<= threshold`` (a NaN goes left if ``missing_left``); a leaf has both children
    ``LEAF``; ``value`` holds each node's class shares (NI, T, I) and ``samples`` its training
    samples."""

    children_left: tuple[int, ...]
    children_right: tuple[int, ...]
    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    missing_left: tuple[bool, ...]
    value: tuple[tuple[float, float, float], ...]
    samples: tuple[int, ...]

    def problems(self, n_features: int) -> list[Problem]:
        """What makes these lists not a tree over ``n_features`` features (empty if none)."""
        n = len(self.children_left)
        if n == 0:
            return [Problem("tree", "has no nodes")]
        lengths = {
            len(x)
            for x in (
                self.children_right,
                self.feature,
                self.threshold,
                self.missing_left,
                self.value,
                self.samples,
            )
        }
        if lengths != {n}:
            return [Problem("tree", f"its lists differ in length ({n} nodes in children_left)")]
        out = []
        for k in range(n):
            left, right = self.children_left[k], self.children_right[k]
            if (left == LEAF) != (right == LEAF):
                out.append(Problem(f"tree node {k}", "has one child"))
            elif left != LEAF and not (k < left < n and k < right < n and left != right):
                out.append(Problem(f"tree node {k}", f"children {left}, {right} out of order"))
            elif left != LEAF and not 0 <= self.feature[k] < n_features:
                out.append(Problem(f"tree node {k}", f"feature {self.feature[k]} out of range"))
            elif left != LEAF and not math.isfinite(self.threshold[k]):
                out.append(Problem(f"tree node {k}", "threshold not finite"))
            v = self.value[k]
            if len(v) != 3 or not all(math.isfinite(p) and p >= 0 for p in v) or sum(v) <= 0:
                out.append(Problem(f"tree node {k}", f"class shares {list(v)} not 3 shares >= 0"))
        if out:
            return out
        reached = [False] * n
        reached[0] = True
        for k in range(n):
            if reached[k] and self.children_left[k] != LEAF:
                reached[self.children_left[k]] = reached[self.children_right[k]] = True
        if not all(reached):
            out.append(
                Problem("tree", f"nodes {[k for k in range(n) if not reached[k]]} unreached")
            )
        return out

    def leaf_class(self, decision_cost: FloatArray) -> tuple[int, ...]:
        """Per node, the class of least ``decision_cost``-weighted cost over its shares (ties:
        the first of NI, T, I)."""
        p = np.asarray(self.value, dtype=float)
        p = p / p.sum(axis=1, keepdims=True)
        return tuple(int(k) for k in np.argmin(p @ decision_cost, axis=1))


class CostSensitiveTree:
    """A decision tree over ``features`` whose verdicts minimise ``cost`` (see the module).

    Parameters are stored as given; ``fit`` sets ``tree_``, ``leaf_class_``, ``core_index_``
    and ``missing_share_`` (per feature, the share of training rows without it).
    ``criterion`` ``entropy`` splits by information gain, as the paper's Weka J48 (C4.5).
    ``min_samples_leaf`` keeps leaves large enough that their class shares mean something
    (``expected`` reads them); ``max_depth`` keeps the tree a handful of comparisons deep.
    ``window_intervals``: each row it is fitted on and predicts is a feature's median over that
    many intervals (``quell.detect.features.roll``, ``FeatureWindow``). The tree does not roll
    rows itself: whoever builds them reads this.
    """

    def __init__(
        self,
        features: Sequence[str] = DEFAULT_FEATURES,
        cost: CostMatrix | None = None,
        cost_method: CostMethod = "weights",
        max_depth: int = 6,
        min_samples_leaf: int = 10,
        criterion: Literal["entropy", "gini"] = "entropy",
        random_state: int = 0,
        window_intervals: int = 1,
    ) -> None:
        self.features = tuple(features)
        self.cost = cost
        self.cost_method = cost_method
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.criterion = criterion
        self.random_state = random_state
        self.window_intervals = window_intervals

    # -- the cost ------------------------------------------------------------------------------
    @property
    def cost_matrix(self) -> CostMatrix:
        return CostMatrix() if self.cost is None else self.cost

    def decision_cost(self) -> FloatArray:
        """The matrix a leaf's shares are weighed with: the costs (``expected``) or 0/1
        (``weights``: the costs are already in the shares)."""
        if self.cost_method == "expected":
            return self.cost_matrix.matrix()
        return 1.0 - np.eye(3)

    def class_weights(self) -> FloatArray:
        """Per class, the weight of a training sample under ``weights``: its row sum."""
        out: FloatArray = self.cost_matrix.matrix().sum(axis=1)
        return out

    def sample_weights(self, y: IntArray) -> FloatArray | None:
        """Weights of ``y``'s samples (mean 1), or ``None`` when the method takes none."""
        if self.cost_method != "weights":
            return None
        w = self.class_weights()[y]
        if not np.any(w > 0):
            raise InputError("cost matrix", [Problem("", "every training sample weighs 0")])
        return np.asarray(w / w.mean(), dtype=float)

    # -- fit -----------------------------------------------------------------------------------
    def fit(self, x: FloatArray, y: IntArray) -> CostSensitiveTree:
        """Grow the tree on ``x`` (rows × ``features``, NaN where not measured) and ``y`` (class
        codes of ``CLASSES``)."""
        from sklearn.tree import DecisionTreeClassifier

        names = check_features(self.features)
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=np.int64)
        problems = []
        if x.ndim != 2 or x.shape[1] != len(names):
            problems.append(Problem("x", f"must be rows x {len(names)} features, got {x.shape}"))
        elif x.shape[0] != y.shape[0]:
            problems.append(Problem("y", f"{y.shape[0]} labels for {x.shape[0]} rows"))
        elif x.shape[0] == 0:
            problems.append(Problem("x", "no rows"))
        elif np.any(np.isinf(x)):
            problems.append(Problem("x", "infinite values (a missing one is NaN)"))
        if y.size and not np.isin(y, (0, 1, 2)).all():
            problems.append(Problem("y", f"class codes must be 0, 1, 2 ({', '.join(CLASSES)})"))
        if problems:
            raise InputError("detector training data", problems)
        sk = DecisionTreeClassifier(
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        )
        sk.fit(x, y, sample_weight=self.sample_weights(y))
        self._take(sk)
        self.missing_share_ = tuple(float(v) for v in np.isnan(x).mean(axis=0))
        return self

    def _take(self, sk: Any) -> None:
        t = sk.tree_
        shares = np.zeros((t.node_count, 3))
        shares[:, np.asarray(sk.classes_, dtype=np.int64)] = t.value[:, 0, :]
        leaf = t.children_left == LEAF
        self.set_tree(
            TreeArrays(
                children_left=tuple(int(v) for v in t.children_left),
                children_right=tuple(int(v) for v in t.children_right),
                feature=tuple(
                    -1 if is_leaf else int(f) for f, is_leaf in zip(t.feature, leaf, strict=True)
                ),
                # A split of "measured or missing" has threshold +inf in scikit-learn: every
                # number goes left, a NaN as missing_go_to_left says. The largest float does the
                # same and stays a finite number in the bundle's JSON.
                threshold=tuple(
                    0.0 if lf else min(float(v), sys.float_info.max)
                    for v, lf in zip(t.threshold, leaf, strict=True)
                ),
                missing_left=tuple(bool(v) for v in t.missing_go_to_left),
                value=tuple((float(a), float(b), float(c)) for a, b, c in shares),
                samples=tuple(int(v) for v in t.n_node_samples),
            )
        )

    def set_tree(self, tree: TreeArrays, source: str = "detector") -> CostSensitiveTree:
        """Use ``tree`` (fitted here or read from a bundle) as the fitted tree; one that is not a
        tree over ``features`` is refused."""
        names = check_features(self.features, source)
        problems = tree.problems(len(names))
        if problems:
            raise InputError(source, problems)
        self.tree_ = tree
        self.leaf_class_ = tree.leaf_class(self.decision_cost())
        self.core_index_ = tuple(names.index(n) for n in CORE_FEATURES)
        # flat copies for the walk in predict_one
        self._walk = (
            list(tree.children_left),
            list(tree.children_right),
            list(tree.feature),
            list(tree.threshold),
            list(tree.missing_left),
            list(self.leaf_class_),
        )
        return self

    # -- predict -------------------------------------------------------------------------------
    def leaf_one(self, row: Sequence[float]) -> int:
        """The leaf ``row`` (one interval's features, in ``features`` order) ends in."""
        left, right, feature, threshold, missing_left, _ = self._walk
        k = 0
        while left[k] != LEAF:
            v = row[feature[k]]
            if v != v:  # NaN: not measured
                k = left[k] if missing_left[k] else right[k]
            else:
                k = left[k] if v <= threshold[k] else right[k]
        return k

    def predict_one(self, row: Sequence[float]) -> int | None:
        """The class code for one interval; ``None`` when a core feature was not measured (no
        verdict: the paper's attributes are missing)."""
        if not core_present(row, self.core_index_):
            return None
        return self._walk[5][self.leaf_one(row)]

    def apply(self, x: FloatArray) -> IntArray:
        """The leaf of each row."""
        x = np.asarray(x, dtype=float)
        return np.fromiter((self.leaf_one(r) for r in x.tolist()), np.int64, x.shape[0])

    def predict_proba(self, x: FloatArray) -> FloatArray:
        """Each row's leaf's class shares (weighted under ``weights``)."""
        p = np.asarray(self.tree_.value, dtype=float)[self.apply(x)]
        out: FloatArray = p / p.sum(axis=1, keepdims=True)
        return out

    def predict(self, x: FloatArray) -> IntArray:
        """Class codes; a row without a core feature gets ``-1`` (no verdict)."""
        x = np.asarray(x, dtype=float)
        out = np.asarray(self.leaf_class_, dtype=np.int64)[self.apply(x)]
        out[np.isnan(x[:, list(self.core_index_)]).any(axis=1)] = -1
        return out


__all__ = ["LEAF", "CostMatrix", "CostMethod", "CostSensitiveTree", "TreeArrays"]

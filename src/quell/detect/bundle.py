"""The detector bundle: one fitted IC2 detector in one versioned JSON file — the tree as
arrays, the features it reads, the cost matrix and how it was applied, the workload it was
trained on and how it was trained (the bootstrap's phases). No pickle: the tree is numbers, and
loading it needs neither scikit-learn nor trust in the file beyond its schema.

``load_detector`` refuses, naming every problem: a missing, unreadable, corrupt or foreign
file, another version, unknown features, a cost matrix not of the paper's form, lists that do
not make a tree over the features, and a bundle trained on another workload than the one asked
for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from quell.core.files import write_json
from quell.core.schema import load_versioned
from quell.detect.features import check_features
from quell.detect.labels import TRANSIENT_S
from quell.detect.tree import CostMatrix, CostMethod, CostSensitiveTree, TreeArrays
from quell.errors import InputError, Problem

FORMAT: Final = "quell.ic2.detector"
VERSION: Final = 1
READABLE: Final = (1,)

Finite = Annotated[float, Field(allow_inf_nan=False)]


class _JsonModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DetectorMeta(_JsonModel):
    workload: Annotated[str, Field(min_length=1)]
    """What the service was loaded with; a detector is only valid for the workload it was
    trained on."""
    environment: Literal["lab", "sim", "live", "synthetic"]
    created: str
    source: str = ""
    """Where the training data came from."""


class TreeData(_JsonModel):
    children_left: list[int]
    children_right: list[int]
    feature: list[int]
    threshold: list[Finite]
    missing_left: list[bool]
    value: list[tuple[Finite, Finite, Finite]]
    samples: list[Annotated[int, Field(ge=0)]]


class TrainingData(_JsonModel):
    """How the tree was grown (``CostSensitiveTree``'s parameters) and on what."""

    cost_method: Literal["weights", "expected"]
    max_depth: Annotated[int, Field(ge=1)]
    min_samples_leaf: Annotated[int, Field(ge=1)]
    criterion: Literal["entropy", "gini"]
    random_state: int
    transient_s: Annotated[float, Field(gt=0)] = TRANSIENT_S
    window_intervals: Annotated[int, Field(ge=1, le=3600)] = 1
    """Each row the tree reads is a feature's median over this many intervals
    (``quell.detect.features.roll``); 1: the interval alone (bundles before it was recorded)."""
    missing_share: list[Annotated[float, Field(ge=0, le=1)]]
    """Per feature, the share of training intervals that did not measure it."""
    phases: list[dict[str, object]] = []
    """The bootstrap's phases (``Bootstrap.provenance``), or one entry for a single fit."""


class DetectorData(_JsonModel):
    format: Literal["quell.ic2.detector"]
    version: Literal[1]
    meta: DetectorMeta
    classes: tuple[Literal["NI"], Literal["T"], Literal["I"]]
    features: Annotated[list[str], Field(min_length=1)]
    """Names of ``quell.detect.features``, in the order of the tree's feature indices."""
    cost_matrix: list[list[Finite]]
    """cost[true][predicted], rows and columns NI, T, I."""
    training: TrainingData
    tree: TreeData


@dataclass
class DetectorBundle:
    """A loaded bundle: the detector, ready to predict, and what the file said of it."""

    meta: DetectorMeta
    detector: CostSensitiveTree
    data: DetectorData

    def save(self, path: Path) -> None:
        write_json(path, self.data.model_dump(mode="json"))


def build_detector_bundle(
    tree: CostSensitiveTree,
    meta: DetectorMeta,
    phases: list[dict[str, object]] | None = None,
    transient_s: float = TRANSIENT_S,
) -> DetectorBundle:
    """The bundle of a fitted ``tree``."""
    t = tree.tree_
    data = DetectorData(
        format=FORMAT,
        version=VERSION,
        meta=meta,
        classes=("NI", "T", "I"),
        features=list(tree.features),
        cost_matrix=tree.cost_matrix.matrix().tolist(),
        training=TrainingData(
            cost_method=tree.cost_method,
            max_depth=tree.max_depth,
            min_samples_leaf=tree.min_samples_leaf,
            criterion=tree.criterion,
            random_state=tree.random_state,
            transient_s=transient_s,
            window_intervals=tree.window_intervals,
            missing_share=list(getattr(tree, "missing_share_", [0.0] * len(tree.features))),
            phases=phases or [],
        ),
        tree=TreeData(
            children_left=list(t.children_left),
            children_right=list(t.children_right),
            feature=list(t.feature),
            threshold=list(t.threshold),
            missing_left=list(t.missing_left),
            value=list(t.value),
            samples=list(t.samples),
        ),
    )
    return _detector(data, "detector bundle")


def _detector(data: DetectorData, source: str) -> DetectorBundle:
    problems: list[Problem] = []
    try:
        check_features(data.features, "features")
    except InputError as exc:
        problems.extend(exc.problems)
    try:
        cost = CostMatrix.from_matrix(data.cost_matrix, "cost_matrix")
    except InputError as exc:
        problems.extend(Problem("cost_matrix", p.message) for p in exc.problems)
    if len(data.training.missing_share) != len(data.features):
        problems.append(Problem("training.missing_share", "one share per feature"))
    if problems:
        raise InputError(source, problems)
    method: CostMethod = data.training.cost_method
    tree = CostSensitiveTree(
        features=data.features,
        cost=cost,
        cost_method=method,
        max_depth=data.training.max_depth,
        min_samples_leaf=data.training.min_samples_leaf,
        criterion=data.training.criterion,
        random_state=data.training.random_state,
        window_intervals=data.training.window_intervals,
    )
    t = data.tree
    arrays = TreeArrays(
        tuple(t.children_left),
        tuple(t.children_right),
        tuple(t.feature),
        tuple(t.threshold),
        tuple(t.missing_left),
        tuple(t.value),
        tuple(t.samples),
    )
    tree.set_tree(arrays, source)
    tree.missing_share_ = tuple(data.training.missing_share)
    return DetectorBundle(data.meta, tree, data)


def load_detector(path: Path, workload: str | None = None) -> DetectorBundle:
    """Read a detector bundle; ``workload``: refuse one trained on another."""
    data = load_versioned(path, "detector bundle", FORMAT, READABLE, DetectorData)
    if workload is not None and data.meta.workload != workload:
        message = f"trained on workload {data.meta.workload!r}, not {workload!r}"
        raise InputError(str(path), [Problem("meta.workload", message)])
    return _detector(data, str(path))


__all__ = [
    "FORMAT",
    "VERSION",
    "DetectorBundle",
    "DetectorData",
    "DetectorMeta",
    "build_detector_bundle",
    "load_detector",
]

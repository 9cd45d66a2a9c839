"""Labelled intervals to train and test the detector on, and the paper's three-phase bootstrap
(Section 4, "Decision Tree for Detecting Interference"; Section 5.1).

Why three phases: once IC2 reconfigures the server, its metrics under interference move (fewer
workers, longer keep-alive), and a tree that only ever saw the baseline configuration misreads
them. So:

* **phase I**: runs with IC2 off (the baseline configuration, interference now and then); the
  phase I (base) tree is trained on them;
* **phase II**: runs with IC2 on, detecting with the phase I tree, so the data holds the
  configurations IC2 sets; the phase II tree is trained on 50 % phase I and 50 % phase II data;
* **phase III**: runs with IC2 on, detecting with the phase II tree; the final tree is trained
  on phase III's data.

The runs come from a ``Runner`` the caller supplies (the lab, the simulator, a synthetic
server): it is given the phase and the detector IC2 runs with (``None`` in phase I) and returns
the labelled intervals it collected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import Observation
from quell.detect.features import check_features, feature_matrix
from quell.detect.labels import CLASSES, TRANSIENT_S, Timeline, label_intervals
from quell.detect.tree import CostSensitiveTree
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

Phase = Literal["I", "II", "III"]


@dataclass(frozen=True)
class Dataset:
    """Labelled intervals: ``x`` (rows × ``features``, NaN where not measured), ``y`` (class
    codes), each row's interval end ``time_s`` and the ``run`` it came from; ``source`` says
    where they were measured."""

    features: tuple[str, ...]
    x: FloatArray
    y: IntArray
    time_s: FloatArray
    run: IntArray
    source: str = ""

    def __post_init__(self) -> None:
        n = self.x.shape[0] if self.x.ndim == 2 else -1
        problems = []
        if self.x.ndim != 2 or self.x.shape[1] != len(self.features):
            problems.append(Problem("x", f"must be rows x {len(self.features)} features"))
        elif not (self.y.shape == self.time_s.shape == self.run.shape == (n,)):
            problems.append(Problem("y", "x, y, time_s and run differ in length"))
        if problems:
            raise InputError("dataset", problems)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: IntArray) -> Dataset:
        return Dataset(
            self.features,
            self.x[index],
            self.y[index],
            self.time_s[index],
            self.run[index],
            self.source,
        )

    def class_counts(self) -> dict[str, int]:
        counts = np.bincount(self.y, minlength=3)
        return {name: int(counts[k]) for k, name in enumerate(CLASSES)}

    def summary(self) -> dict[str, object]:
        """What the data is, for a bundle's provenance (JSON-ready)."""
        return {
            "samples": len(self),
            "runs": int(np.unique(self.run).size),
            "class_counts": self.class_counts(),
            "source": self.source,
        }


def concat(parts: Sequence[Dataset], source: str | None = None) -> Dataset:
    """The rows of ``parts`` in order; run numbers kept apart (each part's shifted past the
    last's)."""
    if not parts:
        raise InputError("dataset", [Problem("", "nothing to join")])
    features = parts[0].features
    if any(p.features != features for p in parts):
        raise InputError("dataset", [Problem("features", "the parts have different features")])
    runs, offset = [], 0
    for p in parts:
        runs.append(p.run + offset)
        offset += int(p.run.max()) + 1 if len(p) else 0
    return Dataset(
        features,
        np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]),
        np.concatenate([p.time_s for p in parts]),
        np.concatenate(runs),
        " + ".join(p.source for p in parts) if source is None else source,
    )


def from_run(
    observations: Sequence[Observation],
    timeline: Timeline,
    features: Sequence[str],
    run: int = 0,
    source: str = "",
    transient_s: float = TRANSIENT_S,
    warmup_s: float = 0.0,
    window_intervals: int = 1,
) -> Dataset:
    """One instance's intervals of one run, labelled from its antagonist timeline (the first
    ``warmup_s`` as T: ``label_intervals``), each row a feature's median over
    ``window_intervals`` (``quell.detect.features.roll``)."""
    names = check_features(features)
    end = np.array([o.time_s for o in observations], dtype=float)
    width = np.array([o.interval_s for o in observations], dtype=float)
    return Dataset(
        names,
        feature_matrix(observations, names, window_intervals),
        label_intervals(end, width, timeline, transient_s, warmup_s),
        end,
        np.full(len(observations), run, dtype=np.int64),
        source,
    )


def half_and_half(a: Dataset, b: Dataset, seed: int) -> Dataset:
    """Half as many rows as the smaller of ``a`` and ``b`` holds from each (drawn without
    replacement, each part's order kept): the paper's "50 % data from phase I and 50 % data
    from phase II", a training set the size of one phase's with equal shares of both."""
    rng = np.random.default_rng(seed)
    n = max(1, min(len(a), len(b)) // 2)
    pick_a = np.sort(rng.choice(len(a), n, replace=False))
    pick_b = np.sort(rng.choice(len(b), n, replace=False))
    return concat([a.take(pick_a), b.take(pick_b)], f"half of ({a.source}) + half of ({b.source})")


Runner = Callable[[Phase, CostSensitiveTree | None], Dataset]
"""Runs the service for one phase, with IC2 detecting with the tree given (``None``: IC2 off),
and returns the labelled intervals."""


@dataclass
class PhaseResult:
    phase: Phase
    collected: Dataset
    """What the phase's runs collected."""
    trained_on: Dataset
    detector: CostSensitiveTree


@dataclass
class Bootstrap:
    phases: list[PhaseResult] = field(default_factory=list)

    @property
    def detector(self) -> CostSensitiveTree:
        """The final (phase III) tree."""
        return self.phases[-1].detector

    def provenance(self) -> list[dict[str, object]]:
        """Per phase, what was collected and what its tree was trained on (JSON-ready)."""
        return [
            {
                "phase": p.phase,
                "collected": p.collected.summary(),
                "trained_on": p.trained_on.summary(),
            }
            for p in self.phases
        ]


FinalTraining = Literal["phase_iii", "all_phases"]
"""What the final tree is trained on: phase III's runs (the paper's) or every phase's."""


def bootstrap(
    runner: Runner,
    make_tree: Callable[[], CostSensitiveTree],
    seed: int = 0,
    final_training: FinalTraining = "phase_iii",
) -> Bootstrap:
    """The three phases: each runs with the last phase's tree and trains a new one
    (``make_tree`` gives it unfitted, with the features the runner's datasets have). The
    final tree learns from phase III's runs, or with ``all_phases`` from every phase's: three
    times the intervals, with IC2 off (I) and on (II, III)."""
    out = Bootstrap()

    def train(phase: Phase, collected: Dataset, on: Dataset) -> CostSensitiveTree:
        tree = make_tree()
        if tree.features != on.features:
            raise InputError(
                f"bootstrap phase {phase}",
                [Problem("features", f"tree has {tree.features}, data {on.features}")],
            )
        tree.fit(on.x, on.y)
        out.phases.append(PhaseResult(phase, collected, on, tree))
        return tree

    d1 = runner("I", None)
    t1 = train("I", d1, d1)
    d2 = runner("II", t1)
    t2 = train("II", d2, half_and_half(d1, d2, seed))
    d3 = runner("III", t2)
    train("III", d3, d3 if final_training == "phase_iii" else concat([d1, d2, d3]))
    return out


__all__ = [
    "Bootstrap",
    "Dataset",
    "FinalTraining",
    "Phase",
    "PhaseResult",
    "Runner",
    "bootstrap",
    "concat",
    "from_run",
    "half_and_half",
]

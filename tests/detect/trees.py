"""Hand-built detectors for tests: a tree over response time alone, whose verdicts are known
for every value."""

from __future__ import annotations

from pathlib import Path

from quell.detect.bundle import DetectorBundle, DetectorMeta, build_detector_bundle
from quell.detect.features import DEFAULT_FEATURES, RT
from quell.detect.tree import LEAF, CostMatrix, CostSensitiveTree, TreeArrays

NI_BELOW_S = 0.15
"""Response time at or below this: NI."""
I_ABOVE_S = 0.2
"""Above this: I; between the two: T."""


def rt_tree(cost: CostMatrix | None = None, cost_method: str = "weights") -> TreeArrays:
    """rt ≤ 0.15 → NI; 0.15 < rt ≤ 0.2 → T; rt > 0.2 → I (pure leaves)."""
    rt = DEFAULT_FEATURES.index(RT)
    return TreeArrays(
        children_left=(1, LEAF, 3, LEAF, LEAF),
        children_right=(2, LEAF, 4, LEAF, LEAF),
        feature=(rt, -1, rt, -1, -1),
        threshold=(NI_BELOW_S, 0.0, I_ABOVE_S, 0.0, 0.0),
        missing_left=(True, False, True, False, False),
        value=(
            (0.4, 0.2, 0.4),
            (1.0, 0.0, 0.0),
            (0.0, 0.33, 0.67),
            (0.0, 1.0, 0.0),
            (0.0, 0.0, 1.0),
        ),
        samples=(100, 40, 60, 20, 40),
    )


def rt_detector(window_intervals: int = 1) -> CostSensitiveTree:
    """``rt_tree``; ``window_intervals``: reading each feature's median over that many."""
    tree = CostSensitiveTree(DEFAULT_FEATURES, window_intervals=window_intervals)
    return tree.set_tree(rt_tree())


def rt_bundle(workload: str = "php-page") -> DetectorBundle:
    meta = DetectorMeta(
        workload=workload, environment="synthetic", created="2024-01-01T00:00:00Z", source="hand"
    )
    return build_detector_bundle(rt_detector(), meta)


def write_detector(path: Path, workload: str = "php-page") -> Path:
    rt_bundle(workload).save(path)
    return path

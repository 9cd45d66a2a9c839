"""How well a detector did on labelled intervals: per-interval recall, precision and miss rate
for class I, and the detection and clearing latencies of the state machine it feeds.

The latencies are the state machine's, not the raw verdicts': IC2 reconfigures when the chain
enters I2 (or NI2), so that is when interference counts as detected (or cleared).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

import numpy as np

from quell.detect.dataset import Dataset
from quell.detect.evaluate import Switch, interval_metrics, latencies
from quell.detect.labels import CLASSES, Timeline
from quell.detect.tree import CostSensitiveTree
from quell.policy.hysteresis import ContextChain, TwoStateChain


def chain_switches(
    time_s: Sequence[float], y_pred: Sequence[int], states: Literal[2, 5] = 5
) -> list[Switch]:
    """Where the state machine (five states, or the paper's testbed's two), fed the verdicts,
    would have reconfigured: (time, True on entering I2 / I, False on entering NI2 / NI).
    Intervals without a verdict (< 0) are skipped."""
    chain: ContextChain | TwoStateChain = ContextChain() if states == 5 else TwoStateChain()
    out: list[Switch] = []
    for t, v in zip(time_s, y_pred, strict=True):
        if v < 0:
            continue
        fired = chain.step(CLASSES[v])
        if fired is not None:
            out.append((float(t), fired in ("I2", "I")))
    return out


def median_s(xs: list[float]) -> float | None:
    """The median of latencies, to 0.1 s; ``None`` for none."""
    return round(statistics.median(xs), 1) if xs else None


def _round(v: object) -> float | None:
    return None if v is None else round(float(v), 3)  # type: ignore[arg-type]


def score(
    y_true: Sequence[int] | np.ndarray,
    y_pred: Sequence[int] | np.ndarray,
    runs: Sequence[tuple[Sequence[float], Sequence[int], Timeline]],
    states: Literal[2, 5] = 5,
) -> dict[str, object]:
    """Interval metrics over ``y_true`` / ``y_pred`` (every run's intervals together) and the
    median latencies over every run's onsets and ends: ``runs`` gives each run's interval
    ends, verdicts and antagonist timeline (each on its own clock)."""
    m = interval_metrics(np.asarray(y_true), np.asarray(y_pred))
    detect: list[float] = []
    clear: list[float] = []
    detect_missed = clear_missed = 0
    for time_s, pred, timeline in runs:
        d, dm, c, cm = latencies(timeline, chain_switches(time_s, pred, states))
        detect += d
        clear += c
        detect_missed += dm
        clear_missed += cm
    pred_all = np.asarray(y_pred)
    return {
        "recall": _round(m["recall"]),
        "precision": _round(m["precision"]),
        "miss_rate": _round(m["miss_rate"]),
        "detect_latency_s": median_s(detect),
        "clear_latency_s": median_s(clear),
        "samples": m["samples"],
        "i_as_ni": m["i_as_ni"],
        "ni_as_i": m["ni_as_i"],
        "predicted_t_share": _round(float(np.mean(pred_all == 1))) if pred_all.size else None,
        "detect_events": len(detect) + detect_missed,
        "detect_missed": detect_missed,
        "clear_events": len(clear) + clear_missed,
        "clear_missed": clear_missed,
    }


def score_tree(
    tree: CostSensitiveTree, test: Dataset, timeline: Timeline, states: Literal[2, 5] = 5
) -> dict[str, object]:
    """``score`` of ``tree`` on ``test``, one run on one clock."""
    pred = tree.predict(test.x)
    return score(test.y, pred, [(test.time_s.tolist(), pred.tolist(), timeline)], states)


__all__ = ["chain_switches", "median_s", "score", "score_tree"]

"""How well the detector does (Section 5.1.2, 5.1.3), as JSON-ready numbers.

Per interval, against the labels (``quell.detect.labels``):

* ``recall``: of the intervals labelled I, the share predicted I;
* ``precision``: of the intervals labelled NI or I that were predicted I, the share labelled I.
  Intervals labelled T are left out of both, as the paper does ("we ignore the results for
  Transient"): the context is changing then, and no verdict is wrong for long;
* ``miss_rate``: the paper's definition, (I predicted NI + NI predicted I) / all intervals
  (T-labelled ones included in the count).

Against the antagonist timeline, from the moments IC2 switched configuration (``switches``:
time and whether to the interference configuration):

* ``detect_latency_s``: median, over the onsets of interference (the union of the antagonists
  going from none to some), of the time to the first switch to the interference configuration
  before the interference ends;
* ``clear_latency_s``: median, over the ends, of the time to the first switch back before the
  next onset.

An onset or end with no such switch is counted as missed (``detect_missed`` /
``clear_missed``), not given a latency; a median of none is ``None``. Without ``switches`` they
are read off the verdicts themselves: a switch on every change between NI and I verdicts (T
keeps the last), a two-state machine.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from quell.detect.labels import NI, T, Timeline
from quell.detect.labels import I as INTF
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Switch = tuple[float, bool]
"""(time s, True: to the interference configuration / False: back)."""


def _share(num: int, den: int) -> float | None:
    return num / den if den else None


def confusion(y_true: IntArray, y_pred: IntArray) -> IntArray:
    """counts[true, predicted] over NI, T, I; rows with no verdict (``-1``) are not counted."""
    t = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(y_pred, dtype=np.int64)
    if t.shape != p.shape:
        raise InputError(
            "evaluation", [Problem("y_pred", f"{p.size} verdicts for {t.size} labels")]
        )
    ok = p >= 0
    out: IntArray = np.bincount(t[ok] * 3 + p[ok], minlength=9).reshape(3, 3).astype(np.int64)
    return out


def interval_metrics(y_true: IntArray, y_pred: IntArray) -> dict[str, float | int | None]:
    """``recall``, ``precision`` and ``miss_rate`` (module docstring), with the counts behind
    them."""
    m = confusion(y_true, y_pred)
    total = int(np.asarray(y_true).size)
    predicted_i = int(m[NI, INTF] + m[INTF, INTF])
    return {
        "recall": _share(int(m[INTF, INTF]), int(m[INTF].sum())),
        "precision": _share(int(m[INTF, INTF]), predicted_i),
        "miss_rate": _share(int(m[INTF, NI] + m[NI, INTF]), total),
        "samples": total,
        "transient_samples": int(np.sum(np.asarray(y_true) == T)),
        "no_verdict": int(np.sum(np.asarray(y_pred) < 0)),
        "i_as_ni": int(m[INTF, NI]),
        "ni_as_i": int(m[NI, INTF]),
    }


def switches_from_verdicts(time_s: FloatArray, y_pred: IntArray) -> list[Switch]:
    """A two-state reading of verdicts: a switch wherever an I verdict follows an NI one (or
    none) and back; T and no verdict keep the state. Starts without interference."""
    out: list[Switch] = []
    on = False
    for t, v in zip(
        np.asarray(time_s, dtype=float).tolist(), np.asarray(y_pred).tolist(), strict=True
    ):
        if v == INTF and not on:
            on = True
            out.append((t, True))
        elif v == NI and on:
            on = False
            out.append((t, False))
    return out


def _latencies(
    events: Sequence[tuple[float, float]], switches: Sequence[Switch], to_interference: bool
) -> tuple[list[float], int]:
    """For each (event, next event) window, the time from the event to the first switch of the
    kind within it; and how many windows had none."""
    found, missed = [], 0
    for start, end in events:
        hit = next(
            (t for t, on in switches if on == to_interference and start <= t < end),
            None,
        )
        if hit is None:
            missed += 1
        else:
            found.append(hit - start)
    return found, missed


def latencies(
    timeline: Timeline, switches: Sequence[Switch]
) -> tuple[list[float], int, list[float], int]:
    """Every detection latency and how many onsets had none; every clearing latency and how
    many ends had none (module docstring)."""
    spans = timeline.union()
    nexts = [a for a, _ in spans[1:]] + [math.inf]
    ends = [(b, n) for (_, b), n in zip(spans, nexts, strict=True) if math.isfinite(b)]
    detect, detect_missed = _latencies(spans, switches, True)
    clear, clear_missed = _latencies(ends, switches, False)
    return detect, detect_missed, clear, clear_missed


def latency_metrics(
    timeline: Timeline, switches: Sequence[Switch]
) -> dict[str, float | int | None]:
    """``detect_latency_s`` and ``clear_latency_s`` (module docstring), with their counts."""
    detect, detect_missed, clear, clear_missed = latencies(timeline, switches)
    return {
        "detect_latency_s": statistics.median(detect) if detect else None,
        "clear_latency_s": statistics.median(clear) if clear else None,
        "detect_events": len(detect) + detect_missed,
        "detect_missed": detect_missed,
        "clear_events": len(clear) + clear_missed,
        "clear_missed": clear_missed,
        "switches": len(switches),
    }


def evaluate(
    y_true: IntArray,
    y_pred: IntArray,
    time_s: FloatArray,
    timeline: Timeline,
    switches: Sequence[Switch] | None = None,
) -> dict[str, float | int | None]:
    """Every metric of the module for one run (``time_s``: each interval's end)."""
    sw = switches_from_verdicts(time_s, y_pred) if switches is None else switches
    return {**interval_metrics(y_true, y_pred), **latency_metrics(timeline, sw)}


__all__ = [
    "Switch",
    "confusion",
    "evaluate",
    "interval_metrics",
    "latencies",
    "latency_metrics",
    "switches_from_verdicts",
]

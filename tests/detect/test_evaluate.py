"""The metrics on a constructed sequence of verdicts, every number by hand."""

from __future__ import annotations

import json

import numpy as np

from quell.detect.evaluate import (
    evaluate,
    interval_metrics,
    latency_metrics,
    switches_from_verdicts,
)
from quell.detect.labels import NI, I, T, Timeline

Y_TRUE = np.array([NI, NI, T, I, I, I, I, T, NI, NI])
Y_PRED = np.array([NI, I, T, I, NI, I, T, I, NI, -1])
TIMES = np.array([5.0 * k + 5 for k in range(10)])


def test_recall_precision_and_miss_rate() -> None:
    m = interval_metrics(Y_TRUE, Y_PRED)
    assert m["recall"] == 2 / 4  # of the 4 I intervals, 2 predicted I
    assert m["precision"] == 2 / 3  # predicted I: one NI, two I (the T one is left out)
    assert m["miss_rate"] == (1 + 1) / 10  # one I as NI, one NI as I, over every interval
    assert (m["i_as_ni"], m["ni_as_i"], m["no_verdict"], m["transient_samples"]) == (1, 1, 1, 2)


def test_nothing_to_count_is_none_not_zero() -> None:
    m = interval_metrics(np.array([NI, NI]), np.array([NI, NI]))
    assert m["recall"] is None and m["precision"] is None and m["miss_rate"] == 0.0


def test_latencies_from_switches() -> None:
    tl = Timeline.of((30.0, 70.0), (110.0, 150.0))
    switches = [(45.0, True), (80.0, False), (135.0, True)]
    m = latency_metrics(tl, switches)
    assert m["detect_latency_s"] == 20.0  # median of 15 and 25
    assert m["clear_latency_s"] == 10.0  # 80 - 70; the end at 150 was never cleared
    assert (m["detect_events"], m["detect_missed"]) == (2, 0)
    assert (m["clear_events"], m["clear_missed"]) == (2, 1)


def test_a_switch_after_the_interference_ended_does_not_count_as_detecting_it() -> None:
    tl = Timeline.of((30.0, 70.0))
    m = latency_metrics(tl, [(75.0, True), (90.0, False)])
    assert m["detect_latency_s"] is None and m["detect_missed"] == 1
    assert m["clear_latency_s"] == 20.0


def test_switches_read_off_verdicts_as_two_states() -> None:
    assert switches_from_verdicts(TIMES, Y_PRED) == [
        (10.0, True),
        (25.0, False),
        (30.0, True),
        (45.0, False),
    ]


def test_evaluate_is_json_ready() -> None:
    out = evaluate(Y_TRUE, Y_PRED, TIMES, Timeline.of((15.0, 40.0)))
    for key in ("recall", "precision", "miss_rate", "detect_latency_s", "clear_latency_s"):
        assert key in out
    # switches at 10 (on: before the onset at 15), 25 (off), 30 (on), 45 (off)
    assert out["detect_latency_s"] == 30.0 - 15.0
    assert out["clear_latency_s"] == 45.0 - 40.0
    json.dumps(out, allow_nan=False)

"""Labels from an antagonist timeline, interval by interval, computed by hand."""

from __future__ import annotations

import math

import pytest

from quell.detect.labels import CLASSES, Period, Timeline, label_intervals
from quell.errors import InputError


def _names(codes: object) -> str:
    return " ".join(CLASSES[c] for c in codes)  # type: ignore[attr-defined]


def test_thirty_seconds_after_each_start_and_stop_are_transient() -> None:
    # 10 s intervals ending at 10..200; interference from 50 s to 120 s
    ends = [10.0 * k for k in range(1, 21)]
    got = label_intervals(ends, 10.0, Timeline.of((50.0, 120.0)))
    # [40,50) NI; [50,60) [60,70) [70,80) T (start + 30 s); [80,90)..[110,120) I;
    # [120,130) .. [140,150) T (stop + 30 s); from [150,160) NI
    assert _names(got) == " ".join(["NI"] * 5 + ["T"] * 3 + ["I"] * 4 + ["T"] * 3 + ["NI"] * 5)


def test_an_interval_that_touches_a_transient_window_at_all_is_transient() -> None:
    # 5 s intervals; a start at 52 s: [50,55) holds it, [80,85) ends 2 s into... 52 + 30 = 82
    got = label_intervals([50.0, 55.0, 80.0, 85.0, 90.0], 5.0, Timeline.of((52.0, 500.0)))
    assert _names(got) == "NI T T T I"


def test_an_antagonist_starting_while_another_runs_is_a_change_too() -> None:
    tl = Timeline((Period(0.0, 300.0), Period(100.0, 200.0, "cpu")))
    got = label_intervals([50.0, 110.0, 140.0, 210.0, 240.0, 320.0, 340.0], 10.0, tl)
    assert _names(got) == "I T I T I T NI"


def test_timelines_from_events_and_their_refusals() -> None:
    tl = Timeline.from_events(
        [(200.0, "hog", "stop"), (90.0, "hog", "start"), (300.0, "llc", "start")]
    )
    assert [(p.start_s, p.stop_s) for p in tl.periods] == [(90.0, 200.0), (300.0, math.inf)]
    assert tl.changes_s().tolist() == [90.0, 200.0, 300.0]
    with pytest.raises(InputError, match="stopped without having started"):
        Timeline.from_events([(5.0, "x", "stop")])
    with pytest.raises(InputError, match="before stop"):
        Timeline.of((10.0, 10.0))


def test_the_union_merges_overlaps() -> None:
    tl = Timeline.of((0.0, 10.0), (5.0, 20.0), (30.0, 40.0))
    assert tl.union() == [(0.0, 20.0), (30.0, 40.0)]

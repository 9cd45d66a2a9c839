"""The do-no-harm guard on built snapshots: what users waited per interval, the one-sided Welch
comparison by hand, the after window's length, and bad input refused by name."""

from __future__ import annotations

import math

import pytest

from quell.core.observation import Observation
from quell.errors import InputError
from quell.policy.guard import Guard, judge, waited_per_request_s


def _obs(requests: int, rt: float | None, errors: int = 0) -> Observation:
    return Observation(
        time_s=0.0,
        instance_id="i1",
        interval_s=5.0,
        requests=requests,
        mean_rt_seconds=rt,
        errors=errors,
    )


def test_an_unanswered_request_counts_at_the_timeout() -> None:
    # (90 × 0.2 + 10 × 10) / 100 = 1.18
    assert waited_per_request_s(_obs(90, 0.2, 10), 10.0) == pytest.approx(1.18)
    assert waited_per_request_s(_obs(0, None, 5), 10.0) == 10.0
    assert waited_per_request_s(_obs(100, 0.25), 10.0) == 0.25
    assert waited_per_request_s(_obs(0, None), 10.0) is None  # nothing sent: no figure
    assert waited_per_request_s(_obs(10, None), 10.0) is None  # answered, not measured


def test_judge_by_hand() -> None:
    before = [1.0, 1.2, 1.1]  # mean 1.1, sd 0.1, se 0.1 / √3
    worse = [2.0, 2.2, 2.1, 2.3]  # mean 2.15, sd √(0.05 / 3), se that / 2
    j = judge(before, worse)
    assert j.outcome == "revert"
    assert j.before_s == pytest.approx(1.1) and j.after_s == pytest.approx(2.15)
    assert j.before_se_s == pytest.approx(0.1 / math.sqrt(3))
    assert j.after_se_s == pytest.approx(math.sqrt(0.05 / 3) / 2)
    # 1.1 + 2 × √(0.01 / 3 + 0.05 / 12) = 1.1 + 2 × √0.0075
    assert j.threshold_s == pytest.approx(1.1 + 2 * math.sqrt(0.0075))
    assert j.as_dict()["outcome"] == "revert" and j.as_dict()["z"] == 2.0
    assert "users waited 2.15 ± 0.065 s over 4 intervals after against 1.1" in j.words()
    # a little slower, within the scatter: 1.2 against 1.1 + 2 × √(0.01 / 3 + 0.02 / 12)
    same = judge(before, [1.2, 1.3, 1.1, 1.2])
    assert same.outcome == "keep"
    assert same.threshold_s == pytest.approx(1.1 + 2 * math.sqrt(0.005))
    # the same slower after, scattered less: 1.25 ± 0.029 against a threshold of 1.1 + 2 ×
    # √(0.01 / 3 + 0.01 / 12) = 1.229: beyond the scatter
    assert judge(before, [1.2, 1.3, 1.2, 1.3]).outcome == "revert"
    assert judge(before, [0.5, 0.6]).outcome == "keep"  # faster


def test_an_after_that_answers_nothing_reverts() -> None:
    j = judge([0.3, 0.4], [0.2])
    assert (j.outcome, j.after_s, j.threshold_s) == ("revert", None, None)
    assert "1 interval(s) answered or refused anything" in j.words()


def test_bad_input_is_refused_by_name() -> None:
    with pytest.raises(InputError, match="at least 2 are needed"):
        judge([1.0], [1.0, 2.0])
    with pytest.raises(InputError, match="not a time"):
        judge([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(InputError) as info:
        Guard(0.0, -1.0)
    assert [p.location for p in info.value.problems] == ["timeout_s", "interval_s"]


def test_the_after_window_outlasts_the_timeout() -> None:
    # ⌈10 / 5⌉ + 1 = 3 < 4, the least; ⌈10 / 1⌉ + 1 = 11
    assert Guard(10.0, 5.0).after_intervals == 4
    assert Guard(10.0, 5.0).within_s == 20.0
    assert Guard(10.0, 1.0).after_intervals == 11


def test_the_guard_watches_after_a_change_and_judges_once() -> None:
    g = Guard(10.0, 5.0)
    assert g.push("i1", _obs(100, 0.3)) is None
    assert g.start("i1") is None  # one interval: no scatter, not watched
    assert not g.watching("i1")
    g.push("i1", _obs(100, 0.5))
    g.push("i1", _obs(100, 0.4))
    assert g.start("i1") == (0.3, 0.5, 0.4)
    # after: 0.4 × 90 + 10 × 10 over 100 = 1.36, three times, and one empty interval
    outs = [g.push("i1", _obs(90, 0.4, 10)) for _ in range(3)] + [g.push("i1", _obs(0, None))]
    assert outs[:3] == [None, None, None]
    j = outs[3]
    assert j is not None and j.outcome == "revert"
    assert (j.before_intervals, j.after_intervals) == (3, 3)
    assert j.before_s == pytest.approx(0.4) and j.after_s == pytest.approx(1.36)
    assert not g.watching("i1")
    assert g.push("i1", _obs(100, 0.3)) is None  # judged once


def test_restarting_the_before_forgets_what_came_first() -> None:
    g = Guard(10.0, 5.0)
    for rt in (0.1, 0.1, 0.1):
        g.push("i1", _obs(100, rt))
    g.restart_before("i1")
    g.push("i1", _obs(100, 0.6))
    g.push("i1", _obs(100, 0.8))
    assert g.start("i1") == (0.6, 0.8)
    g.cancel("i1")
    assert not g.watching("i1")
    g.forget("i1")
    assert g.start("i1") is None

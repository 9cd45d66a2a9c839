"""What users felt, per request: exact figures from requests with known times, unanswered ones
at the timeout; the run summary's per phase on the hand-built run; bad input refused."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from quell.errors import InputError
from quell.report.felt import Felt, felt, felt_table, phase_felt
from quell.report.html import render_html
from quell.report.summary import summarize
from quell.report.table import print_summary
from quell.store.run import RunStore

NAN = math.nan


def test_ten_requests_two_unanswered() -> None:
    # felt: 10, 20, 30, 40, 50, 60, 70, 120 ms and two at the 10 s timeout. Above 50 ms
    # (strictly): 60, 70, 120 and the two = 5 of 10; above 100 ms: 120 and the two = 3; p99 by
    # nearest rank: the ceil(0.99 x 10) = 10th of the sorted ten, a timeout.
    rt = [0.010, 0.020, 0.030, 0.040, 0.050, 0.060, 0.070, 0.120, NAN, 0.001]
    answered = np.array([True] * 8 + [False, False])  # a timeout, an error answered in 1 ms
    assert felt(rt, answered, 10.0, 0.050) == Felt(10, 2, 0.5, 0.3, 10.0)


def test_two_hundred_requests_p99_is_the_198th() -> None:
    # 1..199 ms answered, one unanswered: sorted, the 198th (ceil(0.99 x 200)) is 198 ms.
    # Above 100 ms: 101..199 (99) and the unanswered = 100 of 200; above 200 ms: only it.
    rt = np.append(np.arange(1, 200) / 1e3, NAN)
    answered = np.append(np.ones(199, dtype=bool), False)
    f = felt(rt, answered, 5.0, 0.100)
    assert (f.requests, f.unanswered) == (200, 1)
    assert f.share_above_rth == 0.5
    assert f.share_above_2rth == 0.005
    assert f.p99_rt_seconds == pytest.approx(0.198)


def test_an_answer_after_the_timeout_counts_at_the_timeout() -> None:
    # 99 answers in 1 ms and one in 30 s: its user had given up at 2 s
    rt = np.append(np.full(99, 0.001), 30.0)
    f = felt(rt, np.ones(100, dtype=bool), 2.0, 0.5)
    assert f.p99_rt_seconds == 0.001  # the 99th of 100
    assert (f.share_above_rth, f.share_above_2rth) == (0.01, 0.01)
    assert felt(rt[-2:], np.ones(2, dtype=bool), 2.0, 0.5).p99_rt_seconds == 2.0


def test_without_a_target_only_the_p99_and_without_requests_nothing() -> None:
    f = felt([0.2, 0.1], np.array([True, True]), 10.0, None)
    assert f == Felt(2, 0, None, None, 0.2)
    assert felt([], np.array([], dtype=bool), 10.0, 0.05) == Felt(0, 0, None, None, None)


@pytest.mark.parametrize(
    ("rt", "answered", "timeout_s", "target_rt_s", "where"),
    [
        ([0.1, 0.2], [True], 10.0, 0.05, "rt_s"),
        ([0.1, NAN], [True, True], 10.0, 0.05, "rt_s[1]"),
        ([0.1, -0.2], [True, True], 10.0, 0.05, "rt_s[1]"),
        ([0.1], [1], 10.0, 0.05, "answered"),
        ([0.1], [True], 0.0, 0.05, "timeout_s"),
        ([0.1], [True], NAN, 0.05, "timeout_s"),
        ([0.1], [True], 10.0, 5.0, "target_rt_s"),
        ([0.1], [True], 10.0, -1.0, "target_rt_s"),
    ],
)
def test_bad_input_is_an_input_error_naming_it(
    rt: list[float], answered: list[object], timeout_s: float, target_rt_s: float, where: str
) -> None:
    with pytest.raises(InputError) as err:
        felt(rt, np.asarray(answered), timeout_s, target_rt_s)
    assert [p.location for p in err.value.problems] == [where]


SCENARIO_META = {"target": {"mean_rt_s": 0.05}, "workload": {"timeout_s": 10.0}}


def _summary(run_dir: Path) -> dict:
    with RunStore.create(run_dir) as store:
        store.set_meta(scenario_json=SCENARIO_META)
        store.commit()
        return summarize(store)


def test_the_run_summary_has_each_phase_as_its_users_felt_it(run_dir: Path) -> None:
    # report_run.py: the baseline's ten requests are web1's 10, 20, 30, 40, 100 ms, web2's 5,
    # 15, 25 ms, a 503 answered in 1 ms and one nobody answered: two unanswered, at 10 s.
    # Above 50 ms: 100 ms and the two; above 100 ms: the two. The noisy phase: web1's 50,
    # 70, 90, 110 ms and web2's 200, 300 ms: 5 of 6 above 50 ms, 3 above 100 ms, p99 the max.
    s = _summary(run_dir)
    assert (s["target_rt_s"], s["timeout_s"]) == (0.05, 10.0)
    base, noisy = (p["users"] for p in s["phases"])
    assert base == {
        "requests": 10,
        "unanswered": 2,
        "share_above_rth": 0.3,
        "share_above_2rth": 0.2,
        "p99_rt_seconds": 10.0,
    }
    assert noisy == {
        "requests": 6,
        "unanswered": 0,
        "share_above_rth": 5 / 6,
        "share_above_2rth": 0.5,
        "p99_rt_seconds": 0.3,
    }
    with RunStore.open(run_dir) as store:
        req = store.request_arrays()
    assert phase_felt(req, 0.0, 10.0, 10.0, 0.05).to_dict() == base


def test_a_run_without_its_scenario_or_requests_has_no_users_figures(
    run_dir: Path, make_run: object
) -> None:
    with RunStore.open(run_dir) as store:
        s = summarize(store)
    assert [p["users"] for p in s["phases"]] == [None, None]  # no scenario: no timeout
    bare = make_run("bare", requests=False)  # type: ignore[operator]
    s = _summary(bare)
    assert [p["users"] for p in s["phases"]] == [None, None]


def test_the_terminal_and_html_reports_show_them_whole_at_80_columns(run_dir: Path) -> None:
    s = _summary(run_dir)
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=80, force_terminal=False))
    text = buf.getvalue()
    assert "what users felt, per request sent (R_th = 50 ms" in text
    (row,) = [ln for ln in text.splitlines() if ln.startswith("│ baseline")]
    assert [c.strip() for c in row.split("│")[2:-1]] == ["10", "2", "30.00", "20.00", "10000.0"]
    assert max(len(ln) for ln in text.splitlines()) <= 80
    page = render_html(s, [], [], [], run_dir)
    assert "<td>noisy</td>" in page and '<td class="num">83.33</td>' in page


def test_the_table_stacks_rather_than_cut_a_number() -> None:
    rows = [(["a very long policy name", "neighbours"], Felt(123456, 7, 0.5, 0.25, 9.5).to_dict())]
    buf = io.StringIO()
    Console(file=buf, width=40, force_terminal=False).print(
        felt_table(rows, ("policy", "phase"), 0.01, 10.0)
    )
    text = buf.getvalue()
    for cell in ("123456", "50.00", "25.00", "9500.0"):
        assert cell in text
    assert max(len(ln) for ln in text.splitlines()) <= 40

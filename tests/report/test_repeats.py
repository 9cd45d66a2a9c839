"""A lab comparison over repeats: each policy's spread per phase and its paired difference from
the first policy, checked against hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from quell.report.repeats import repeat_summary
from quell.studies.prima.results import lab_section


def _doc(rt_ms: dict[str, tuple[float, float | None]], target_s: float = 0.013) -> dict[str, Any]:
    """One repeat: policy → (worst instance's mean, every request's mean or None) in ms, one
    phase; a file from before every request's mean was recorded has None."""
    policies = {}
    for name, (worst, every) in rt_ms.items():
        phase: dict[str, Any] = {
            "phase": "noisy",
            "worst_mean_rt_s": worst / 1e3,
            "meets_target": worst / 1e3 <= target_s,
        }
        if every is not None:
            phase |= {"all_mean_rt_s": every / 1e3, "all_p95_rt_s": 2 * every / 1e3}
            phase["scaling_actions"] = int(worst > 20.0)
        policies[name] = {"phases": [phase]}
    return {"policies": policies}


def test_paired_differences_and_targets_met_over_three_repeats() -> None:
    docs = [
        _doc({"prima": (12.0, 12.0), "lc": (24.0, 15.0)}),
        _doc({"prima": (12.0, 12.0), "lc": (20.0, 15.0)}),
        _doc({"prima": (13.5, 13.5), "lc": (12.0, 12.0)}),
    ]
    prima, lc = repeat_summary(docs)
    assert prima["phases"][0]["met"] == 2 and lc["phases"][0]["met"] == 1
    worst = lc["phases"][0]["worst_mean_rt_s_vs_first"]
    # lc - prima: +12, +8, -1.5 ms; relative +100, +66.67, -11.11 %
    assert worst["s"]["mean"] == pytest.approx(18.5 / 3 / 1e3)
    d = [12.0, 8.0, -1.5]
    m = sum(d) / 3
    assert worst["s"]["se"] == pytest.approx(
        math.sqrt(sum((x - m) ** 2 for x in d) / 2) / math.sqrt(3) / 1e3
    )
    assert worst["pct"]["mean"] == pytest.approx((100 + 200 / 3 - 100 / 9) / 3)
    assert worst["lower_on"] == 1 and worst["of"] == 3
    assert prima["phases"][0]["worst_mean_rt_s_vs_first"] is None
    assert lc["phases"][0]["all_p95_rt_s"]["max"] == pytest.approx(0.030)
    assert lc["phases"][0]["scaling_actions"] == [1, 0, 0]  # each repeat's, in order
    assert prima["phases"][0]["scaling_actions"] == [0, 0, 0]


def test_repeats_from_before_every_request_was_counted_pair_only_what_they_have() -> None:
    docs = [
        _doc({"prima": (12.0, None), "lc": (24.0, None)}),
        _doc({"prima": (12.0, 12.0), "lc": (18.0, 15.0)}),
    ]
    _, lc = repeat_summary(docs)
    row = lc["phases"][0]
    assert row["worst_mean_rt_s"]["mean"] == pytest.approx(0.021)
    assert row["all_mean_rt_s"]["sd"] is None  # one repeat measured it
    assert row["all_mean_rt_s_vs_first"]["of"] == 1
    assert row["all_mean_rt_s_vs_first"]["s"]["se"] is None
    assert row["scaling_actions"] == [None, 0]  # not recorded then


def test_repeats_that_compare_other_policies_are_refused() -> None:
    docs = [_doc({"prima": (12.0, 12.0), "lc": (24.0, 15.0)}), _doc({"prima": (12.0, 12.0)})]
    with pytest.raises(ValueError, match="repeat 2 compares"):
        repeat_summary(docs)


def test_results_page_section_for_repeats() -> None:
    docs = [
        _doc({"prima": (12.0, 12.0), "lc": (24.0, 15.0)}),
        _doc({"prima": (12.0, 12.0), "lc": (20.0, 15.0)}),
    ]
    c = {
        "scenario": "prima-table3-vs-lc",
        "target_rt_s": 0.013,
        "repeats": 2,
        "policies": repeat_summary(docs),
    }
    text = "\n".join(lab_section(c, "data/x-lab-comparison.json"))
    assert "## Lab: prima-table3-vs-lc, 2 repeats" in text
    # lc's worst: 22.0 ± 2.8 ms; +100 and +66.7 % over PRIMA: +83.3 ± 16.7 %
    assert "| lc | noisy | 0/2 | 1 0 | 22.0 ± 2.8 | +83.3 ± 16.7 % (0/2 lower) |" in text
    assert "| prima | noisy | 2/2 | 0 0 | 12.0 ± 0.0 | - |" in text

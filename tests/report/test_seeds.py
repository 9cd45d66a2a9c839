"""The spread of a comparison over seeds, and the paired difference from the first policy:
exact values from hand-made comparison documents."""

from __future__ import annotations

import math
from typing import Any

import pytest

from quell.report.seeds import seed_summary


def doc(rows: dict[str, tuple[float | None, float]]) -> dict[str, Any]:
    return {
        "policies": [
            {
                "policy": name,
                "slo_pct": slo,
                "slo_all_pct": slo,
                "instance_seconds": inst,
                "oracle_instance_seconds": 100.0,
            }
            for name, (slo, inst) in rows.items()
        ]
    }


def test_spread_and_paired_difference_over_three_seeds() -> None:
    docs = [
        doc({"prima": (96.0, 300.0), "rr": (50.0, 100.0)}),
        doc({"prima": (98.0, 320.0), "rr": (60.0, 100.0)}),
        doc({"prima": (97.0, 310.0), "rr": (40.0, 100.0)}),
    ]
    prima, rr = seed_summary(docs)
    assert prima["policy"] == "prima" and prima["seeds"] == 3
    assert prima["slo_pct"] == {"mean": 97.0, "sd": 1.0, "min": 96.0, "max": 98.0}
    assert prima["instance_seconds"]["mean"] == 310.0
    assert prima["slo_pct_vs_first"] is None
    # rr − prima per seed: −46, −38, −57 → mean −47, sd √(91), se √(91/3)
    vs = rr["slo_pct_vs_first"]
    assert vs["mean"] == pytest.approx(-47.0)
    assert vs["se"] == pytest.approx(math.sqrt(91.0 / 3.0))
    assert (vs["higher_on"], vs["of"]) == (0, 3)
    assert rr["slo_pct"]["sd"] == pytest.approx(10.0)
    # the same pairing for the SLO over all instance-intervals and for instance-seconds:
    # rr − prima = −200, −220, −210 → mean −210, sd 10, se 10 / √3
    assert rr["slo_all_pct_vs_first"]["mean"] == pytest.approx(-47.0)
    inst = rr["instance_seconds_vs_first"]
    assert inst["mean"] == pytest.approx(-210.0)
    assert inst["se"] == pytest.approx(10.0 / math.sqrt(3.0))
    assert (inst["higher_on"], inst["of"]) == (0, 3)
    assert prima["instance_seconds_vs_first"] is None


def test_one_seed_has_no_spread_and_a_missing_slo_is_left_out() -> None:
    one = seed_summary([doc({"a": (90.0, 10.0), "b": (95.0, 12.0)})])
    assert one[0]["slo_pct"] == {"mean": 90.0, "sd": None, "min": 90.0, "max": 90.0}
    assert one[1]["slo_pct_vs_first"] == {"mean": 5.0, "se": None, "higher_on": 1, "of": 1}
    gap = seed_summary(
        [doc({"a": (90.0, 10.0), "b": (None, 12.0)}), doc({"a": (80.0, 10.0), "b": (70.0, 12.0)})]
    )
    assert gap[1]["slo_pct"]["mean"] == 70.0
    assert gap[1]["slo_pct_vs_first"] == {"mean": -10.0, "se": None, "higher_on": 0, "of": 1}
    assert seed_summary([]) == []

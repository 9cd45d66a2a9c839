"""IC2's results page: Table 4's rows, with the send-time columns when the runs had request
logs (quell.studies.ic2.table4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quell.studies.ic2.results import render


def row(first: float, sent: dict[str, Any] | None) -> dict[str, Any]:
    base = {
        "first_rt_s": first,
        "first_reduction_pct": 0.0,
        "after_rt_s": 0.2,
        "after_reduction_pct": 0.0,
        "clean_rt_s": 0.01,
        "detect_latency_s": None,
        "clear_latency_s": None,
        "reconfigurations": 0,
    }
    return base | (sent or {})


def page(tmp_path: Path, rows: dict[str, dict[str, Any]]) -> str:
    doc = {"scenario": "s", "baseline": "static", "first_s": 60.0, "rows": rows}
    (tmp_path / "table4-s.json").write_text(json.dumps(doc))
    return render(tmp_path)


def test_table4_rows_carry_the_send_time_columns_when_every_run_has_them(tmp_path: Path) -> None:
    sent = {"sent_rt_s": 2.25, "sent_reduction_pct": 47.3, "sent_over_first_s": 877}
    text = page(
        tmp_path, {"static": row(3.9, sent | {"sent_reduction_pct": 0.0}), "ic2": row(1.0, sent)}
    )
    assert "| by send: all ms | cut % | > 60 s |" in text
    assert "| ic2 | 1000.0 | 0.0 | 200.0 | 0.0 | 10.0 | — | — | 0 | 2250.0 | 47.3 | 877 |" in text


def test_table4_rows_without_request_logs_keep_the_interval_columns(tmp_path: Path) -> None:
    text = page(tmp_path, {"static": row(3.9, None), "ic2": row(1.0, None)})
    assert "by send" not in text
    assert "| ic2 | 1000.0 | 0.0 | 200.0 | 0.0 | 10.0 | — | — | 0 |" in text


def test_a_sweep_shows_its_row_for_ic2_when_it_has_one(tmp_path: Path) -> None:
    doc = json.loads(
        (
            Path(__file__).resolve().parents[3] / "docs/results/data/ic2/sweep-lab-table4-mrw.json"
        ).read_text()
    )
    (tmp_path / "sweep-t.json").write_text(json.dumps(doc))
    text = render(tmp_path)
    assert "| 64 | 56.0 * | 254.7 * |" in text
    assert (
        "Best value per condition: clean: 64, llc_same: 64. For IC2's row: `directions:"
        " +max_request_workers` (best: clean 64, llc_same 64; every interfered optimum lies above"
        " the baseline 32 (the optimum does not move from the clean 64); one repeat a value:"
        " the optima's scatter is not measured)." in text
    )
    doc.pop("row")
    (tmp_path / "sweep-t.json").write_text(json.dumps(doc))
    assert "For IC2's row" not in render(tmp_path)  # a sweep recorded before rows


def test_a_repeated_sweep_shows_each_values_range_and_whether_its_optimum_is_resolved(
    tmp_path: Path,
) -> None:
    doc = json.loads(
        (
            Path(__file__).resolve().parents[3]
            / "docs/results/data/ic2/sweep-lab-table4-mrw-rep.json"
        ).read_text()
    )
    (tmp_path / "sweep-t.json").write_text(json.dumps(doc))
    text = render(tmp_path)
    # two repeats a value: the mean, then the lower and the higher
    assert "| 128 | 23.1 (14.2–32.0) | 120.0 (53.8–186.3) |" in text
    assert "| 64 | 26.7 (23.6–29.9) | 67.3 (63.8–70.7) * |" in text
    assert "For IC2's row: no direction (best: clean 96, llc_same 64;" in text
    assert "at llc_same the repeats at 64 overlap those at 128)." in text

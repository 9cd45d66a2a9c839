"""The PRIMA results page: figures come from the measured files, formatted as given."""

from __future__ import annotations

from quell.report.prima_results import validation_section


def test_validation_section_reports_both_directions_of_the_im() -> None:
    v = {
        "points": 1,
        "rtm_mape_pct": 8.878,
        "im_sf_mape_pct": 33.16,
        "im_total_mape_pct": 4.93,
        "im_sf_points": 1,
        "clamped_points": 0,
        "rows": [
            {
                "util_pct": 18.74,
                "sf": 0.147,
                "rt_s": 0.01402,
                "rt_pred_s": 0.01291,
                "rt_error_pct": 7.9,
                "total_util_pct": 40.02,
                "sf_pred": 0.191,
                "total_pred_pct": 38.61,
            }
        ],
    }
    text = "\n".join(validation_section(v, "v.json"))
    assert "RTM mean absolute error **8.9 %**" in text
    assert "**33.2 %** over the 1 points" in text and "**4.9 %** read the other way" in text
    assert "| 18.7 | 0.15 | 14.02 | 12.91 | 7.9 | 40.0 | 0.19 | 38.6 |" in text

"""The consolidation study's point and measurement: validated up front, and a measurement
read back from its JSON is the one written."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from quell.studies.consolidation.point import (
    ConsolidationMeasurement,
    ConsolidationPoint,
    SystemLoad,
    SystemMeasurement,
)


def _point() -> ConsolidationPoint:
    return ConsolidationPoint(
        const=SystemLoad(users=40, cap_pct=50.0),
        inc=SystemLoad(users=120, cap_pct=50.0),
        dispersion_index=400.0,
        ctp=True,
    )


def test_measurement_round_trips_through_json() -> None:
    sysm = SystemMeasurement(
        requests_total=1200,
        throughput_per_second=20.0,
        mean_rt_seconds=0.012,
        p95_rt_seconds=0.040,
        light_mean_rt_seconds=0.008,
        heavy_mean_rt_seconds=0.050,
        db_cpu_pct=31.5,
        throttled_periods_total=7,
        cpu_pct_100ms=[10.0, 50.0, 0.0],
    )
    m = ConsolidationMeasurement(
        env="sim", point=_point(), systems={"const": sysm, "inc": sysm}, notes=["x"]
    )
    back = ConsolidationMeasurement.from_json(json.loads(json.dumps(m.to_json())))
    assert back == m


@pytest.mark.parametrize(
    "bad",
    [
        {"const": {"users": 1, "cap_pct": 0.0}, "inc": {"users": 1}},
        {"const": {"users": -1}, "inc": {"users": 1}},
        {"const": {"users": 1}, "inc": {"users": 1}, "dispersion_index": 0.5},
        {"const": {"users": 1}, "inc": {"users": 1}, "resources": "lavish"},
        {"const": {"users": 1}, "inc": {"users": 1}, "surprise": 1},
    ],
)
def test_bad_points_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ConsolidationPoint.model_validate(bad)

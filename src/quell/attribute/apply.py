"""A fitted model applied to records: each request's predicted excess with its interval, and
its latency split into the provider's part (the excess held within [0, wall], and none where
it is not above the model's provider floor) and the service's own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from quell.attribute.bundle import AttributionModel
from quell.attribute.features import PsiSeries, build_features
from quell.attribute.models import LEVEL, provider_seconds
from quell.attribute.records import Records

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Attribution:
    """Each request's predicted excess with its interval, and its latency split in two."""

    request_id: NDArray[np.int64]
    request_class: NDArray[np.str_]
    wall_seconds: FloatArray
    excess_seconds: FloatArray
    low_seconds: FloatArray
    high_seconds: FloatArray
    provider_seconds: FloatArray

    @property
    def provider_seconds_without_floor(self) -> FloatArray:
        """The provider part as it would be with a floor of 0: every positive prediction."""
        return provider_seconds(self.excess_seconds, self.wall_seconds)

    @property
    def service_seconds(self) -> FloatArray:
        return np.asarray(self.wall_seconds - self.provider_seconds, dtype=np.float64)

    def summary(self) -> dict[str, float | int]:
        """Quantiles of the latency and of its provider part, the provider share of the total
        latency, and the share of requests with a provider part at all."""
        out: dict[str, float | int] = {"requests": len(self.wall_seconds)}
        for q in (50, 90, 99):
            out[f"p{q}_seconds"] = float(np.percentile(self.wall_seconds, q))
            out[f"provider_p{q}_seconds"] = float(np.percentile(self.provider_seconds, q))
        total = float(self.wall_seconds.sum())
        out["provider_share"] = float(self.provider_seconds.sum()) / total if total > 0 else 0.0
        out["provider_requests_share"] = float(np.mean(self.provider_seconds > 0))
        return out


def attribute(
    model: AttributionModel,
    records: Records,
    psi: PsiSeries | None = None,
    level: float = LEVEL,
    source: str = "records",
) -> Attribution:
    """The model's attribution of every request of ``records``."""
    fm = build_features(records, psi, names=model.features, classes=model.classes, source=source)
    pred = model.gp.predict(fm.x)
    interval = pred.interval(level)
    assert interval is not None  # the sparse GP always has one
    wall = records.wall_seconds
    return Attribution(
        request_id=fm.request_id,
        request_class=fm.request_class,
        wall_seconds=wall,
        excess_seconds=pred.mean_seconds,
        low_seconds=interval[0],
        high_seconds=interval[1],
        provider_seconds=provider_seconds(pred.mean_seconds, wall, model.floor_seconds),
    )

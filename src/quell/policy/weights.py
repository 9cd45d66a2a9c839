"""Turning shares into load-balancer weights (HAProxy accepts integers 0..256)."""

from __future__ import annotations

from collections.abc import Mapping

MAX_WEIGHT = 256


def proportional_weights(shares: Mapping[str, float], scale: int = MAX_WEIGHT) -> dict[str, int]:
    """Integer weights proportional to ``shares``: the largest share gets ``scale``; every
    positive share gets at least 1 so it is not silently drained; zero shares get 0."""
    top = max((v for v in shares.values() if v > 0), default=0.0)
    if top <= 0:
        return {k: 0 for k in shares}
    return {k: (max(1, round(scale * v / top)) if v > 0 else 0) for k, v in shares.items()}

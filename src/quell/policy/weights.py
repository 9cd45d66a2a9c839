"""Turning shares into load-balancer weights (HAProxy accepts integers 0..256)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

MAX_WEIGHT = 256


def proportional_array(shares: NDArray[np.float64], scale: int = MAX_WEIGHT) -> NDArray[np.int64]:
    """Integer weights proportional to ``shares``: the largest share gets ``scale``; every
    positive share gets at least 1 so it is not silently drained; zero shares get 0 (all zero
    when no share is positive). Halves round to even."""
    s = np.asarray(shares, dtype=float)
    top = float(s.max(initial=0.0))
    if top <= 0:
        return np.zeros(s.size, dtype=np.int64)
    w = np.maximum(1, np.rint(scale * s / top)).astype(np.int64)
    return np.where(s > 0, w, 0)


def proportional_weights(shares: Mapping[str, float], scale: int = MAX_WEIGHT) -> dict[str, int]:
    """``proportional_array`` by instance id."""
    ids = list(shares)
    w = proportional_array(np.fromiter(shares.values(), dtype=float, count=len(ids)), scale)
    return dict(zip(ids, w.tolist(), strict=True))

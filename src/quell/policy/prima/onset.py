"""A neighbour's onset read at its full level (``onset_scale``; docs/papers/prima.md).

An interval's probe reading is the mean of the downloads that finished in it. A neighbour that
arrives part-way through an interval is seen in only the downloads after it, so the first
reading of it is a mix: for an arrival time uniform over the interval, the neighbour's load
(U_int) reads on average half its level, and PRIMA, trusting it, leaves the instance a share
that its neighbour's full level does not allow — one more interval above R_th before the next
reading shows the whole of it. When an instance whose last reading showed no neighbour load
(U_int at most ``FLOOR_PCT``) reads some now, its U_int is taken ``scale`` times as read (2:
the reciprocal of the expected half), for this interval only; the next reading, made with the
neighbour there throughout, replaces it.

With ``zero_over_rt_s`` (``onset_zero_on_miss``: R_th), an instance at an onset whose measured
mean response time in the interval was above it gets no capacity for the next interval: the
neighbour is felt as well as read, and a mixed reading still leaves a share that a neighbour
with an RT floor above R_th does not allow (docs/papers/prima.md). A reading that is only
probe noise seldom comes with a missed interval, which keeps this from emptying clean
instances."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from quell.models.capacity import CapacityModel, Query

FloatArray = NDArray[np.float64]

FLOOR_PCT = 2.0
"""At most this U_int reads as no neighbour. Tried at 5 % once, with an onset read 10 times, on
prima-sim-1000: 95.08 / 93.15 % of settled / all instance-intervals at 1.39x the oracle against
94.73 / 92.79 % at 1.42x with 2 %, and that onset scale was not kept (docs/papers/prima.md)."""


class Onset:
    """The U_int each instance read last (``last_u_int_``) and the onsets of this interval."""

    def __init__(self, scale: float, zero_over_rt_s: float | None = None) -> None:
        self.scale = scale
        self.zero_over_rt_s = zero_over_rt_s
        self.last_u_int_: dict[str, float] = {}

    def adjust(
        self,
        model: CapacityModel,
        ids: list[str],
        u_int: Query,
        u_max: Query,
        fresh: NDArray[np.bool_],
        rt_s: list[float | None] | None = None,
    ) -> tuple[Query, Query, list[str]]:
        """(U_int, U_max) with each onset's U_int scaled, and the instances at an onset.
        ``fresh``: whether each instance's probe reported in this interval (a reading carried
        over from before is no new onset)."""
        last = np.fromiter(
            (self.last_u_int_.get(i, np.nan) for i in ids), dtype=float, count=len(ids)
        )
        value = u_int.value
        onset = fresh & (last <= FLOOR_PCT) & (value > FLOOR_PCT)
        self.last_u_int_ = dict(zip(ids, value.tolist(), strict=True))
        if not onset.any():
            return u_int, u_max, []
        scaled = np.where(onset, value * self.scale, value)
        cap = model.capacity_for(scaled)
        new_max = np.where(onset, cap.value, u_max.value)
        if self.zero_over_rt_s is not None and rt_s is not None:
            over = np.fromiter(
                (r is not None and r > self.zero_over_rt_s for r in rt_s),
                dtype=bool,
                count=len(ids),
            )
            new_max = np.where(onset & over, 0.0, new_max)
        clamped = np.where(onset, cap.clamped | u_int.clamped, u_max.clamped)
        at = [ids[k] for k in np.flatnonzero(onset).tolist()]
        return Query(scaled, u_int.clamped), Query(new_max, clamped), at

"""Each instance's utilisation over its last few intervals.

The paper's PRIMA reads U once per sample period T (10 s), so each U is a mean over T. The lab
runs T = 1 s, where a video instance's utilisation swings by ±6 points from one second to the
next at a steady offered load (chunks of 100 kB are a large share of one second of a 100 Mbit/s
link). Deciding on those swings near capacity scales out and in on noise; a mean over the last
few intervals is the paper's longer T without slowing the probe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping


class UtilWindow:
    """Mean utilisation of each instance over its last ``size`` reported intervals.

    ``update`` takes this interval's utilisations and returns each instance's mean over the
    intervals it reported in (fewer than ``size`` for a new instance). Instances missing from an
    update are forgotten: one that returns starts afresh.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.history_: dict[str, deque[float]] = {}

    def update(self, util_pct: Mapping[str, float]) -> dict[str, float]:
        old = self.history_
        self.history_ = {}
        out = {}
        for i, u in util_pct.items():
            h = old.get(i)
            if h is None:
                h = deque(maxlen=self.size)
            h.append(u)
            self.history_[i] = h
            out[i] = sum(h) / len(h)
        return out

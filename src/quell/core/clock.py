"""Clocks: the lab runs on wall time, the simulator on virtual time. Same loop, two clocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the clock's origin."""
        ...

    def sleep_until(self, t_s: float) -> None:
        """Return once ``now() >= t_s``."""
        ...


class WallClock:
    """Monotonic wall time from ``origin`` (default: construction). ``monotonic``/``sleep`` injectable."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        origin: float | None = None,
    ) -> None:
        self._monotonic = monotonic
        self._sleep = sleep
        self._origin = monotonic() if origin is None else origin

    def now(self) -> float:
        return self._monotonic() - self._origin

    def sleep_until(self, t_s: float) -> None:
        while (remaining := t_s - self.now()) > 0:
            self._sleep(min(remaining, 0.5))


class VirtualClock:
    """Simulated time: ``sleep_until`` jumps forward at once."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def sleep_until(self, t_s: float) -> None:
        self._now = max(self._now, t_s)

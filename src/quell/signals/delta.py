"""Turn cumulative counters into per-interval increases, safely across resets and reloads."""

from __future__ import annotations

from collections.abc import Hashable


class CounterDelta:
    """Remembers the previous value of each counter and returns the increase since then.

    ``update`` returns None (no trustworthy delta) on the first value of a key, when the
    ``generation`` changed (a new process replaced the old one, so its counters restarted),
    or when the value went backwards (a reset). The new value is always remembered.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[Hashable, float]] = {}

    def update(self, key: Hashable, value: float, generation: Hashable = None) -> float | None:
        previous = self._last.get(key)
        self._last[key] = (generation, value)
        if previous is None:
            return None
        prev_generation, prev_value = previous
        if prev_generation != generation or value < prev_value:
            return None
        return value - prev_value

    def forget(self, key: Hashable) -> None:
        """Drop a key (e.g. a removed instance); its next update returns None."""
        self._last.pop(key, None)

    def __len__(self) -> int:
        return len(self._last)

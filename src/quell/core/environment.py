"""The two protocols at the heart of quell: an Environment to observe and act on, a Policy to decide."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from quell.core.action import Action, Decision
from quell.core.clock import Clock
from quell.core.observation import Snapshot
from quell.scenario.model import Event


class Environment(Protocol):
    """A lab, a simulator or a live deployment: anything quell can observe and act on.

    ``observe`` reports the interval that ends at ``clock.now()``. ``trigger`` carries out a timed
    scenario event (start/stop antagonists); policies never call it.
    """

    @property
    def name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    def observe(self) -> Snapshot: ...

    def apply(self, actions: Sequence[Action]) -> None: ...

    def trigger(self, event: Event) -> None: ...

    def close(self) -> None: ...


class Policy(Protocol):
    """Pure decision logic: a snapshot in, a decision out. Never touches processes or sockets."""

    name: str

    def decide(self, snapshot: Snapshot) -> Decision: ...

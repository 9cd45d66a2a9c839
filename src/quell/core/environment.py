"""The two protocols at the heart of quell: an Environment to observe and act on, a Policy to decide."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from quell.core.action import Action, Decision
from quell.core.clock import Clock
from quell.core.observation import Snapshot


class Environment(Protocol):
    """A lab, a simulator or a live deployment: anything quell can observe and act on.

    ``observe`` reports the interval that ends at ``clock.now()``. ``apply`` carries out a
    batch of actions: the ones it can, at once; if any cannot be carried out it raises
    ``ActionError`` naming each of them (and what was applied), leaving the environment
    consistent. ``close`` releases everything the environment holds and may be called twice.
    Scripted happenings (a neighbour starting at 90 s) are not part of this seam: the
    experiment runner drives them on environments that can stage them.
    """

    @property
    def name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    def observe(self) -> Snapshot: ...

    def apply(self, actions: Sequence[Action]) -> None: ...

    def close(self) -> None: ...


class Policy(Protocol):
    """Pure decision logic: a snapshot in, a decision out. Never touches processes or sockets."""

    name: str

    def decide(self, snapshot: Snapshot) -> Decision: ...

"""The two protocols at the heart of quell: an Environment to observe and act on, a Policy to decide
(and, optionally, a policy's fast path: ``FastPolicy``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from quell.core.action import Action, Decision
from quell.core.clock import Clock
from quell.core.observation import Snapshot


class Environment(Protocol):
    """A lab, a simulator or a live deployment: anything quell can observe and act on.

    ``observe`` reports the interval that ends at ``clock.now()``. ``glance`` reports the window
    since the last glance or observe, ending at ``clock.now()``, without closing observe's
    interval: its observations carry what such a window can show (requests completed and their
    response times, the probe's downloads completed, the age of the oldest request held,
    utilisation), with ``interval_s`` the window's length, and the next ``observe`` reports what
    it would have without the glances. ``apply`` carries out a batch of actions: the ones it
    can, at once; if any cannot be carried out it raises ``ActionError`` naming each of them
    (and what was applied), leaving the environment consistent. ``close`` releases everything
    the environment holds and may be called twice. Scripted happenings (a neighbour starting at
    90 s) are not part of this seam: the experiment runner drives them on environments that can
    stage them.
    """

    @property
    def name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    def observe(self) -> Snapshot: ...

    def glance(self) -> Snapshot: ...

    def apply(self, actions: Sequence[Action]) -> None: ...

    def close(self) -> None: ...


class Policy(Protocol):
    """Pure decision logic: a snapshot in, a decision out. Never touches processes or sockets."""

    name: str

    def decide(self, snapshot: Snapshot) -> Decision: ...


@runtime_checkable
class FastPolicy(Protocol):
    """A policy with a fast path between its intervals: every ``fast_interval_s`` (``None``:
    none) the control loop glances (``Environment.glance``) and asks ``react``, which is pure
    as ``decide`` is; planning stays in ``decide``, at the interval."""

    name: str
    fast_interval_s: float | None

    def decide(self, snapshot: Snapshot) -> Decision: ...

    def react(self, glance: Snapshot) -> Decision: ...

"""The control loop: at every interval observe, decide, apply; run timed callbacks on time.

A failed cycle (an exception in observe, decide or apply) is logged and counted, never fatal.
What a timed callback does (start a neighbour, record a phase) is its caller's business: the
loop only keeps time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from quell.core.action import Decision
from quell.core.environment import Environment, Policy
from quell.core.observation import Snapshot
from quell.errors import ComponentDiedError

log = logging.getLogger(__name__)

TimedCall = tuple[float, Callable[[], None]]
"""``(at_s, call)``: run ``call`` once the environment's clock reaches ``at_s``."""


@dataclass
class LoopReport:
    ticks: int = 0
    cycle_errors: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class ControlLoop:
    environment: Environment
    policy: Policy
    interval_s: float
    duration_s: float
    timed: Sequence[TimedCall] = ()
    on_snapshot: Callable[[Snapshot], None] = lambda s: None
    on_decision: Callable[[float, Decision], None] = lambda t, d: None
    on_cycle_error: Callable[[float, str], None] = lambda t, msg: None

    def _timeline(self) -> list[tuple[float, int, Callable[[], None] | None]]:
        n = round(self.duration_s / self.interval_s)
        ticks: list[tuple[float, int, Callable[[], None] | None]] = [
            (min(k * self.interval_s, self.duration_s), 1, None) for k in range(1, n + 1)
        ]
        # At equal times the tick (closing the interval before the call) comes first, then the
        # calls in the order given.
        calls: list[tuple[float, int, Callable[[], None] | None]] = [
            (at_s, 2, call) for at_s, call in self.timed
        ]
        return sorted(ticks + calls, key=lambda x: (x[0], x[1]))

    def run(self) -> LoopReport:
        report = LoopReport()
        clock = self.environment.clock
        for t, _, call in self._timeline():
            clock.sleep_until(t)
            if call is not None:
                call()
                continue
            report.ticks += 1
            try:
                snapshot = self.environment.observe()
                self.on_snapshot(snapshot)
                decision = self.policy.decide(snapshot)
                if decision.actions or decision.reason:
                    self.on_decision(snapshot.time_s, decision)
                if decision.actions:
                    self.environment.apply(decision.actions)
            except ComponentDiedError:
                raise
            except Exception as exc:  # a failed cycle is counted, never fatal
                report.cycle_errors += 1
                msg = f"{type(exc).__name__}: {exc}"
                report.errors.append(msg)
                log.warning("control cycle at %.1f s failed: %s", t, msg)
                self.on_cycle_error(t, msg)
        return report

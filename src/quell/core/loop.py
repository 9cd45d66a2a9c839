"""The control loop: at every interval observe, decide, apply; between intervals, for a policy
with a fast path (``FastPolicy``), glance, react, apply every ``fast_interval_s``; run timed
callbacks on time.

A failed cycle (an exception in observe, glance, decide, react or apply) is logged and counted,
never fatal. A fast decision goes to ``on_decision`` like the others, marked ``FAST_KEY`` in its
detail. What a timed callback does (start a neighbour, record a phase) is its caller's business:
the loop only keeps time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from quell.core.action import Decision
from quell.core.environment import Environment, FastPolicy, Policy
from quell.core.observation import Snapshot
from quell.errors import ComponentDiedError

log = logging.getLogger(__name__)

TimedCall = tuple[float, Callable[[], None]]
"""``(at_s, call)``: run ``call`` once the environment's clock reaches ``at_s``."""
FAST_KEY = "fast"
"""``Decision.detail`` key (``True``) of the decisions a fast path made on a glance."""
_TICK, _CALL, _GLANCE = 1, 2, 3
"""What a moment of the timeline is; at equal times they come in this order."""


@dataclass
class LoopReport:
    ticks: int = 0
    glances: int = 0
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

    def _fast(self) -> FastPolicy | None:
        p = self.policy
        return p if isinstance(p, FastPolicy) and p.fast_interval_s is not None else None

    def _timeline(
        self, fast_s: float | None = None
    ) -> list[tuple[float, int, Callable[[], None] | None]]:
        n = round(self.duration_s / self.interval_s)
        ends = [min(k * self.interval_s, self.duration_s) for k in range(1, n + 1)]
        ticks: list[tuple[float, int, Callable[[], None] | None]] = [(t, _TICK, None) for t in ends]
        # At equal times the tick (closing the interval before the call) comes first, then the
        # calls in the order given, then a glance.
        calls: list[tuple[float, int, Callable[[], None] | None]] = [
            (at_s, _CALL, call) for at_s, call in self.timed
        ]
        glances: list[tuple[float, int, Callable[[], None] | None]] = []
        if fast_s is not None:
            for start, end in zip([0.0, *ends], ends, strict=False):
                k = 1
                while start + k * fast_s < end - 1e-9:  # the tick itself only observes
                    glances.append((start + k * fast_s, _GLANCE, None))
                    k += 1
        return sorted(ticks + calls + glances, key=lambda x: (x[0], x[1]))

    def run(self) -> LoopReport:
        report = LoopReport()
        clock = self.environment.clock
        fast = self._fast()
        for t, kind, call in self._timeline(None if fast is None else fast.fast_interval_s):
            clock.sleep_until(t)
            if call is not None:
                call()
                continue
            try:
                if kind == _TICK:
                    report.ticks += 1
                    snapshot = self.environment.observe()
                    self.on_snapshot(snapshot)
                    decision = self.policy.decide(snapshot)
                else:
                    assert fast is not None
                    report.glances += 1
                    snapshot = self.environment.glance()
                    decision = fast.react(snapshot)
                    decision = replace(decision, detail={**decision.detail, FAST_KEY: True})
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

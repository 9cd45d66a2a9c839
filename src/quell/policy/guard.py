"""Do no harm: after a policy changes an instance (a server reconfiguration, a weight cut), check
what its users then wait, and call for the change to be undone when they wait longer than
before it beyond the scatter of either.

What users waited per request in interval k of an instance, an unanswered request counted at
the workload's timeout T (what its user waited before giving up)::

    w_k = (n_k × r_k + e_k × T) / (n_k + e_k)

with n_k the requests answered, r_k their mean response time and e_k the errors (refused,
dropped, timed out). An interval with neither (n_k + e_k = 0) has no w_k and is left out. The
**before** is the w of the last ``BEFORE_INTERVALS`` intervals up to and including the one in
which the change was decided, or fewer when the caller restarted it later (IC2 restarts it when
its chain leaves NI2, so that the before and the after are under the same neighbour); the
**after** is the w of the ``after_intervals`` intervals that follow. With their means b̄ and ā
and standard errors s_b = sd(b) / √N_b and s_a = sd(a) / √N_a, a one-sided Welch comparison::

    revert  iff  ā − b̄ > Z × √(s_b² + s_a²)

else keep. ``after_intervals`` = max(``AFTER_MIN_INTERVALS``, ⌈T / interval⌉ + 1): long enough
that a request sent just after the change and never answered has been counted as an error, and
that s_a is an estimate. So a harmful change is reverted at most that many intervals after it
was made (20 s at the simulator's 5 s intervals and a 10 s timeout, 11 s at the lab's 1 s). An
after window in which fewer than two intervals answered or refused anything, where the before
had two or more, is a revert too (the change left the instance answering nobody). A before of
fewer than two intervals has no scatter, so the change is not watched (``start`` says so).

The test treats the intervals as independent; they are not (a queue carries over), so Z is not
read as a probability but set between two measurements, as the statistic t = (ā − b̄) / √(s_b² +
s_a²) reads them. On the shipped IC2 simulator scenario (``sim-onoff.yaml`` cut to its first
interference period, 600 s; graceful and online; seeds 3-7) IC2 made 10 changes for
interference, the changes that over the whole scenario cut what users waited under interference
by 46-52 % against the fixed configuration (docs/papers/ic2.md); their t was 0.11-0.60 (after
above before by 0.2-1.4 s: the before is the neighbour's onset, while the queue still builds),
so no change is reverted at any Z above 0.60: a false-revert rate of 0 of 10. A change that
makes the instance swap (php-fpm 20 → 160 children in 200 MB, ``tests/sim/test_sim_guard.py``)
reads t = 3.85 at its judgement, 20 s after it. Z = 2 lies between them: 3.3 times the largest
false figure, half the harmful one.

Deciding is apart from enforcing: ``judge`` is the formula over two samples, ``Guard`` keeps
each instance's windows and says when a judgement is due; the policy that made the change
carries the verdict out (IC2: ``quell.policy.ic2.controller``).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from quell.core.observation import Observation
from quell.errors import InputError, Problem

BEFORE_INTERVALS = 12
"""The before is at most this many intervals: a minute at the simulator's 5 s intervals, 12 s
at the lab's 1 s. IC2's before is shorter (from its chain leaving NI2: three in every change
measured above); no run has varied it."""
AFTER_MIN_INTERVALS = 4
"""The after is at least this many intervals, so that its standard error is an estimate; the
timeout sets it wherever it is longer (the lab's 11). No run has varied it."""
Z = 2.0
"""The one-sided threshold in standard errors of the difference: between the largest t of a
helpful change (0.60) and that of a harmful one (3.85) in the simulator (module docstring)."""
MIN_SAMPLES = 2
"""Fewer intervals than this have no scatter: a before this short is not watched; an after this
short (nothing answered) is a revert."""

Outcome = Literal["keep", "revert"]


def waited_per_request_s(obs: Observation, timeout_s: float) -> float | None:
    """w for one interval (module docstring): the mean response time of the answered requests
    and each error at ``timeout_s``; ``None`` when nothing was answered or refused."""
    n, e = obs.requests, obs.errors
    if n + e <= 0:
        return None
    if n > 0 and obs.mean_rt_seconds is None:
        return None  # answered, but not measured: no figure rather than a made-up one
    rt = obs.mean_rt_seconds if n > 0 and obs.mean_rt_seconds is not None else 0.0
    return (n * rt + e * timeout_s) / (n + e)


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


@dataclass(frozen=True)
class Judgement:
    """The comparison of the after with the before, and its outcome."""

    outcome: Outcome
    before_s: float
    before_se_s: float
    before_intervals: int
    after_s: float | None
    after_se_s: float | None
    after_intervals: int
    threshold_s: float | None
    """b̄ + Z × √(s_b² + s_a²): an after above this reverts."""
    signal: str
    """What decided it, in words."""

    def as_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome,
            "before_waited_s": self.before_s,
            "before_se_s": self.before_se_s,
            "before_intervals": self.before_intervals,
            "after_waited_s": self.after_s,
            "after_se_s": self.after_se_s,
            "after_intervals": self.after_intervals,
            "threshold_s": self.threshold_s,
            "z": Z,
            "signal": self.signal,
        }

    def words(self) -> str:
        b = f"{self.before_s:.4g} ± {self.before_se_s:.2g} s over {self.before_intervals}"
        if self.after_s is None:
            return f"users waited {b} intervals before; after, {self.signal}"
        a = f"{self.after_s:.4g} ± {self.after_se_s or 0.0:.2g} s over {self.after_intervals}"
        return f"users waited {a} intervals after against {b} before ({self.signal})"


def judge(before: Sequence[float], after: Sequence[float]) -> Judgement:
    """The one-sided Welch comparison of the module docstring over the w of the intervals before
    (at least ``MIN_SAMPLES``) and after a change."""
    if len(before) < MIN_SAMPLES:
        raise InputError(
            "guard",
            [Problem("before", f"{len(before)} interval(s): at least {MIN_SAMPLES} are needed")],
        )
    bad = [v for v in (*before, *after) if not (math.isfinite(v) and v >= 0)]
    if bad:
        raise InputError("guard", [Problem("waited_s", f"not a time: {bad[:3]}")])
    b, sb = _mean_se(before)
    if len(after) < MIN_SAMPLES:
        return Judgement(
            "revert",
            b,
            sb,
            len(before),
            None,
            None,
            len(after),
            None,
            f"{len(after)} interval(s) answered or refused anything",
        )
    a, sa = _mean_se(after)
    threshold = b + Z * math.hypot(sb, sa)
    if a > threshold:
        signal = f"above {threshold:.4g} s, the before + {Z:g} standard errors"
        return Judgement("revert", b, sb, len(before), a, sa, len(after), threshold, signal)
    signal = f"within {threshold:.4g} s, the before + {Z:g} standard errors"
    return Judgement("keep", b, sb, len(before), a, sa, len(after), threshold, signal)


@dataclass
class _Watch:
    before: tuple[float, ...]
    after: list[float]
    intervals: int = 0


class Guard:
    """Each instance's before and, after a change, its after; ``push`` every interval returns
    the judgement once the after is complete (module docstring)."""

    def __init__(self, timeout_s: float, interval_s: float) -> None:
        problems = []
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            problems.append(Problem("timeout_s", f"{timeout_s!r} must be a positive time"))
        if not (math.isfinite(interval_s) and interval_s > 0):
            problems.append(Problem("interval_s", f"{interval_s!r} must be a positive time"))
        if problems:
            raise InputError("guard", problems)
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.after_intervals = max(AFTER_MIN_INTERVALS, math.ceil(timeout_s / interval_s) + 1)
        """How many intervals after a change it is judged: the revert comes this many
        intervals after the change at most."""
        self.recent_: dict[str, deque[float]] = {}
        self.watching_: dict[str, _Watch] = {}

    @property
    def within_s(self) -> float:
        """The stated time: a harmful change is judged (and reverted) this long after it."""
        return self.after_intervals * self.interval_s

    def push(self, instance_id: str, obs: Observation) -> Judgement | None:
        """Record one interval of ``instance_id``; the judgement when its after is complete
        (the watch then ends), else ``None``."""
        w = waited_per_request_s(obs, self.timeout_s)
        recent = self.recent_.setdefault(instance_id, deque(maxlen=BEFORE_INTERVALS))
        if w is not None:
            recent.append(w)
        watch = self.watching_.get(instance_id)
        if watch is None:
            return None
        watch.intervals += 1
        if w is not None:
            watch.after.append(w)
        if watch.intervals < self.after_intervals:
            return None
        del self.watching_[instance_id]
        return judge(watch.before, watch.after)

    def restart_before(self, instance_id: str) -> None:
        """Forget the before so far: the before of the next change starts with the next
        interval (the context changed)."""
        self.recent_.pop(instance_id, None)

    def start(self, instance_id: str) -> tuple[float, ...] | None:
        """Watch ``instance_id`` after a change made in the interval last pushed: its before,
        or ``None`` (not watched) when it has fewer than ``MIN_SAMPLES`` intervals."""
        before = tuple(self.recent_.get(instance_id, ()))
        if len(before) < MIN_SAMPLES:
            self.watching_.pop(instance_id, None)
            return None
        self.watching_[instance_id] = _Watch(before, [])
        return before

    def cancel(self, instance_id: str) -> None:
        """Stop watching (a later change supersedes the one watched)."""
        self.watching_.pop(instance_id, None)

    def watching(self, instance_id: str) -> bool:
        return instance_id in self.watching_

    def forget(self, instance_id: str) -> None:
        """The instance left the snapshot."""
        self.recent_.pop(instance_id, None)
        self.watching_.pop(instance_id, None)


__all__ = [
    "AFTER_MIN_INTERVALS",
    "BEFORE_INTERVALS",
    "MIN_SAMPLES",
    "Guard",
    "Judgement",
    "Z",
    "judge",
    "waited_per_request_s",
]

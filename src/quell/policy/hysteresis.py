"""Hysteresis: small state machines that act on a condition only once it has lasted, so a
controller does not follow one noisy interval.

* ``Streak``: a condition that has held W + 1 intervals in a row (the baselines' waits: LSF's
  and LR's before reweighting, the threshold autoscaler's before scaling).
* ``Vote``: a condition that holds now and in W + 1 of the last 2W + 1 intervals (PRIMA's waits
  before scaling out and in).
* ``Trial``: a scale-in trial — the instances to be kept carry the load for a few intervals
  before the others go; each failure doubles the wait before the next one (PRIMA).
* ``ContextChain``: IC2's five-state machine over its classifier's outputs (Section 4,
  "Configuration Controller", Fig. 8): reconfigure on entering I2 or NI2.
* ``TwoStateChain``: IC2's two-state machine (the paper's testbed): reconfigure on the first
  verdict of the other class.

Each is a plain object: its parameters are stored as given, its state lives in attributes
ending in ``_``, and one method takes an interval's verdict and returns what fired. No clock,
no I/O: the caller says when an interval has passed.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Literal

MAX_TRIAL_BACKOFF = 4
"""Failed scale-in trials double the wait up to 2**this times."""


class Streak:
    """Whether a condition has held ``wait`` + 1 intervals in a row; one interval without it
    starts the count again."""

    def __init__(self, wait: int) -> None:
        self.wait = wait
        self.count_ = 0
        """Intervals in a row the condition has held, this one included."""

    def update(self, holds: bool) -> bool:
        """Record one interval; whether the streak is due (``count_`` > W)."""
        self.count_ = self.count_ + 1 if holds else 0
        return self.count_ > self.wait

    def clear(self) -> None:
        """Start counting again (once the action the streak called for is taken)."""
        self.count_ = 0


class Vote:
    """Whether a condition holds now and in more than W of the last 2W + 1 intervals (this one
    included): W + 1 of the last 2W + 1. A steady condition fires after W further intervals;
    one that noise interrupts now and then still fires, where a count of intervals in a row
    would start again.

    Parameters
    ----------
    wait : W.
    longest_wait : the largest W ``update`` is asked to count with (default ``wait``); the vote
        remembers that many intervals' 2W + 1.
    """

    def __init__(self, wait: int, longest_wait: int | None = None) -> None:
        self.wait = wait
        self.longest_wait = longest_wait
        remembered = wait if longest_wait is None else max(wait, longest_wait)
        self.held_: deque[bool] = deque(maxlen=2 * remembered + 1)
        """Whether the condition held in each remembered interval, oldest first."""
        self.count_ = 0
        """Intervals of the last 2W + 1 the condition held in if it holds now, else 0."""

    def update(self, holds: bool, wait: int | None = None) -> bool:
        """Record one interval; whether the vote carries (``count_`` > W). ``wait``: W for this
        interval's count (default ``wait``; at most ``longest_wait``)."""
        w = self.wait if wait is None else wait
        self.held_.append(holds)
        self.count_ = sum(islice(reversed(self.held_), 2 * w + 1)) if holds else 0
        return self.count_ > w

    def clear(self) -> None:
        """Forget every interval (once the action the vote called for is taken)."""
        self.held_.clear()
        self.count_ = 0


TrialStep = Literal["on", "passed", "failed"]
"""What one interval of a trial did: still on, passed (remove the others) or failed."""


class Trial:
    """A trial of fewer instances before a scale-in: idle → on trial (``start``) → passed or
    failed → idle.

    On trial, each ``step`` says whether the instances kept fell short of their load this
    interval and whether they carried it with the headroom to spare (spare implies not short).
    The trial

    * fails once they have fallen short in more than ``patience`` intervals in a row;
    * after ``length`` intervals (counting this one), passes if they carry it with spare and
      fails if they carry it without; while they fall short (for no more than ``patience``
      intervals in a row) it goes on past ``length`` until one of these.

    A failure (``step`` or ``fail``) doubles the wait before the next trial (``wait``), up to
    2**``max_backoff``; a pass, or ``reset`` (any other scaling), restores it. ``cancel`` ends a
    trial with no verdict (nothing left on trial).
    """

    def __init__(self, length: int, patience: int, max_backoff: int = MAX_TRIAL_BACKOFF) -> None:
        self.length = length
        self.patience = patience
        self.max_backoff = max_backoff
        self.on_ = False
        """Whether a trial is on."""
        self.runs_ = 0
        """Intervals of the trial that is on so far."""
        self.short_runs_ = 0
        """Intervals in a row, up to the last, that the kept instances fell short."""
        self.failures_ = 0
        """Failed trials since the last pass or ``reset`` (at most ``max_backoff``)."""

    def start(self) -> None:
        self.on_ = True
        self.runs_ = self.short_runs_ = 0

    def step(self, short: bool, spare: bool) -> TrialStep:
        """One interval on trial."""
        self.runs_ += 1
        self.short_runs_ = self.short_runs_ + 1 if short else 0
        done = self.runs_ >= self.length
        if self.short_runs_ > self.patience or (done and not short and not spare):
            self.fail()
            return "failed"
        if done and spare:
            self.cancel()
            self.reset()
            return "passed"
        return "on"

    def fail(self) -> None:
        """End the trial as failed (also from outside: the load outgrew even the full fleet)."""
        self.cancel()
        self.failures_ = min(self.failures_ + 1, self.max_backoff)

    def cancel(self) -> None:
        self.on_ = False
        self.runs_ = self.short_runs_ = 0

    def reset(self) -> None:
        """Back to the shortest wait (the fleet was scaled)."""
        self.failures_ = 0

    def wait(self, base: int, failures: int | None = None) -> int:
        """W before the next trial for a vote whose W is ``base`` when no trial has failed:
        W + 1 intervals doubled per failure (``failures``, default ``failures_``), less 1."""
        n = self.failures_ if failures is None else failures
        return (base + 1) * (1 << n) - 1


Verdict = Literal["I", "NI", "T"]
"""One interval's class from IC2's classifier: interference, no interference, transient."""

ChainState = Literal["NI2", "NI1", "T", "I1", "I2"]

_NEXT: dict[ChainState, dict[Verdict, ChainState]] = {
    "NI2": {"NI": "NI2", "T": "T", "I": "T"},
    "NI1": {"NI": "NI2", "T": "T", "I": "I1"},
    "T": {"NI": "NI1", "T": "T", "I": "I1"},
    "I1": {"NI": "NI1", "T": "T", "I": "I2"},
    "I2": {"NI": "T", "T": "T", "I": "I2"},
}
_FIRING: frozenset[ChainState] = frozenset(("I2", "NI2"))
"""The states whose entry reconfigures the server."""


class ContextChain:
    """IC2's configuration controller (Section 4, Fig. 8): five states, two of interference
    (I1, I2), two of none (NI1, NI2) and the transient one (T). Each interval's classifier
    output moves the state; the server is reconfigured when the chain enters I2 (for
    interference) or NI2 (back to the configuration without it).

    The edges, for the verdicts NI / T / I::

        NI2 → NI2 / T / T      (a steady state is left through T)
        NI1 → NI2 / T / I1
        T   → NI1 / T / I1
        I1  → NI1 / T / I2
        I2  → T   / T / I2

    What the paper fixes: a reconfiguration takes two successive periods of one class (T → I1
    → I2), and from NI2 three successive I verdicts (NI2 → T → I1 → I2: its "No-interference →
    Transient → Interference → Interference"); by symmetry three NI verdicts from I2.

    Where it is silent, chosen here:

    * a T verdict goes to T from every state: a fluctuation restarts the count;
    * from I1 an NI verdict goes to NI1, and from NI1 an I verdict to I1: one period of the
      other class counts as one of that class;
    * entering I2 or NI2 fires only when its configuration is not the one in force
      (``config_``): NI2 → T → NI1 → NI2 after a single I verdict reconfigures nothing. The
      paper reconfigures on every entry; a return would reapply the configuration in force at
      the cost of a reconfiguration (its Httpd's 30-60 s transient), and Algorithm 1, relative
      to the values in force, would shrink MaxClients again from values already shrunk.

    ``initial``: the state to start in (NI2: the server starts in its configuration without
    interference); its configuration is the one in force, none if it is NI1, T or I1.
    """

    def __init__(self, initial: ChainState = "NI2") -> None:
        self.initial = initial
        self.state_: ChainState = initial
        self.config_: ChainState | None = initial if initial in _FIRING else None
        """The state whose configuration is in force: the last fired, else the initial."""

    def step(self, verdict: Verdict) -> ChainState | None:
        """Move on one interval's verdict; I2 or NI2 when the chain enters it and its
        configuration is not in force (reconfigure for it), else ``None``."""
        self.state_ = state = _NEXT[self.state_][verdict]
        if state not in _FIRING or state == self.config_:
            return None
        self.config_ = state
        return state


class TwoStateChain:
    """IC2's two-state machine (Section 4, Fig. 8, the paper's own testbed, where its
    hardware counters made the classifier sure): NI2 ↔ I2 on one verdict. An I verdict
    enters I2, an NI verdict NI2; a T verdict stays where it is. Its two states carry the
    five-state chain's names for its settled states, so a controller reads either machine
    the same way (``state_``, ``config_``, ``step``). Entering fires only when the
    configuration is not the one in force, as ``ContextChain``."""

    def __init__(self, initial: Literal["NI2", "I2"] = "NI2") -> None:
        self.initial = initial
        self.state_: ChainState = initial
        self.config_: ChainState | None = initial

    def step(self, verdict: Verdict) -> ChainState | None:
        """Move on one interval's verdict; the state entered when it fires, else ``None``."""
        if verdict == "T":
            return None
        state: ChainState = "I2" if verdict == "I" else "NI2"
        self.state_ = state
        if state == self.config_:
            return None
        self.config_ = state
        return state


__all__ = [
    "MAX_TRIAL_BACKOFF",
    "ChainState",
    "ContextChain",
    "Trial",
    "TrialStep",
    "TwoStateChain",
    "Verdict",
    "Vote",
]

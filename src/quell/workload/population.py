"""Closed-loop users (a scenario's ``process: closed``): when each user starts, what each asks
for, how long each thinks, and the bounds that stop them all.

Pure: times are numbers the caller gives, and each user's draws come from its own named stream
of the scenario seed (``workload/users/<k>``), so user *k* asks for the same paths and thinks
the same times whatever the server did and however the users interleave. The lab's load
generator drives real connections with it; a simulator can drive virtual ones with the same
draws."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.workload.arrival import Mmpp2
from quell.workload.spec import ClosedLoopSpec

USER_STREAM = "workload/users/{}"
"""The name of user k's random stream (``quell.core.rng.component_rng``)."""
DRAW_BLOCK = 64
"""Draws made at once per user; the sequence does not depend on it."""
MODULATION_STREAM = "workload/think-modulation"
"""The random stream of a ``ThinkModulation``'s sojourns."""


@dataclass(frozen=True)
class ThinkModulation:
    """Users that think on a modulated clock: a think time Z, drawn as without modulation, ends
    at the first t' with ∫ f(t) dt from the think's start to t' = Z, where f is piecewise
    constant: ``factors[i]`` from ``starts_s[i]`` to the next start (the first factor also
    before the first start, the last one for ever after). While f = a, thinking users send a
    times as often as unmodulated ones.

    ``mmpp2`` draws f as the state path of a two-state MMPP (``quell.workload.arrival.Mmpp2``)
    fitted to an index of dispersion I and the users' request rate, its two rates divided by
    their mean (so f averages 1 over time): the requests of the users that are thinking then
    arrive as that MMPP2, bursts of ``peak_ratio`` × the base rate in a fraction
    ``burst_fraction`` of the time. The closed loop damps the bursts (users stuck waiting for
    answers do not send), so the index of dispersion the requests show is at most I."""

    starts_s: tuple[float, ...]
    factors: tuple[float, ...]

    @classmethod
    def mmpp2(
        cls,
        dispersion: float,
        rate_rps: float,
        duration_s: float,
        seed: int,
        peak_ratio: float = 10.0,
        burst_fraction: float = 0.1,
    ) -> ThinkModulation:
        """The state path of ``Mmpp2.fit(rate_rps, dispersion, peak_ratio, burst_fraction)``
        over ``duration_s``, from stream ``MODULATION_STREAM`` of ``seed``."""
        mmpp = Mmpp2.fit(rate_rps, dispersion, peak_ratio, burst_fraction)
        rng = component_rng(seed, MODULATION_STREAM)
        mean = mmpp.mean_rate_rps
        starts: list[float] = []
        factors: list[float] = []
        t = 0.0
        high = bool(rng.random() < mmpp.burst_fraction)
        while t < duration_s:
            starts.append(t)
            factors.append((mmpp.rate_high if high else mmpp.rate_low) / mean)
            t += float(rng.exponential(1.0 / (mmpp.leave_high if high else mmpp.leave_low)))
            high = not high
        return cls(tuple(starts), tuple(factors))

    def end_s(self, start_s: float, think_s: float) -> float:
        """When a think of ``think_s`` (unmodulated seconds) that starts at ``start_s`` ends."""
        i = max(0, bisect.bisect_right(self.starts_s, start_s) - 1)
        t, left = start_s, think_s
        while True:
            f = self.factors[i]
            seg_end = self.starts_s[i + 1] if i + 1 < len(self.starts_s) else math.inf
            if f * (seg_end - t) >= left:
                return t + left / f
            left -= f * (seg_end - t)
            t, i = seg_end, i + 1

    def as_dict(self) -> dict[str, list[float]]:
        return {"starts_s": list(self.starts_s), "factors": list(self.factors)}

    @classmethod
    def from_dict(cls, raw: dict[str, list[float]]) -> ThinkModulation:
        return cls(tuple(map(float, raw["starts_s"])), tuple(map(float, raw["factors"])))


@dataclass(frozen=True)
class Population:
    """``users`` closed-loop users: each sends a request for a path of the mix, waits for the
    whole answer, thinks Exp(mean ``think_time_s``) and sends the next. User k starts at
    k · ``ramp_s`` / ``users``. No request is sent at or after ``duration_s``, and at most
    ``max_requests`` in all."""

    users: int
    think_time_s: float
    ramp_s: float
    keepalive: bool
    paths: tuple[str, ...]
    weights: tuple[float, ...]
    duration_s: float
    max_requests: int
    seed: int
    think_modulation: ThinkModulation | None = None
    """Think on a modulated clock (bursts); None: plain exponential think times."""

    @classmethod
    def of(
        cls,
        spec: ClosedLoopSpec,
        mix: Sequence[tuple[str, float]],
        duration_s: float,
        max_requests: int,
        seed: int,
    ) -> Population:
        """The population a scenario's ``workload`` describes (``mix``: its path and weight
        pairs)."""
        return cls(
            users=spec.users,
            think_time_s=spec.think_time_s,
            ramp_s=spec.ramp_s,
            keepalive=spec.keepalive,
            paths=tuple(p for p, _ in mix),
            weights=tuple(float(w) for _, w in mix),
            duration_s=duration_s,
            max_requests=max_requests,
            seed=seed,
        )

    def think_end_s(self, answered_s: float, think_s: float) -> float:
        """When a user answered at ``answered_s`` (run time) wakes after drawing ``think_s``."""
        if self.think_modulation is None:
            return answered_s + think_s
        return self.think_modulation.end_s(answered_s, think_s)

    def start_s(self, user: int) -> float:
        """When user ``user`` (0-based) sends its first request: evenly over the ramp, the
        first at 0."""
        return user * self.ramp_s / self.users

    def draws(self, user: int) -> UserDraws:
        """User ``user``'s requests, from its own stream."""
        return UserDraws(
            component_rng(self.seed, USER_STREAM.format(user)),
            np.cumsum(np.asarray(self.weights, dtype=np.float64)),
            self.think_time_s,
        )


def draw_block(
    rng: np.random.Generator, cum_weights: NDArray[np.float64], think_time_s: float
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """A user's next ``DRAW_BLOCK`` requests from its stream ``rng``: each one's path (an index
    into the mix, by inverse CDF over ``cum_weights``, the weights' running sums) from one
    uniform and the think time after its answer, -Z·ln(1 - u), from the next. The lab's users
    (``UserDraws``) and the simulator's draw through this one function."""
    u = rng.random((DRAW_BLOCK, 2))
    picks = np.searchsorted(cum_weights, u[:, 0] * cum_weights[-1], side="right")
    return np.minimum(picks, cum_weights.size - 1), -think_time_s * np.log1p(-u[:, 1])


class UserDraws:
    """One user's requests in order: for each, the path (an index into the mix) and the time it
    thinks after the answer. Request j uses uniforms 2j and 2j + 1 of the user's stream: the
    path by inverse CDF over the mix's weights, the think time as -Z·ln(1 - u), exactly
    exponential with mean Z."""

    def __init__(
        self, rng: np.random.Generator, cum_weights: NDArray[np.float64], think_time_s: float
    ) -> None:
        self._rng = rng
        self._cum = cum_weights
        self._think_time_s = think_time_s
        self._paths: list[int] = []
        self._thinks: list[float] = []
        self._next = 0

    def _refill(self) -> None:
        picks, thinks = draw_block(self._rng, self._cum, self._think_time_s)
        self._paths = picks.tolist()
        self._thinks = thinks.tolist()
        self._next = 0

    def next(self) -> tuple[int, float]:
        """The next request's path index and the think time after its answer, in seconds."""
        if self._next == len(self._paths):
            self._refill()
        k = self._next
        self._next += 1
        return self._paths[k], self._thinks[k]


class RequestBudget:
    """The bounds of a closed loop: at most ``max_requests`` in all, none sent at or after
    ``duration_s``. Every user takes a ticket before each request."""

    def __init__(self, max_requests: int, duration_s: float) -> None:
        self.max_requests = max_requests
        self.duration_s = duration_s
        self.taken = 0

    def take(self, now_s: float) -> bool:
        """A ticket for a request sent at ``now_s``; False once the run is over or spent."""
        if now_s >= self.duration_s or self.taken >= self.max_requests:
            return False
        self.taken += 1
        return True

    def wakes_in_time(self, wake_s: float) -> bool:
        """Whether a user that will wake at ``wake_s`` could still send (thinking past the end
        is pointless: the user stops now instead)."""
        return wake_s < self.duration_s and self.taken < self.max_requests


def response_time_law_rps(users: int, response_time_s: float, think_time_s: float) -> float:
    """Throughput of a closed loop by the interactive response-time law: X = N / (R + Z)."""
    cycle_s = response_time_s + think_time_s
    return users / cycle_s if cycle_s > 0 else math.inf

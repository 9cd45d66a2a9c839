"""Closed-loop users (a scenario's ``process: closed``): when each user starts, what each asks
for, how long each thinks, and the bounds that stop them all.

Pure: times are numbers the caller gives, and each user's draws come from its own named stream
of the scenario seed (``workload/users/<k>``), so user *k* asks for the same paths and thinks
the same times whatever the server did and however the users interleave. The lab's load
generator drives real connections with it; a simulator can drive virtual ones with the same
draws."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.workload.spec import ClosedLoopSpec

USER_STREAM = "workload/users/{}"
"""The name of user k's random stream (``quell.core.rng.component_rng``)."""
DRAW_BLOCK = 64
"""Draws made at once per user; the sequence does not depend on it."""


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

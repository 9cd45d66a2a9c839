"""Closed-loop populations for tests: ten users on a three-path mix, anything else as keyword
overrides."""

from __future__ import annotations

import dataclasses
from typing import Any

from quell.workload.population import Population

BASE = Population(
    users=10,
    think_time_s=0.5,
    ramp_s=5.0,
    keepalive=True,
    paths=("/a", "/b", "/c"),
    weights=(6.0, 3.0, 1.0),
    duration_s=60.0,
    max_requests=1000,
    seed=7,
)


def population(**over: Any) -> Population:
    return dataclasses.replace(BASE, **over)

"""Scenarios for the simulator's tests: ``n_hosts`` hosts with 100 Mbit/s links, one file, a
Poisson load, anything else as keyword overrides of the scenario's top-level keys."""

from __future__ import annotations

from typing import Any

from quell.scenario import parse_scenario
from quell.scenario.model import Scenario

LINK_BYTES_PER_S = 100e6 / 8.0
"""A 100 Mbit/s link."""


def scenario_data(
    n_hosts: int = 2,
    rate_rps: float = 50.0,
    size_bytes: int = 100_000,
    arrival: str = "poisson",
    **over: Any,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "seed": 1,
        "duration_s": 100,
        "interval_s": 10,
        "hosts": [{"id": f"h{k}", "link_mbit": 100} for k in range(n_hosts)],
        "instances": [{"id": "i0", "host": "h0"}],
        "files": [{"path": "/f", "size_bytes": size_bytes}],
        "workload": {
            "arrival": {"process": arrival, "rate_rps": rate_rps},
            "requests": [{"path": "/f"}],
        },
    }
    data.update(over)
    return data


def build_scenario(**kwargs: Any) -> Scenario:
    return parse_scenario(scenario_data(**kwargs))

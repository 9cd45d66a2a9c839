"""Policies: pure functions of a snapshot (plus their own memory). ``build_policy`` makes one from
a scenario's spec; each policy class validates its own parameters in ``build``."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Literal, Protocol

from quell.core.environment import Policy
from quell.errors import InputError, Problem
from quell.policy.context import PolicyContext
from quell.scenario.model import PolicySpec, Scenario


class PolicyFactory(Protocol):
    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> Policy: ...


POLICIES: dict[str, str] = {
    "static": "quell.policy.static:StaticPolicy",
    "prima": "quell.policy.prima:PrimaPolicy",
    "rr": "quell.policy.baselines:RoundRobinPolicy",
    "lc": "quell.policy.baselines:LeastConnPolicy",
    "lsf": "quell.policy.baselines:LeastSeverityPolicy",
    "lr": "quell.policy.baselines:LeastResponsePolicy",
    "threshold": "quell.policy.baselines:ThresholdPolicy",
}
"""Policy name → ``module:Class``; imported only when a scenario asks for it."""


def policy_class(name: str) -> type[PolicyFactory]:
    target = POLICIES.get(name)
    if target is None:
        raise InputError("policy", [Problem("policy.name", f"unknown policy {name!r}")])
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def build_policy(spec: PolicySpec, scenario: Scenario, base_dir: Path = Path(".")) -> Policy:
    """The policy ``spec`` names, built for ``scenario``; bad parameters raise ``InputError``."""
    factory = policy_class(spec.name)
    return factory.build(dict(spec.params), PolicyContext.from_scenario(scenario, base_dir))


BALANCER_OF: dict[str, Literal["roundrobin", "leastconn"]] = {"lc": "leastconn"}
"""Policies that leave the choice to the balancer's own algorithm get it in their run."""


def scenario_for_policy(scenario: Scenario, spec: PolicySpec) -> Scenario:
    """The scenario one policy of a comparison runs: ``spec`` as its only policy, and the
    balancer algorithm the policy relies on (``lc``: least connections)."""
    update: dict[str, Any] = {"policy": spec, "compare": []}
    algorithm = BALANCER_OF.get(spec.name)
    if algorithm is not None:
        update["load_balancer"] = scenario.load_balancer.model_copy(update={"algorithm": algorithm})
    return scenario.model_copy(update=update)


__all__ = [
    "BALANCER_OF",
    "POLICIES",
    "PolicyContext",
    "build_policy",
    "policy_class",
    "scenario_for_policy",
]

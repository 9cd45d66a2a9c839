"""Policies: pure functions of a snapshot (plus their own memory). ``POLICIES`` is the one list
of them, by name; ``build_policy`` makes one from its name, parameters and the facts of its
deployment (``PolicyContext``); each policy class validates its own parameters in ``build``.

A policy knows nothing of scenario files: ``quell.scenario.policy`` builds the context from a
scenario, and a live deployment builds it from its own configuration."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from quell.core.environment import Policy
from quell.errors import InputError, Problem
from quell.policy.context import PolicyContext, ScalingLimits

ParamValue = float | int | str | bool
Params = Mapping[str, ParamValue | Mapping[str, ParamValue]]
"""A policy's parameters: scalars, or one level of sections (``defence``'s ``prima`` and
``ic2``)."""


class PolicyFactory(Protocol):
    params_model: type[BaseModel]
    """The model ``build`` validates ``params`` with (unknown keys refused); the generated
    scenario reference lists its fields."""

    @classmethod
    def build(cls, params: dict[str, Any], ctx: PolicyContext) -> Policy: ...


POLICIES: dict[str, str] = {
    "static": "quell.policy.static:StaticPolicy",
    "prima": "quell.policy.prima:PrimaPolicy",
    "rr": "quell.policy.baselines:RoundRobinPolicy",
    "lc": "quell.policy.baselines:LeastConnPolicy",
    "lsf": "quell.policy.baselines:LeastSeverityPolicy",
    "lr": "quell.policy.baselines:LeastResponsePolicy",
    "threshold": "quell.policy.baselines:ThresholdPolicy",
    "ic2": "quell.policy.ic2:Ic2Policy",
    "target": "quell.policy.target:TargetTrackingPolicy",
    "defence": "quell.policy.defence:DefencePolicy",
}
"""Policy name → ``module:Class``; imported only when asked for. The scenario schema takes its
list of names from here."""

BALANCER_OF: dict[str, Literal["roundrobin", "leastconn"]] = {
    "lc": "leastconn",
    "target": "leastconn",
}
"""Policies that leave the choice to the balancer's own algorithm get it in their run."""


def policy_class(name: str) -> type[PolicyFactory]:
    target = POLICIES.get(name)
    if target is None:
        known = ", ".join(POLICIES)
        raise InputError(
            "policy", [Problem("policy.name", f"unknown policy {name!r} (known: {known})")]
        )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def build_policy(name: str, params: Params, ctx: PolicyContext) -> Policy:
    """The policy called ``name`` with ``params``; bad parameters raise ``InputError``."""
    return policy_class(name).build(dict(params), ctx)


__all__ = [
    "BALANCER_OF",
    "POLICIES",
    "PolicyContext",
    "ScalingLimits",
    "build_policy",
    "policy_class",
]

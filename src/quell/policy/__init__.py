"""Policies: pure functions of a snapshot. ``build_policy`` makes one from a scenario's spec."""

from __future__ import annotations

from quell.core.environment import Policy
from quell.errors import InputError, Problem
from quell.policy.static import StaticPolicy
from quell.scenario.model import PolicySpec

POLICIES = {"static": StaticPolicy}


def build_policy(spec: PolicySpec) -> Policy:
    cls = POLICIES[spec.name]
    try:
        return cls(**spec.params)
    except TypeError as exc:
        raise InputError("policy", [Problem("policy.params", str(exc))]) from None


__all__ = ["POLICIES", "build_policy"]

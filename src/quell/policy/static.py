"""The ``static`` policy: change nothing; the load balancer's configured algorithm decides."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from quell.core.action import Decision
from quell.core.observation import Snapshot
from quell.policy.context import PolicyContext, parse_params


class _NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StaticPolicy:
    name = "static"
    params_model = _NoParams

    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> StaticPolicy:
        parse_params(cls.params_model, params, cls.name)
        return cls()

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision()

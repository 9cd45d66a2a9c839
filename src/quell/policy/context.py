"""What a policy may know besides snapshots: the target, the room to scale, paths. Built once
(from a scenario by ``quell.scenario.policy``, or from a live deployment's configuration);
policies never read files or clocks after construction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from quell.errors import InputError, Problem

P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class ScalingLimits:
    """Where and how far a policy may scale: ``hosts`` a new instance may go on, in order of
    preference (one instance each); ``boot_s`` from asking to serving; the fleet's bounds."""

    hosts: Sequence[str]
    boot_s: float = 30.0
    min_instances: int = 1
    max_instances: int | None = None


@dataclass(frozen=True)
class PolicyContext:
    """The fixed facts a policy is built with.

    ``target_rt_s`` is R_th (``None`` when none is set); ``scaling`` says where new instances
    may go (``None``: the policy may not scale); ``base_dir`` resolves relative
    paths in parameters (model bundles); ``interval_s`` is the control period.
    """

    interval_s: float
    target_rt_s: float | None = None
    scaling: ScalingLimits | None = None
    base_dir: Path = Path(".")
    initial_instances: Mapping[str, str] = field(default_factory=dict)
    """instance id → host id of the instances the run starts with."""
    lb_algorithm: str = "roundrobin"
    """The load balancer's own algorithm (``roundrobin`` or ``leastconn``)."""
    probe_period_s: float | None = None
    """How often each instance's probe reports (``None``: no probe runs)."""
    probe_util_pct: Mapping[str, float] = field(default_factory=dict)
    """host id → the share of an instance's U on that host that is its own probe (a network
    probe's bytes per period over the host's link, in per cent); hosts without a link rate are
    absent."""
    request_timeout_s: float | None = None
    """How long a user waits for an answer before giving up (the workload's ``timeout_s``): what
    a request left unanswered cost its user. ``None``: not known."""

    def require_target(self, policy: str) -> float:
        if self.target_rt_s is None:
            raise InputError(
                f"policy {policy}",
                [Problem("target.mean_rt_s", f"policy {policy!r} needs a response-time target")],
            )
        return self.target_rt_s


def parse_params(model: type[P], params: Mapping[str, object], policy: str) -> P:
    """Validate a policy's ``params`` against its pydantic model; every problem at once."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = ".".join(str(x) for x in e["loc"])
            msg = "unknown parameter" if e["type"] == "extra_forbidden" else e["msg"]
            problems.append(Problem(f"policy.params.{loc}" if loc else "policy.params", msg))
        raise InputError(f"policy {policy}", problems) from None

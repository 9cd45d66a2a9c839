"""What a policy may know besides snapshots: the scenario's target, scaling room and paths.
Built once from the scenario; policies never read files or clocks after construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from quell.errors import InputError, Problem
from quell.scenario.model import Scaling, Scenario

P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class PolicyContext:
    """The fixed facts a policy is built with.

    ``target_rt_s`` is R_th (``None`` when the scenario sets no target); ``scaling`` says where
    new instances may go (``None``: the policy may not scale); ``base_dir`` resolves relative
    paths in parameters (model bundles); ``interval_s`` is the control period.
    """

    interval_s: float
    target_rt_s: float | None = None
    scaling: Scaling | None = None
    base_dir: Path = Path(".")
    initial_instances: Mapping[str, str] = field(default_factory=dict)
    """instance id → host id of the instances the scenario starts with."""
    lb_algorithm: str = "roundrobin"
    """The load balancer's own algorithm (``roundrobin`` or ``leastconn``)."""
    probe_period_s: float | None = None
    """How often each instance's probe reports (``None``: the scenario runs no probe)."""
    probe_util_pct: Mapping[str, float] = field(default_factory=dict)
    """host id → the share of an instance's U on that host that is its own probe (a network
    probe's bytes per period over the host's link, in per cent); hosts without a link rate are
    absent."""

    @classmethod
    def from_scenario(cls, scenario: Scenario, base_dir: Path = Path(".")) -> PolicyContext:
        return cls(
            interval_s=scenario.interval_s,
            target_rt_s=scenario.target.mean_rt_s if scenario.target else None,
            scaling=scenario.scaling,
            base_dir=base_dir,
            initial_instances={i.id: i.host for i in scenario.instances},
            lb_algorithm=scenario.load_balancer.algorithm,
            probe_period_s=scenario.probe.period_s if scenario.probe else None,
            probe_util_pct=probe_util_pct(scenario),
        )

    def require_target(self, policy: str) -> float:
        if self.target_rt_s is None:
            raise InputError(
                f"policy {policy}",
                [Problem("target.mean_rt_s", f"policy {policy!r} needs a response-time target")],
            )
        return self.target_rt_s


def probe_util_pct(scenario: Scenario) -> dict[str, float]:
    """Per host, the per cent of an instance's U its network probe takes: ``size_bytes`` × 8
    bits once per ``period_s`` over the host's ``link_mbit``."""
    probe = scenario.probe
    if probe is None:
        return {}
    bits_per_s = probe.size_bytes * 8 / probe.period_s
    return {
        h.id: 100.0 * bits_per_s / (h.link_mbit * 1e6)
        for h in scenario.hosts
        if h.link_mbit is not None
    }


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

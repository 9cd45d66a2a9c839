"""The policy a scenario names, built for it: the facts it may know (target, scaling room,
probe share of each host's link) taken from the scenario, and the run each policy of a
comparison runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quell.core.environment import Policy
from quell.policy import BALANCER_OF, PolicyContext, ScalingLimits
from quell.policy import build_policy as build_named_policy
from quell.scenario.model import PolicySpec, Scenario


def policy_context(scenario: Scenario, base_dir: Path = Path(".")) -> PolicyContext:
    """What a policy built for ``scenario`` may know; relative paths resolve in ``base_dir``."""
    sc = scenario.scaling
    return PolicyContext(
        interval_s=scenario.interval_s,
        target_rt_s=scenario.target.mean_rt_s if scenario.target else None,
        scaling=None
        if sc is None
        else ScalingLimits(tuple(sc.hosts), sc.boot_s, sc.min_instances, sc.max_instances),
        base_dir=base_dir,
        initial_instances={i.id: i.host for i in scenario.instances},
        lb_algorithm=scenario.load_balancer.algorithm,
        probe_period_s=scenario.probe.period_s if scenario.probe else None,
        probe_util_pct=probe_util_pct(scenario),
        request_timeout_s=scenario.workload.timeout_s,
    )


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


def build_policy(spec: PolicySpec, scenario: Scenario, base_dir: Path = Path(".")) -> Policy:
    """The policy ``spec`` names, built for ``scenario``; bad parameters raise ``InputError``."""
    return build_named_policy(spec.name, spec.params, policy_context(scenario, base_dir))


def scenario_for_policy(scenario: Scenario, spec: PolicySpec) -> Scenario:
    """The scenario one policy of a comparison runs: ``spec`` as its only policy, and the
    balancer algorithm the policy relies on (``lc``: least connections)."""
    update: dict[str, Any] = {"policy": spec, "compare": []}
    algorithm = spec.balancer or BALANCER_OF.get(spec.name)
    if algorithm is not None:
        update["load_balancer"] = scenario.load_balancer.model_copy(update={"algorithm": algorithm})
    return scenario.model_copy(update=update)


def with_policy_balancer(scenario: Scenario) -> Scenario:
    """``scenario`` with the balancer algorithm its policy asks for (``policy.balancer``), so a
    single run uses the same balancer as that policy's run in a comparison."""
    algorithm = scenario.policy.balancer
    if algorithm is None or algorithm == scenario.load_balancer.algorithm:
        return scenario
    lb = scenario.load_balancer.model_copy(update={"algorithm": algorithm})
    return scenario.model_copy(update={"load_balancer": lb})

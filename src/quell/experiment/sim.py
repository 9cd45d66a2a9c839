"""A simulator run: the scenario in virtual time, into a run directory like a lab run's."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from quell.experiment.run import (
    ProgressFn,
    new_run_dir,
    no_progress,
    prepare_run_dir,
    run_scenario,
)
from quell.scenario.model import Scenario
from quell.scenario.policy import build_policy, with_policy_balancer


def run_sim(
    scenario: Scenario,
    scenario_path: Path,
    runs_dir: Path,
    progress: Callable[[], AbstractContextManager[ProgressFn]] = no_progress,
) -> dict[str, Any]:
    """Build the policy and the simulator (every problem reported before a run directory
    exists), run, and close both the simulator and the run store; returns the summary, whose
    ``run_dir`` names the run directory."""
    from quell.sim.environment import SimEnvironment

    scenario = with_policy_balancer(scenario)
    base = scenario_path.parent
    policy = build_policy(scenario.policy, scenario, base)
    env = SimEnvironment(scenario, base_dir=base)
    run_dir = new_run_dir(runs_dir, scenario, env.name)
    store = prepare_run_dir(run_dir, scenario, scenario_path, env.name)
    try:
        with progress() as report:
            return run_scenario(scenario, env, policy, store, report)
    finally:
        env.close()
        store.close()

"""The lab's interference smoke scenario, unchanged, in the simulator: the same effect must show
(the lab half of this check runs in tests/lab/test_smoke.py with the same assertion)."""

from __future__ import annotations

from pathlib import Path

from quell.experiment.run import prepare_run_dir, run_scenario
from quell.scenario import load_scenario
from quell.scenario.policy import build_policy
from quell.sim.environment import SimEnvironment
from tests.effects import assert_cohosted_instance_slows_alone

ROOT = Path(__file__).resolve().parents[2]


def test_interference_smoke_shows_the_lab_effect_in_the_simulator(tmp_path: Path) -> None:
    path = ROOT / "scenarios" / "interference-smoke.yaml"
    scenario = load_scenario(path)
    store = prepare_run_dir(tmp_path / "run", scenario, path, "sim")
    env = SimEnvironment(scenario, path.parent)
    summary = run_scenario(scenario, env, build_policy(scenario.policy, scenario), store)
    store.close()
    ratio, _ = assert_cohosted_instance_slows_alone(summary)
    assert summary["environment"] == "sim"
    assert ratio < 20.0  # a link shared with 2 bulk streams slows, it does not stop

"""The seam stays free of the file format: ``quell.core`` knows no scenario, and the scenario's
timed events reach an environment through the experiment runner, only when it can stage them."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from quell.core.action import Action
from quell.core.clock import VirtualClock
from quell.core.observation import Observation, Snapshot
from quell.experiment.run import scenario_loop
from quell.policy.static import StaticPolicy
from quell.scenario.model import Event
from tests.sim.build import build_scenario

CORE = Path(__file__).resolve().parents[2] / "src" / "quell" / "core"


def test_core_imports_nothing_of_quell_but_errors_and_itself() -> None:
    for path in CORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("quell"):
                assert node.module == "quell.errors" or node.module.startswith("quell.core"), (
                    path.name,
                    node.module,
                )


class Plain:
    """An environment that cannot stage events (like a live deployment)."""

    name = "plain"

    def __init__(self) -> None:
        self.clock = VirtualClock()

    def observe(self) -> Snapshot:
        t = self.clock.now()
        obs = Observation(time_s=t, instance_id="i0", interval_s=10.0)
        return Snapshot(t, self.name, {"i0": obs})

    def apply(self, actions: Sequence[Action]) -> None:
        pass

    def close(self) -> None:
        pass


class Stage(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.staged: list[tuple[float, str | None]] = []

    def trigger(self, event: Event) -> None:
        self.staged.append((self.clock.now(), event.phase))


def test_events_reach_environments_that_stage_them_and_are_recorded_for_all() -> None:
    scenario = build_scenario(events=[{"at_s": 30, "phase": "busy"}, {"at_s": 70, "phase": "calm"}])
    for env in (Stage(), Plain()):
        seen: list[Event] = []
        report = scenario_loop(scenario, env, StaticPolicy(), on_event=seen.append).run()
        assert report.ticks == 10
        assert [(e.at_s, e.phase) for e in seen] == [(30.0, "busy"), (70.0, "calm")]
        if isinstance(env, Stage):
            assert env.staged == [(30.0, "busy"), (70.0, "calm")]

"""A recorded run decided again: the policy its scenario names, with parameters changed as asked,
over the snapshots the run stored, without acting.

A policy is pure (snapshot in, decision out), so with nothing changed every decision comes back
as recorded: that is the first thing a replay reports (``same_decisions`` of ``intervals``).
With a change, the replay goes on up to the first interval in which the replayed policy would
have added or removed an instance where the recorded one did not, or the other way round
(``diverged_at_s``), and stops there: from then on the stored snapshots show the fleet the
recorded policy kept, not the one the replayed policy would have had, and a policy deciding on
another policy's fleet says nothing worth reading. Weights do not count as a difference (a
changed parameter moves them in every interval). An interval the live controller held (the
recorded policy was not asked) is skipped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quell.core.action import SCALING_TYPES
from quell.errors import InputError, Problem
from quell.experiment.run import closing_phase
from quell.scenario import parse_scenario
from quell.scenario.policy import build_policy
from quell.store.run import RunStore, action_dict

HELD = "hold:"
"""How the live controller's reason starts where it held the fleet without asking the policy."""


@dataclass(frozen=True)
class Step:
    """An interval in which the recorded or the replayed policy added or removed an instance."""

    time_s: float
    phase: str
    recorded: tuple[dict[str, Any], ...]
    replayed: tuple[dict[str, Any], ...]
    recorded_reason: str
    replayed_reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "phase": self.phase,
            "recorded": list(self.recorded),
            "replayed": list(self.replayed),
            "recorded_reason": self.recorded_reason,
            "replayed_reason": self.replayed_reason,
        }


@dataclass
class Replay:
    """What a replay found (see the module)."""

    run_dir: Path
    policy: str
    changes: dict[str, Any]
    intervals: int = 0
    """Intervals decided again (up to and with the first difference)."""
    recorded_intervals: int = 0
    """Intervals the recorded policy decided on."""
    same_decisions: int = 0
    diverged_at_s: float | None = None
    steps: list[Step] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)

    def scaling_by_phase(self) -> dict[str, dict[str, int]]:
        """Per phase, the scaling actions recorded and replayed over the intervals replayed."""
        out = {p: {"recorded": 0, "replayed": 0} for p in self.phases}
        for s in self.steps:
            row = out.setdefault(s.phase, {"recorded": 0, "replayed": 0})
            row["recorded"] += len(s.recorded)
            row["replayed"] += len(s.replayed)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "policy": self.policy,
            "changes": self.changes,
            "intervals": self.intervals,
            "recorded_intervals": self.recorded_intervals,
            "same_decisions": self.same_decisions,
            "diverged_at_s": self.diverged_at_s,
            "scaling_by_phase": self.scaling_by_phase(),
            "steps": [s.as_dict() for s in self.steps],
        }


def parse_changes(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` items as parameters, each value read as YAML (``2``, ``0.1``, ``true``,
    ``median``); every malformed item is reported at once."""
    changes: dict[str, Any] = {}
    problems = []
    for k, item in enumerate(items):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(Problem(f"--set[{k}]", f"{item!r} is not key=value"))
            continue
        try:
            changes[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            problems.append(Problem(f"--set {key}", f"unreadable value {text!r}: {exc}"))
    if problems:
        raise InputError("--set", problems)
    return changes


def _scaling(actions: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(dict(a) for a in actions if a.get("type") in SCALING_TYPES)


def replay_run(
    run_dir: Path, changes: Mapping[str, Any] | None = None, base_dir: Path | None = None
) -> Replay:
    """Decide again on ``run_dir``'s snapshots with its policy's parameters updated by
    ``changes``. Relative paths in the parameters (model files) resolve in ``base_dir``, else
    the directory the run recorded (``scenario_dir``), else the run directory."""
    changes = dict(changes or {})
    with RunStore.open(run_dir) as store:
        meta = store.meta()
        raw = meta.get("scenario_json")
        if not isinstance(raw, dict):
            raise InputError(str(run_dir), [Problem("meta", "the run recorded no scenario")])
        scenario = parse_scenario(raw)
        recorded_dir = meta.get("scenario_dir")
        base = base_dir or (Path(recorded_dir) if isinstance(recorded_dir, str) else run_dir)
        spec = scenario.policy
        spec = spec.model_copy(update={"params": {**spec.params, **changes}})
        policy = build_policy(spec, scenario, base)
        phases = scenario.phases()
        result = Replay(run_dir, spec.name, changes, phases=[p for p, _, _ in phases])

        recorded: dict[float, tuple[str, list[dict[str, Any]]]] = {}
        for t, _, reason, actions in store.decisions():
            recorded.setdefault(t, (reason, actions))
        snapshots = [
            snap
            for snap in store.snapshots(str(meta.get("environment", "")))
            if not recorded.get(snap.time_s, ("", []))[0].startswith(HELD)
        ]
        result.recorded_intervals = len(snapshots)
        for snap in snapshots:
            was_reason, was_actions = recorded.get(snap.time_s, ("", []))
            try:
                decision = policy.decide(snap)
                reason = decision.reason
                actions = [action_dict(a) for a in decision.actions]
            except Exception as exc:  # as in the control loop: a failed cycle, never fatal
                reason, actions = f"cycle failed: {type(exc).__name__}: {exc}", []
            result.intervals += 1
            result.same_decisions += reason == was_reason and actions == was_actions
            was, now = _scaling(was_actions), _scaling(actions)
            if was or now:
                phase = closing_phase(phases, snap.time_s)
                step = Step(snap.time_s, phase, was, now, was_reason, reason)
                result.steps.append(step)
            if was != now:
                result.diverged_at_s = snap.time_s
                break
    return result

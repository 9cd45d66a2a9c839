"""``quell ic2 evaluate``: a detector scored on runs of a scenario against the labels its
antagonists' events give (``quell.studies.ic2.campaign.score_runs``). The scenario is run
first unless recorded runs of it are given; each run's scores are written beside it
(``ic2-evaluation.json``), and runs given together are also scored as one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from quell.core.files import write_json
from quell.errors import InputError, Problem
from quell.experiment.run import ProgressBar, no_progress
from quell.scenario.model import Scenario
from quell.store.run import RunStore

EVALUATION_FILE = "ic2-evaluation.json"

SCORE_KEYS = (
    "recall",
    "precision",
    "miss_rate",
    "detect_latency_s",
    "clear_latency_s",
    "detect_events",
    "detect_missed",
    "samples",
)
"""What the pooled document gives of each run when several are scored together."""


@dataclass(frozen=True)
class Evaluation:
    """Each run's document (as written beside it) and, for several runs, the pooled one."""

    runs: list[dict[str, Any]]
    pooled: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The pooled document when there is one, else the one run's."""
        return self.pooled if self.pooled is not None else self.runs[0]


def model_path(model: Path) -> Path:
    """A detector bundle, or the ``detector.json`` of a directory."""
    return model / "detector.json" if model.is_dir() else model


def _with_policy(scenario: Scenario, policy: str | None) -> Scenario:
    if policy is None:
        return scenario
    from pydantic import ValidationError

    from quell.core.schema import validation_problems
    from quell.scenario.model import PolicySpec

    try:
        spec = PolicySpec(name=policy)
    except ValidationError as err:
        raise InputError("--policy", validation_problems(err)) from None
    return scenario.model_copy(update={"policy": spec, "compare": []})


def _check_recorded(
    stores: Sequence[RunStore], runs: Sequence[Path], scenario: Scenario, path: Path
) -> None:
    """Every run is one of ``scenario`` (its recorded scenario is the same in every key)."""
    mine = scenario.model_dump(mode="json")
    for r, store in zip(runs, stores, strict=True):
        recorded = store.meta().get("scenario_json")
        if recorded != mine:
            keys = sorted(
                k for k, v in mine.items() if not isinstance(recorded, dict) or recorded.get(k) != v
            )
            raise InputError(
                str(r), [Problem("", f"is not a run of {path}: they differ in {', '.join(keys)}")]
            )


def evaluate(
    path: Path,
    model: Path,
    env: str = "lab",
    runs: Sequence[Path] = (),
    states: int = 5,
    policy: str | None = None,
    runs_dir: Path = Path("runs"),
    progress: ProgressBar = lambda t, what: no_progress(),
    say: Callable[[str], None] = lambda message: None,
) -> Evaluation:
    """Score the detector ``model`` on ``runs`` of the scenario at ``path`` (run it in ``env``
    with ``policy`` instead of its own when none is given): recall, precision and miss rate of
    class I per interval, and the median detection and clearing latency of the ``states``-state
    machine. Each run's document is written to its ``ic2-evaluation.json`` (and said)."""
    from quell.detect.bundle import load_detector
    from quell.scenario import load_scenario
    from quell.studies.ic2.campaign import interfered_instances, run_fn, score_runs

    problems = []
    if states not in (2, 5):
        problems.append(Problem("--states", f"must be 2 or 5, got {states}"))
    if env not in ("lab", "sim"):
        problems.append(Problem("--env", f"must be lab or sim, got {env!r}"))
    if problems:
        raise InputError("quell ic2 evaluate", problems)
    n_states: Literal[2, 5] = 5 if states == 5 else 2
    scenario = _with_policy(load_scenario(path), policy)
    bundle_path = model_path(model)
    bundle = load_detector(bundle_path)
    if not interfered_instances(scenario):
        raise InputError(
            str(path), [Problem("events", "start no antagonist on an instance's host")]
        )
    if not runs:
        run = run_fn(env)
        summary = run(
            scenario, path, runs_dir, lambda: progress(scenario.duration_s, scenario.name)
        )
        runs = [Path(summary["run_dir"])]
    head = {
        "scenario": scenario.name,
        "model": str(bundle_path),
        "trained_on": bundle.meta.model_dump(mode="json"),
    }
    docs: list[dict[str, Any]] = []
    stores: list[RunStore] = []
    try:
        for r in runs:
            stores.append(RunStore.open(r))
        _check_recorded(stores, runs, scenario, path)
        scored = score_runs(
            stores, scenario, bundle.detector, n_states, bundle.data.training.transient_s
        )
        for r, store, result in zip(runs, stores, scored.pop("runs"), strict=True):
            machine = store.meta().get("machine")  # lab runs say what they were measured on
            doc = {
                "scenario": scenario.name,
                "run_dir": str(r),
                "model": head["model"],
                "trained_on": head["trained_on"],
                **result,
                **({"machine": machine} if machine is not None else {}),
            }
            write_json(r / EVALUATION_FILE, doc)
            say(f"evaluation written to {r / EVALUATION_FILE}")
            docs.append(doc)
    finally:
        for store in stores:
            store.close()
    if len(runs) == 1:
        return Evaluation(docs)
    pooled = {
        "scenario": scenario.name,
        "run_dirs": [str(r) for r in runs],
        "model": head["model"],
        "trained_on": head["trained_on"],
        **scored,
        "runs": {d["run_dir"]: {k: d[k] for k in SCORE_KEYS} for d in docs},
    }
    return Evaluation(docs, pooled)

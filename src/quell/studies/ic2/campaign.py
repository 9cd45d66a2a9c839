"""IC2 on real runs: train a detector by the three-phase bootstrap from scenario runs in the
lab or the simulator, and score a detector on a run against its antagonist timeline.

**Training** (``train``). A spec file names the scenarios to learn from (each with antagonists
started and stopped by its ``events``), where to run them and how to grow the tree. Each phase
runs every scenario ``runs`` times (run k with the scenario's seed + k): phase I with the scenario's servers as
configured and no policy acting (``static``: IC2 off), phases II and III with the ``ic2``
policy detecting with the last phase's tree. Each run's intervals of every instance on a host
that runs an antagonist are labelled from the scenario's events (``quell.detect.labels``; the
run's first ``transient_s`` are T too, the service warming up) and kept; ``quell.detect.dataset.bootstrap`` trains the three trees.

Everything lands in the output directory as it is measured, so a campaign stopped part-way
resumes where it stopped: ``spec.json`` (the spec and the scenarios as read; a directory of
another spec is refused), per phase ``phase-<P>/runs/`` (the run directories, kept whole),
``phase-<P>/<scenario>-<k>.npz`` (one run's labelled intervals: written last; a run without
it is read again from its run directory if that run finished, run again otherwise) and ``phase-<P>/detector.json`` (the phase's tree, which the next
phase's runs load). The final tree is ``detector.json``, with ``training.json`` beside it.

**Scoring** (``score_run``): a detector's verdicts on a recorded run's interfered instances,
against the labels its scenario's events give; ``quell.studies.ic2.scoring`` computes the
metrics.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from quell.core.files import load_json, load_yaml, write_json
from quell.core.schema import Name, StrictModel, validation_problems
from quell.detect.bundle import DetectorBundle, DetectorMeta, build_detector_bundle
from quell.detect.dataset import (
    Bootstrap,
    Dataset,
    FinalTraining,
    Phase,
    bootstrap,
    concat,
    from_run,
)
from quell.detect.evaluate import interval_metrics
from quell.detect.features import DEFAULT_FEATURES, check_features, feature_matrix
from quell.detect.labels import TRANSIENT_S, Timeline, label_intervals
from quell.detect.tree import CostMatrix, CostSensitiveTree
from quell.errors import InputError, Problem
from quell.experiment.run import ProgressBar, ProgressFn, no_progress
from quell.policy.ic2 import Ic2Params
from quell.scenario import load_scenario
from quell.scenario.model import PolicyParams, PolicySpec, Scenario
from quell.store.run import RunStore
from quell.studies.ic2.scoring import score

RunFn = Callable[
    [Scenario, Path, Path, Callable[[], AbstractContextManager[ProgressFn]]], dict[str, Any]
]
"""Runs a scenario (scenario, its file, the runs directory, the progress display) and returns
its summary, whose ``run_dir`` names the run directory: ``run_sim`` or ``run_lab``."""


def run_fn(env: str) -> RunFn:
    """The runner of ``env``: ``run_sim`` (the event core loaded) or ``run_lab``."""
    if env == "sim":
        from quell.experiment.sim import run_sim
        from quell.sim.core import load_event_core

        load_event_core()
        return run_sim
    if env == "lab":
        from quell.experiment.lab import run_lab

        return run_lab
    raise InputError("--env", [Problem("", f"must be lab or sim, got {env!r}")])


def recorded_scenario(store: RunStore, run_dir: Path) -> dict[str, Any]:
    """The scenario a recorded run ran, as its run store keeps it."""
    recorded = store.meta().get("scenario_json")
    if not isinstance(recorded, dict):
        raise InputError(str(run_dir), [Problem("meta.scenario_json", "missing")])
    return recorded


PHASES: tuple[Phase, ...] = ("I", "II", "III")
SPEC_FORMAT = "quell.ic2.train"


class CostSpec(StrictModel):
    """The paper's a : b : c and the cost of predicting T (``quell.detect.tree.CostMatrix``)."""

    ni_as_i: Annotated[float, Field(ge=0)] = 5.0
    transient_as_other: Annotated[float, Field(ge=0)] = 1.0
    i_as_ni: Annotated[float, Field(ge=0)] = 10.0
    to_transient: Annotated[float, Field(ge=0)] = 1.0

    def matrix(self) -> CostMatrix:
        return CostMatrix(self.ni_as_i, self.transient_as_other, self.i_as_ni, self.to_transient)


class TrainSpec(StrictModel):
    """``quell ic2 train``'s spec file (module docstring)."""

    name: Name
    description: str = ""
    environment: Literal["lab", "sim"] = "sim"
    workload: Annotated[str, Field(min_length=1, max_length=200)]
    """The workload the scenarios load the service with; recorded in the bundle, and the
    ``ic2`` policy can refuse a bundle of another."""
    scenarios: Annotated[list[str], Field(min_length=1, max_length=50)]
    """Scenario files to learn from, relative to the spec file."""
    runs: Annotated[int, Field(ge=1, le=100)] = 1
    """Runs of each scenario in each phase: run k with the scenario's seed + k."""
    seed: Annotated[int, Field(ge=0)] = 0
    """The trees' random state and the draw of phase II's half-and-half training set."""
    features: Annotated[
        list[str], Field(min_length=1, default_factory=lambda: list(DEFAULT_FEATURES))
    ]
    cost: CostSpec = CostSpec()
    cost_method: Literal["weights", "expected"] = "weights"
    max_depth: Annotated[int, Field(ge=1, le=30)] = 6
    min_samples_leaf: Annotated[int, Field(ge=1, le=100_000)] = 10
    transient_s: Annotated[float, Field(gt=0, le=3600)] = TRANSIENT_S
    final_training: FinalTraining = "phase_iii"
    """What the final tree learns from: phase III's runs (the paper's) or ``all_phases``.
    The runs do not depend on it, so a finished campaign can be trained again either way."""
    window_intervals: Annotated[int, Field(ge=1, le=60)] = 1
    """The detector reads each feature as its median over this many intervals
    (``quell.detect.features``); 1: each interval alone, as the paper."""
    ic2: dict[str, float | int | str | bool]
    """The ``ic2`` policy's parameters in phases II and III, but ``detector``, which the
    campaign sets to the last phase's tree (``quell.policy.ic2.Ic2Params``)."""


@dataclass(frozen=True)
class Campaign:
    spec: TrainSpec
    path: Path
    scenarios: tuple[tuple[Path, Scenario], ...]

    def make_tree(
        self,
        cost: CostMatrix | None = None,
        cost_method: Literal["weights", "expected"] | None = None,
        max_depth: int | None = None,
        min_samples_leaf: int | None = None,
    ) -> CostSensitiveTree:
        """An unfitted tree as the spec grows it, but for what is given here."""
        spec = self.spec
        return CostSensitiveTree(
            spec.features,
            spec.cost.matrix() if cost is None else cost,
            spec.cost_method if cost_method is None else cost_method,
            spec.max_depth if max_depth is None else max_depth,
            spec.min_samples_leaf if min_samples_leaf is None else min_samples_leaf,
            random_state=spec.seed,
            window_intervals=spec.window_intervals,
        )

    def fingerprint(self) -> dict[str, Any]:
        """What the campaign's data depends on: the spec and each scenario as read. Not
        ``final_training`` (the runs do not depend on it), nor ``window_intervals`` at 1, so
        that a campaign recorded before the field existed still resumes."""
        spec = self.spec.model_dump(mode="json", exclude={"final_training"})
        if spec["window_intervals"] == 1:
            del spec["window_intervals"]
        return {
            "format": SPEC_FORMAT,
            "spec": spec,
            "scenarios": {
                str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p, _ in self.scenarios
            },
        }


def load_campaign(path: Path) -> Campaign:
    """Read and check a spec file and every scenario it names; every problem at once."""
    source = str(path)
    data = load_yaml(path, "file")
    if not isinstance(data, dict):
        raise InputError(source, [Problem("", "a spec must be a mapping of keys to values")])
    try:
        spec = TrainSpec.model_validate(data)
    except ValidationError as err:
        raise InputError(source, validation_problems(err)) from None
    problems: list[Problem] = []
    try:
        check_features(spec.features, "features")
    except InputError as exc:
        problems += exc.problems
    if "detector" in spec.ic2:
        problems.append(Problem("ic2.detector", "set by the campaign: leave it out"))
    try:
        Ic2Params.model_validate({**spec.ic2, "detector": "(each phase's)"})
    except ValidationError as err:
        problems += validation_problems(err, "ic2")
    scenarios: list[tuple[Path, Scenario]] = []
    for k, name in enumerate(spec.scenarios):
        where = f"scenarios[{k}]"
        p = (path.parent / name).resolve()
        try:
            sc = load_scenario(p)
        except InputError as exc:
            problems += [Problem(where, f"{exc.source}: {q}") for q in exc.problems]
            continue
        if not any(interfered_instances(sc).values()):
            problems.append(
                Problem(where, f"{name} starts no antagonist on an instance's host: no I class")
            )
        scenarios.append((p, sc))
    stems = [p.stem for p, _ in scenarios]
    problems += [
        Problem("scenarios", f"two scenarios named {s!r}: their data would share files")
        for s in sorted({s for s in stems if stems.count(s) > 1})
    ]
    if problems:
        raise InputError(source, problems)
    return Campaign(spec, path, tuple(scenarios))


# -- labels from a scenario ----------------------------------------------------------------------
def interfered_instances(scenario: Scenario) -> dict[str, Timeline]:
    """Per instance, when antagonists on its host ran, from the scenario's events; only
    instances whose host runs an antagonist at some point."""
    out: dict[str, Timeline] = {}
    hosts = {a.id: a.host for a in scenario.antagonists}
    for inst in scenario.instances:
        mine = {aid for aid, h in hosts.items() if h == inst.host}
        events: list[tuple[float, str, Literal["start", "stop"]]] = []
        for ev in scenario.events:
            events += [(ev.at_s, a, "start") for a in ev.start if a in mine]
            events += [(ev.at_s, a, "stop") for a in ev.stop if a in mine]
        timeline = Timeline.from_events(events)
        if timeline.periods:
            out[inst.id] = timeline
    return out


def run_dataset(
    store: RunStore,
    scenario: Scenario,
    features: tuple[str, ...],
    run: int,
    transient_s: float,
    window_intervals: int = 1,
) -> Dataset:
    """The labelled intervals of every interfered instance of a recorded run (each row over
    ``window_intervals``: ``from_run``)."""
    parts = [
        from_run(
            store.observations(iid),
            tl,
            features,
            run,
            scenario.name,
            transient_s,
            transient_s,
            window_intervals,
        )
        for iid, tl in interfered_instances(scenario).items()
    ]
    return concat(parts, scenario.name)


def _save(path: Path, d: Dataset) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, x=d.x, y=d.y, time_s=d.time_s, run=d.run, features=np.array(d.features))
    tmp.replace(path)


def _load(path: Path, source: str) -> Dataset:
    with np.load(path) as f:
        return Dataset(
            tuple(str(s) for s in f["features"]),
            f["x"],
            f["y"],
            f["time_s"],
            f["run"],
            source,
        )


# -- training ------------------------------------------------------------------------------------
def finished_run(runs_dir: Path, scenario: Scenario) -> Path | None:
    """A run of exactly ``scenario`` in ``runs_dir`` that ran to its end (its summary says
    complete), if there is one: its data is kept and read again rather than measured again
    (after a stop between the run's end and its data's, or to label it anew)."""
    if not runs_dir.is_dir():
        return None
    want = scenario.model_dump(mode="json")
    for d in sorted(runs_dir.iterdir()):
        summary = d / "summary.json"
        if not summary.is_file():
            continue
        try:
            if not json.loads(summary.read_text()).get("complete"):
                continue
            with RunStore.open(d) as store:
                if store.meta().get("scenario_json") == want:
                    return d
        except (OSError, ValueError, InputError):
            continue
    return None


Progress = Callable[[float, str], None]
"""(seconds of runs done in the whole campaign, what runs now)."""


@dataclass
class Trainer:
    campaign: Campaign
    out: Path
    run_fn: RunFn
    progress: Progress = lambda done_s, what: None

    @property
    def total_s(self) -> float:
        """Seconds of runs in all three phases."""
        spec = self.campaign.spec
        return 3 * spec.runs * sum(sc.duration_s for _, sc in self.campaign.scenarios)

    def prepare(self) -> None:
        """Create the output directory, or check that the one there is this campaign's."""
        mark = self.out / "spec.json"
        mine = self.campaign.fingerprint()
        if mark.exists():
            theirs = load_json(mark, "campaign spec record")
            if theirs != mine:
                raise InputError(
                    str(self.out),
                    [
                        Problem(
                            "spec.json",
                            "holds a campaign of another spec or other scenarios: resume it"
                            " with the spec it was started with, or train into another"
                            " directory",
                        )
                    ],
                )
        else:
            self.out.mkdir(parents=True, exist_ok=True)
            write_json(mark, mine)

    def _bundle(self, tree: CostSensitiveTree, result: Bootstrap | None) -> DetectorBundle:
        spec = self.campaign.spec
        meta = DetectorMeta(
            workload=spec.workload,
            environment=spec.environment,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            source=f"quell ic2 train {self.campaign.path.name}: {', '.join(spec.scenarios)}",
        )
        phases = result.provenance() if result is not None else []
        return build_detector_bundle(tree, meta, phases, spec.transient_s)

    def phase_data(self, phase: Phase, tree: CostSensitiveTree | None) -> Dataset:
        """Every run of the phase: reused where its data is on disk, run otherwise."""
        spec = self.campaign.spec
        pdir = self.out / f"phase-{phase}"
        pdir.mkdir(parents=True, exist_ok=True)
        if phase == "I":
            policy = PolicySpec(name="static")
        else:
            assert tree is not None
            prev = PHASES[PHASES.index(phase) - 1]
            bundle_path = self.out / f"phase-{prev}" / "detector.json"
            self._bundle(tree, None).save(bundle_path)
            params: PolicyParams = {
                **spec.ic2,
                "detector": str(bundle_path),
                "workload": spec.workload,
            }
            policy = PolicySpec(name="ic2", params=params)
        parts: list[Dataset] = []
        done_s = PHASES.index(phase) * self.total_s / 3
        for path, sc in self.campaign.scenarios:
            for k in range(spec.runs):
                data_path = pdir / f"{path.stem}-{k}.npz"
                label = f"phase {phase} {path.stem} #{k}"
                if not data_path.exists():
                    self._run(path, sc, k, policy, pdir / "runs", data_path, done_s, label)
                parts.append(_load(data_path, label))
                done_s += sc.duration_s
                self.progress(done_s, label)
        return concat(parts, f"phase {phase}")

    def _run(
        self,
        path: Path,
        sc: Scenario,
        k: int,
        policy: PolicySpec,
        runs_dir: Path,
        data_path: Path,
        done_s: float,
        label: str,
    ) -> None:
        spec = self.campaign.spec
        scenario = sc.model_copy(update={"seed": sc.seed + k, "policy": policy, "compare": []})
        run_dir = finished_run(runs_dir, scenario)
        if run_dir is None:

            @contextmanager
            def progress() -> Iterator[ProgressFn]:
                yield lambda t, _phase: self.progress(done_s + t, label)

            run_dir = Path(self.run_fn(scenario, path, runs_dir, progress)["run_dir"])
        with RunStore.open(run_dir) as store:
            d = run_dataset(
                store, scenario, tuple(spec.features), k, spec.transient_s, spec.window_intervals
            )
        _save(data_path, d)

    def train(self) -> DetectorBundle:
        """The three phases (module docstring); the final bundle, also written to
        ``detector.json``, with ``training.json`` beside it."""
        self.prepare()
        spec = self.campaign.spec
        result = bootstrap(self.phase_data, self.campaign.make_tree, spec.seed, spec.final_training)
        bundle = self._bundle(result.detector, result)
        self._bundle(result.phases[-1].detector, None).save(self.out / "phase-III/detector.json")
        bundle.save(self.out / "detector.json")
        report = {
            "spec": str(self.campaign.path),
            "environment": self.campaign.spec.environment,
            "phases": result.provenance(),
            "in_sample": {
                p.phase: score(p.trained_on.y, p.detector.predict(p.trained_on.x), [])
                for p in result.phases
            },
        }
        write_json(self.out / "training.json", report)
        return bundle


# -- scoring a recorded run ----------------------------------------------------------------------
def score_run(
    store: RunStore,
    scenario: Scenario,
    tree: CostSensitiveTree,
    states: Literal[2, 5] = 5,
    transient_s: float = TRANSIENT_S,
) -> dict[str, Any]:
    """``tree``'s verdicts on every interfered instance of a recorded run, scored against
    the labels of the scenario's events: the metrics over all of them, and per instance."""
    one: dict[str, Any] = score_runs([store], scenario, tree, states, transient_s)["runs"][0]
    return one


Verdicts = tuple[list[int], list[int], list[tuple[list[float], list[int], Timeline]]]
"""Labels, verdicts, and each run's (interval ends, verdicts, timeline): what ``score`` reads."""


def _scored(
    v: Verdicts, per_instance: dict[str, Verdicts], states: Literal[2, 5]
) -> dict[str, Any]:
    return {
        **score(v[0], v[1], v[2], states),
        "states": states,
        "instances": {iid: score(*x, states) for iid, x in per_instance.items()},
    }


def score_runs(
    stores: Sequence[RunStore],
    scenario: Scenario,
    tree: CostSensitiveTree,
    states: Literal[2, 5] = 5,
    transient_s: float = TRANSIENT_S,
) -> dict[str, Any]:
    """``score_run`` over several recorded runs of ``scenario`` together: the metrics over
    every interfered instance of every run (each run on its own clock) and per instance over
    the runs, and under ``runs`` each run's own ``score_run``; the tree reads each run once."""
    timelines = interfered_instances(scenario)
    if not timelines:
        raise InputError(
            scenario.name,
            [Problem("events", "start no antagonist on an instance's host: nothing to detect")],
        )
    every: Verdicts = ([], [], [])
    every_instance: dict[str, Verdicts] = {}
    per_run = []
    for store in stores:
        run: Verdicts = ([], [], [])
        run_instance: dict[str, Verdicts] = {}
        for iid, tl in timelines.items():
            obs = store.observations(iid)
            end = np.array([o.time_s for o in obs], dtype=float)
            width = np.array([o.interval_s for o in obs], dtype=float)
            truth = label_intervals(end, width, tl, transient_s, transient_s).tolist()
            pred = tree.predict(feature_matrix(obs, tree.features, tree.window_intervals)).tolist()
            clock = (end.tolist(), pred, tl)
            run_instance[iid] = (truth, pred, [clock])
            for acc in (run, every, every_instance.setdefault(iid, ([], [], []))):
                acc[0].extend(truth)
                acc[1].extend(pred)
                acc[2].append(clock)
        per_run.append(_scored(run, run_instance, states))
    return _scored(every, every_instance, states) | {"runs": per_run}


# -- the cost ablation on a campaign's data ------------------------------------------------------
ABLATION: tuple[tuple[str, CostMatrix, Literal["weights", "expected"]], ...] = (
    ("1:1:1", CostMatrix.uniform(), "weights"),
    ("5:1:10", CostMatrix(), "weights"),
    ("5:1:10", CostMatrix(), "expected"),
)
"""The paper's comparison (1 : 1 : 1 against its 5 : 1 : 10), the latter applied as sample
weights and as minimum expected cost."""


def final_data(campaign: Campaign, out: Path) -> Dataset:
    """The labelled intervals a finished campaign's final tree was trained on: its last
    phase's, or every phase's (``final_training: all_phases``)."""
    if campaign.spec.final_training == "all_phases":
        return concat(collected_runs(campaign, out), "phases I, II and III")
    parts = []
    for path, _ in campaign.scenarios:
        for k in range(campaign.spec.runs):
            f = out / "phase-III" / f"{path.stem}-{k}.npz"
            if not f.exists():
                raise InputError(
                    str(out), [Problem(f.name, "missing: finish the campaign (quell ic2 train)")]
                )
            parts.append(_load(f, f.stem))
    return concat(parts, "phase III")


def ablation(
    campaign: Campaign,
    out: Path,
    runs: list[tuple[RunStore, Scenario]],
    states: Literal[2, 5] = 5,
) -> list[dict[str, Any]]:
    """Trees grown on the data the final tree learned from (``final_data``) with each cost of
    ``ABLATION``, scored on each recorded run (``score_run``): one row per (run, cost,
    method)."""
    data = final_data(campaign, out)
    spec = campaign.spec
    rows = []
    for label, cost, method in ABLATION:
        tree = campaign.make_tree(cost, method).fit(data.x, data.y)
        for store, scenario in runs:
            result = score_run(store, scenario, tree, states, spec.transient_s)
            result.pop("instances")
            rows.append({"test": scenario.name, "cost": label, "method": method, **result})
    return rows


# -- the tree's size by leave-one-run-out -------------------------------------------------------
SIZES_DEPTH: tuple[int, ...] = (2, 3, 4, 5, 6)
SIZES_LEAF: tuple[int, ...] = (5, 10, 20, 30, 50)


def collected_runs(campaign: Campaign, out: Path) -> list[Dataset]:
    """Every run a finished campaign collected, of every phase, one dataset each."""
    parts = []
    for phase in PHASES:
        for path, _ in campaign.scenarios:
            for k in range(campaign.spec.runs):
                f = out / f"phase-{phase}" / f"{path.stem}-{k}.npz"
                if not f.exists():
                    raise InputError(
                        str(out),
                        [Problem(f"phase-{phase}/{f.name}", "missing: finish the campaign")],
                    )
                parts.append(_load(f, f"phase {phase}, {f.stem}"))
    return parts


def tree_sizes(
    campaign: Campaign,
    out: Path,
    depths: tuple[int, ...] = SIZES_DEPTH,
    leaves: tuple[int, ...] = SIZES_LEAF,
) -> list[dict[str, Any]]:
    """Per (max_depth, min_samples_leaf), trees grown at the spec's cost on all of a finished
    campaign's collected runs but one and scored on that one, each run held out in turn: the
    mean cost per interval (the spec's cost matrix over intervals with a verdict) and the mean
    recall and precision of class I. The spec's own size can then be chosen from the runs it
    was trained on, not from the runs it is judged on."""
    runs = collected_runs(campaign, out)
    if len(runs) < 2:
        raise InputError(str(out), [Problem("", "needs at least two collected runs")])
    spec = campaign.spec
    cost = spec.cost.matrix().matrix()
    rows = []
    for depth in depths:
        for leaf in leaves:
            costs: list[float] = []
            recall: list[float] = []
            precision: list[float] = []
            for k, test in enumerate(runs):
                train = concat([r for j, r in enumerate(runs) if j != k])
                tree = campaign.make_tree(max_depth=depth, min_samples_leaf=leaf)
                pred = tree.fit(train.x, train.y).predict(test.x)
                ok = pred >= 0
                costs.append(float(cost[test.y[ok], pred[ok]].mean()) if ok.any() else 0.0)
                m = interval_metrics(test.y, pred)
                if m["recall"] is not None:
                    recall.append(float(m["recall"]))
                if m["precision"] is not None:
                    precision.append(float(m["precision"]))
            rows.append(
                {
                    "max_depth": depth,
                    "min_samples_leaf": leaf,
                    "cost": round(float(np.mean(costs)), 4),
                    "recall": round(float(np.mean(recall)), 3) if recall else None,
                    "precision": round(float(np.mean(precision)), 3) if precision else None,
                    "held_out_runs": len(runs),
                    "spec": depth == spec.max_depth and leaf == spec.min_samples_leaf,
                }
            )
    return rows


# -- the commands --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trained:
    """What ``quell ic2 train`` made: the campaign's name, its detector and each phase's data."""

    name: str
    detector: Path
    phases: list[dict[str, object]]

    def as_dict(self) -> dict[str, Any]:
        return {"detector": str(self.detector), "phases": self.phases}


def train(
    spec_path: Path, out: Path, progress: ProgressBar = lambda t, what: no_progress()
) -> Trained:
    """``quell ic2 train``: the campaign of ``spec_path`` in ``out``, resumed where it stopped
    (``Trainer``), in the environment its spec names."""
    campaign = load_campaign(spec_path)
    trainer = Trainer(campaign, out, run_fn(campaign.spec.environment))
    trainer.prepare()
    with progress(trainer.total_s, campaign.spec.name) as bar:
        trainer.progress = bar
        bundle = trainer.train()
    return Trained(campaign.spec.name, out / "detector.json", bundle.data.training.phases)


def ablate(spec_path: Path, out: Path, run_dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """``quell ic2 ablate``: ``ablation`` of the finished campaign in ``out`` on the recorded
    runs ``run_dirs``, each scored against the scenario it recorded."""
    campaign = load_campaign(spec_path)
    with ExitStack() as stack:
        runs = []
        for d in run_dirs:
            store = stack.enter_context(RunStore.open(d))
            runs.append((store, Scenario.model_validate(recorded_scenario(store, d))))
        return ablation(campaign, out, runs)


def sizes(spec_path: Path, out: Path) -> list[dict[str, Any]]:
    """``quell ic2 sizes``: ``tree_sizes`` of the finished campaign in ``out``, each row named
    ``depth / leaf`` (``(spec)`` on the spec's own)."""
    rows = tree_sizes(load_campaign(spec_path), out)
    for r in rows:
        r["size"] = f"{r['max_depth']} / {r['min_samples_leaf']}" + (" (spec)" if r["spec"] else "")
    return rows


__all__ = [
    "ABLATION",
    "PHASES",
    "Campaign",
    "CostSpec",
    "RunFn",
    "TrainSpec",
    "Trained",
    "Trainer",
    "ablate",
    "ablation",
    "collected_runs",
    "final_data",
    "interfered_instances",
    "load_campaign",
    "recorded_scenario",
    "run_dataset",
    "run_fn",
    "score_run",
    "score_runs",
    "sizes",
    "train",
    "tree_sizes",
]

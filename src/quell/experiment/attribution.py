"""Soroban's attribution model fitted on runs of one's own service (``quell attribute fit``),
from runs back to a bundle that attributes each request (``quell attribute predict``, the
scenario's ``attribution``, the agent's export).

Training: the uncontended run of a schedule and one or more contended runs of the same schedule.
Each contended request is labelled (percentile matching within its class by default, or paired
by request id) and described by its features; the features every run has are used, the classes
are the union. A seeded share of the requests is held out; the sparse GP and the baselines (the
run-queue wait, linear regression, gradient boosting, and the exact GP on a subsample) are fitted
on the rest and scored on it. ``fit_runs`` does it all from run directories and writes the
bundle; Soroban's own campaign (``quell.studies.attribution``) fits through the same functions.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from quell.attribute.bundle import AttributionModel, FloorData, ModelMeta, build_model_bundle
from quell.attribute.calibration import IntervalCalibration, calibrate_by_group
from quell.attribute.features import (
    CLASS_PREFIX,
    FeatureMatrix,
    available_features,
    build_features,
)
from quell.attribute.labels import compare_labels, paired_labels, percentile_labels
from quell.attribute.models import (
    FLOOR_QUANTILE,
    BoostingBaseline,
    ExactGP,
    LinearBaseline,
    OtherCgroupWaitBaseline,
    RunQueueBaseline,
    Score,
    SparseGP,
    provider_floor_seconds,
    score,
)
from quell.errors import InputError, Problem
from quell.report.records import Run, read_run

FloatArray = NDArray[np.float64]
LabelKind = Literal["percentile", "paired"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class TrainingSet:
    features: FeatureMatrix
    y: FloatArray
    """Excess seconds, by ``labels``."""
    labels: LabelKind
    agreement: list[dict[str, Any]]
    """Per contended run, how far percentile and paired labels differ (where ids pair)."""
    group: NDArray[np.str_]
    """Per request, the run it came from (the groups of the interval's calibration)."""
    uncontended: tuple[str, ...] = ()
    """The runs whose requests joined with excess 0 (not left out to calibrate the interval:
    the runs a model is scored on are contended ones)."""


def training_set(
    uncontended: Run,
    contended: Sequence[Run],
    labels: LabelKind = "percentile",
    include_uncontended: bool = True,
    names: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
) -> TrainingSet:
    """Labels and features of every contended request against ``uncontended``; with
    ``include_uncontended`` the uncontended run's own requests too, each with excess 0 (what
    percentile matching and pairing give a run against itself): without them the model never
    sees a machine without co-located load and extrapolates to it. ``names`` and ``classes``:
    the features and one-hot classes to build (a fitted model's, for held-out runs); by default
    the features every run has and the union of their classes."""
    if not contended and not include_uncontended:
        raise InputError("training runs", [Problem("contended", "no contended run")])
    runs = [*contended, uncontended] if include_uncontended else list(contended)
    if names is None:
        names = list(available_features(runs[0].records, runs[0].psi))
        for run in runs[1:]:
            have = set(available_features(run.records, run.psi))
            names = [n for n in names if n in have]
    if classes is None:
        classes = sorted({c for run in runs for c in run.records.request_class.tolist()})
    u = uncontended.records
    xs, ys, ids, cls, grp = [], [], [], [], []
    agreement = []
    if include_uncontended:
        fm = build_features(
            u, uncontended.psi, names=names, classes=classes, source=uncontended.name
        )
        xs.append(fm.x)
        ys.append(np.zeros(len(u)))
        ids.append(fm.request_id)
        cls.append(fm.request_class)
        grp.append(np.full(len(u), uncontended.name))
    for run in contended:
        c = run.records
        pct = percentile_labels(u.wall_seconds, u.request_class, c.wall_seconds, c.request_class)
        par = paired_labels(u["request_id"], u.wall_seconds, c["request_id"], c.wall_seconds)
        if np.any(np.isfinite(par)):
            agreement.append({"run": run.name} | compare_labels(pct, par).as_dict())
        fm = build_features(c, run.psi, names=names, classes=classes, source=run.name)
        y = pct if labels == "percentile" else par
        keep = np.isfinite(y)
        if labels == "paired" and not np.any(keep):
            raise InputError(run.name, [Problem("request_id", "no request pairs by id")])
        xs.append(fm.x[keep])
        ys.append(y[keep])
        ids.append(fm.request_id[keep])
        cls.append(fm.request_class[keep])
        grp.append(np.full(int(keep.sum()), run.name))
    features = FeatureMatrix(
        x=np.vstack(xs),
        names=fm.names,
        classes=fm.classes,
        request_id=np.concatenate(ids),
        request_class=np.concatenate(cls),
    )
    group = np.concatenate(grp).astype(np.str_)
    zero = (uncontended.name,) if include_uncontended else ()
    return TrainingSet(features, np.concatenate(ys), labels, agreement, group, zero)


def combine(sets: Sequence[TrainingSet]) -> TrainingSet:
    """One training set of several built with the same features and classes (e.g. one per
    service load, each against its own uncontended run)."""
    if not sets:
        raise InputError("training sets", [Problem("", "none given")])
    names = sets[0].features.names
    if any(t.features.names != names for t in sets):
        raise InputError("training sets", [Problem("features", "built with other features")])
    features = FeatureMatrix(
        x=np.vstack([t.features.x for t in sets]),
        names=names,
        classes=sets[0].features.classes,
        request_id=np.concatenate([t.features.request_id for t in sets]),
        request_class=np.concatenate([t.features.request_class for t in sets]),
    )
    y = np.concatenate([t.y for t in sets])
    agreement = [a for t in sets for a in t.agreement]
    group = np.concatenate([t.group for t in sets]).astype(np.str_)
    zero = tuple(n for t in sets for n in t.uncontended)
    return TrainingSet(features, y, sets[0].labels, agreement, group, zero)


@dataclass(frozen=True)
class FitSettings:
    n_inducing: int = 200
    max_iters: int = 50
    seed: int = 0
    holdout: float = 0.2
    exact_points: int = 1000
    baselines: bool = True
    calibrate: bool = True
    """Calibrate the GP's interval by leaving each contended training run (or each group of
    them, ``fit_attribution``'s ``calibration_groups``) out in turn, a scale per request class
    (``quell.attribute.calibration``; needs two groups, else the interval as fitted)."""
    floor_quantile: float | None = FLOOR_QUANTILE
    """The provider floor: this quantile of the GP's predicted excess over the uncontended
    training runs' requests (``quell.attribute.models.provider_floor_seconds``); ``None``:
    no floor."""


@dataclass
class FitResult:
    model: AttributionModel
    scores: list[Score]
    """On the seeded held-out share of the training runs' requests."""
    n_train: int
    n_test: int
    fit_seconds: dict[str, float] = field(default_factory=dict)
    agreement: list[dict[str, Any]] = field(default_factory=list)
    held_out: dict[str, list[Score]] = field(default_factory=dict)
    """Per held-out set of runs (other seeds, other antagonist kinds), every model's scores."""
    calibration: IntervalCalibration | None = None

    def as_dict(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "calibration": None
            if cal is None
            else {
                "method": cal.method,
                "level": cal.level,
                "scale": cal.scale,
                "requests": cal.n,
                "class_scales": cal.strata,
                "groups": [vars(g) for g in cal.groups],
            },
            "floor": None
            if self.model.data.floor is None
            else self.model.data.floor.model_dump(mode="json"),
            "n_train": self.n_train,
            "n_test": self.n_test,
            "features": list(self.model.features),
            "classes": list(self.model.classes),
            "scores": [vars(s) for s in self.scores],
            "acceptance": acceptance(self.scores),
            "held_out": {
                name: {"scores": [vars(s) for s in scores], "acceptance": acceptance(scores)}
                for name, scores in self.held_out.items()
            },
            "fit_seconds": self.fit_seconds,
            "label_agreement": self.agreement,
        }


R2_GOAL = 0.8
COVERAGE_GOAL = (0.93, 0.97)
MAE_GOAL = 0.7
"""The GP's MAE at most this share of the run-queue baseline's (≥ 30 % below it)."""


def acceptance(scores: Sequence[Score]) -> dict[str, bool | None]:
    """Issue 23's targets for the sparse GP against ``scores``: R² ≥ 0.8, the 95 % interval
    covering 93–97 %, MAE ≥ 30 % below the run-queue baseline's (``None`` without it)."""
    by = {s.model: s for s in scores}
    gp = by.get(SparseGP.name)
    if gp is None:
        return {}
    runq = by.get(RunQueueBaseline.name)
    cov = gp.coverage
    return {
        "r2": bool(gp.r2 >= R2_GOAL),
        "coverage": None if cov is None else bool(COVERAGE_GOAL[0] <= cov <= COVERAGE_GOAL[1]),
        "mae_vs_runq": None
        if runq is None
        else bool(gp.mae_seconds <= MAE_GOAL * runq.mae_seconds),
    }


def split(n: int, holdout: float, seed: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Seeded train and held-out rows (``holdout`` of them, at least one each when n ≥ 2)."""
    rows = np.random.default_rng(seed).permutation(n)
    n_test = min(max(round(holdout * n), 1 if holdout > 0 else 0), n - 1)
    return np.sort(rows[n_test:]), np.sort(rows[:n_test])


def fit_attribution(
    data: TrainingSet,
    settings: FitSettings,
    source: str = "",
    progress: Progress | None = None,
    held_out: Sequence[tuple[str, TrainingSet]] = (),
    calibration_groups: Mapping[str, str] | None = None,
) -> FitResult:
    """Fit the sparse GP and the baselines on the training rows; score each on the held-out rows
    and on every ``held_out`` set (built with ``data``'s features and classes).
    ``calibration_groups``: the group of each contended training run for the interval's
    calibration (e.g. its antagonist kind); by default each run is a group of its own."""
    note = progress or (lambda _: None)
    x, y = data.features.x, data.y
    train, test = split(len(y), settings.holdout, settings.seed)
    for name, other in held_out:
        if other.features.names != data.features.names:
            message = "features or classes other than the training set's"
            raise InputError(name, [Problem("features", message)])
    models: list[Any] = [SparseGP(settings.n_inducing, settings.max_iters, settings.seed)]
    if settings.baselines:
        models += [
            RunQueueBaseline(data.features.names),
            *(
                [OtherCgroupWaitBaseline(data.features.names)]
                if OtherCgroupWaitBaseline.column in data.features.names
                else []
            ),
            LinearBaseline(),
            BoostingBaseline(settings.seed),
            ExactGP(settings.exact_points, settings.seed),
        ]
    timings: dict[str, float] = {}
    scores: list[Score] = []
    others: dict[str, list[Score]] = {name: [] for name, _ in held_out}
    calibration = None
    for model in models:
        note(f"{model.name} on {len(train)} requests")
        t0 = time.perf_counter()
        model.fit(x[train], y[train])
        timings[model.name] = time.perf_counter() - t0
        scored = [(model.name, model)]
        if isinstance(model, SparseGP):
            calibration = _calibrate(data, train, settings, note, timings, calibration_groups)
            if calibration is not None:
                calibrated = _calibrated(model, calibration, data.features.names)
                scored = [(model.name, calibrated), (UNCALIBRATED, model)]
        for name, m in scored:
            if len(test):
                scores.append(score(name, y[test], m.predict(x[test])))
            for other_name, other in held_out:
                others[other_name].append(score(name, other.y, m.predict(other.features.x)))
    gp = models[0]
    meta = ModelMeta(
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        source=source,
        n_train=len(train),
        n_inducing=settings.n_inducing,
        max_iters=settings.max_iters,
        seed=settings.seed,
        labels=data.labels,
        scores={
            k: v
            for k, v in {
                "r2": scores[0].r2 if scores else None,
                "mae_seconds": scores[0].mae_seconds if scores else None,
                "coverage": scores[0].coverage if scores else None,
            }.items()
            if v is not None and np.isfinite(v)
        },
    )
    classes = tuple(
        n.removeprefix(CLASS_PREFIX) for n in data.features.names if n.startswith(CLASS_PREFIX)
    )
    bundle = build_model_bundle(
        gp,
        data.features.names,
        classes or data.features.classes,
        meta,
        calibration,
        _floor(gp, data, settings.floor_quantile),
    )
    return FitResult(
        bundle, scores, len(train), len(test), timings, data.agreement, others, calibration
    )


def _floor(gp: SparseGP, data: TrainingSet, quantile: float | None) -> FloorData:
    """The provider floor read from every request of the uncontended training runs (those the
    GP was fitted on and those held out alike: the floor describes these runs, not one split)."""
    rows = np.isin(data.group, list(data.uncontended))
    if quantile is None or not np.any(rows):
        return FloorData(method="none")
    predicted = gp.predict(data.features.x[rows]).mean_seconds
    return FloorData(
        method="uncontended-quantile",
        quantile=quantile,
        seconds=provider_floor_seconds(predicted, quantile),
        requests=int(rows.sum()),
        runs=list(data.uncontended),
    )


UNCALIBRATED = "sparse_gp_uncalibrated"
"""The sparse GP's scores with its interval as fitted, beside the calibrated ones."""


def _class_columns(names: Sequence[str]) -> list[str]:
    return [n.removeprefix(CLASS_PREFIX) for n in names if n.startswith(CLASS_PREFIX)]


def _calibrated(gp: SparseGP, cal: IntervalCalibration, names: Sequence[str]) -> SparseGP:
    classes = _class_columns(names)
    per_class = [cal.strata.get(c, cal.scale) for c in classes] if cal.strata else None
    return gp.with_interval_scale(cal.scale, per_class if len(classes) > 1 else None)


def _calibrate(
    data: TrainingSet,
    train: NDArray[np.int64],
    settings: FitSettings,
    note: Progress,
    timings: dict[str, float],
    calibration_groups: Mapping[str, str] | None,
) -> IntervalCalibration | None:
    """The GP's interval calibrated on the training rows, each group of contended training runs
    left out in turn, a scale per request class (``None``: not asked for, or fewer than two
    groups; fewer than two of ``calibration_groups``: each run a group). The uncontended runs' rows stay in every fold's training."""
    runs = data.group[train]
    of = calibration_groups or {}
    groups = np.array([of.get(r, r) for r in runs.tolist()], dtype=np.str_)
    zero = {of.get(r, r) for r in data.uncontended}
    left_out = [g for g in dict.fromkeys(groups.tolist()) if g not in zero]
    if len(left_out) < 2 and calibration_groups:  # one kind only: leave runs out instead
        return _calibrate(data, train, settings, note, timings, None)
    if not settings.calibrate or len(left_out) < 2:
        return None
    t0 = time.perf_counter()
    cal = calibrate_by_group(
        lambda: SparseGP(settings.n_inducing, settings.max_iters, settings.seed),
        data.features.x[train],
        data.y[train],
        groups,
        left_out,
        progress=note,
        strata=data.features.request_class[train]
        if len(_class_columns(data.features.names)) > 1
        else None,
    )
    timings["calibration"] = time.perf_counter() - t0
    return cal


StepsBar = Callable[[int, str], AbstractContextManager[Progress]]
"""Opens a display of (steps, label) for a block; each note the block gives starts a step."""


@contextmanager
def no_steps(steps: int, label: str) -> Iterator[Progress]:
    yield lambda what: None


def fit_steps(settings: FitSettings, contended: int) -> int:
    """The models ``fit_attribution`` fits, and the folds of its calibration."""
    folds = contended if settings.calibrate and contended >= 2 else 0
    return (5 if settings.baselines else 1) + folds


def fit_runs(
    uncontended: Path,
    contended: Sequence[Path],
    out: Path,
    settings: FitSettings,
    labels: str = "percentile",
    include_uncontended: bool = True,
    test_uncontended: Path | None = None,
    test_contended: Sequence[Path] = (),
    progress: StepsBar = no_steps,
) -> FitResult:
    """``quell attribute fit``: label ``contended`` against ``uncontended`` (runs of one
    schedule, read from their directories), fit and score as ``fit_attribution`` does (and on
    the held-out runs ``test_uncontended`` and ``test_contended``, another schedule or other
    load), write the bundle to ``out``. A floor quantile of 0 is no floor. Every bad option is
    named before a run is read."""
    problems = []
    if labels not in ("percentile", "paired"):
        problems.append(Problem("--labels", f"percentile or paired, not {labels!r}"))
    quantile = settings.floor_quantile
    if quantile is not None and not 0.0 <= quantile < 1.0:
        message = f"0 (no floor) or a quantile below 1, got {quantile}"
        problems.append(Problem("--floor-quantile", message))
    if (test_uncontended is None) != (not test_contended):
        message = "give both --test-uncontended and --test-contended, or neither"
        problems.append(Problem("held-out runs", message))
    if problems:
        raise InputError("quell attribute fit", problems)
    settings = replace(settings, floor_quantile=quantile or None)
    kind: LabelKind = "percentile" if labels == "percentile" else "paired"
    runs = [read_run(p) for p in contended]
    data = training_set(read_run(uncontended), runs, kind, include_uncontended)
    held_out = []
    if test_uncontended is not None:
        names = [n for n in data.features.names if not n.startswith(CLASS_PREFIX)]
        test = training_set(
            read_run(test_uncontended),
            [read_run(p) for p in test_contended],
            kind,
            include_uncontended=False,
            names=names,
            classes=data.features.classes,
        )
        held_out.append(("held-out runs", test))
    source = f"uncontended {uncontended}; contended {', '.join(map(str, contended))}"
    with progress(fit_steps(settings, len(runs)), "fitting") as note:
        result = fit_attribution(data, settings, source, note, held_out)
    result.model.save(out)
    return result

"""Run a consolidation study's points in the lab or the simulator, each point's
``measurement.json`` written in its run directory as soon as it is measured; a point that has
one is read back, not measured again (a sweep resumes where it stopped). A lab point whose
machine steal exceeds the bound is measured again (``least_stolen``, as ``lab compare``).

Afterwards ``collect`` turns the measurements into the study's record: the spec and every
point, each system's 0.1 s CPU series kept as histograms at 0.1 s and 2 s (the seed's Fig. 3
and 5 sample every 2 s): what the results page and its figures are drawn from.
``ConsolidationCampaign`` is all of it as ``quell study consolidation`` runs it: the points,
the record, its figures and each curve's shape."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quell.core.files import load_json, write_json
from quell.errors import InputError, Problem
from quell.experiment.run import least_stolen
from quell.studies.consolidation.point import ConsolidationMeasurement
from quell.studies.consolidation.results import (
    FORMAT,
    VERSION,
    curves,
    histograms,
    shape,
    write_figures,
)
from quell.studies.consolidation.spec import Env, PlannedPoint, SimSettings, Study, load_study

MeasureFn = Callable[[PlannedPoint, Path], ConsolidationMeasurement]
ProgressFn = Callable[[int, str], None]

MAX_STEAL_PCT = 5.0
"""A lab point measured while the machine's steal averaged more is measured again."""
STEAL_ATTEMPTS = 3


def sim_measure(settings: SimSettings) -> MeasureFn:
    """Points measured by ``quell.studies.consolidation.sim.simulate_point`` with ``settings``."""
    from quell.studies.consolidation.sim import Costs, simulate_point

    costs = Costs(
        light_seconds=settings.light_cpu_seconds, heavy_seconds=settings.heavy_cpu_seconds
    )

    def measure(planned: PlannedPoint, run_dir: Path) -> ConsolidationMeasurement:
        return simulate_point(
            planned.point,
            scheduler="fluid" if planned.label == "fluid" else "quantum",
            quantum_seconds=settings.quantum_seconds,
            period_seconds=settings.period_seconds,
            pick=settings.pick,
            memory_seconds=settings.memory_seconds,
            preempt=settings.preempt,
            costs=costs,
        )

    return measure


def lab_measure() -> MeasureFn:
    """Points measured in the lab by ``quell.studies.consolidation.lab.measure_point`` (the lab
    half of the study), each measured again while the machine's steal spoils it."""
    from quell.studies.consolidation import lab

    def measure(planned: PlannedPoint, run_dir: Path) -> ConsolidationMeasurement:
        attempt = 0

        def once() -> ConsolidationMeasurement:
            nonlocal attempt
            attempt += 1
            return lab.measure_point(planned.point, run_dir / f"attempt{attempt}")

        kept, over = least_stolen(once, lambda m: m.steal_pct, MAX_STEAL_PCT, STEAL_ATTEMPTS)
        if not over:
            return kept
        note = (
            f"measured {len(over) + (kept not in over)} time(s): steal over {MAX_STEAL_PCT:g} %"
            f" in {len(over)} ({', '.join(f'{m.steal_pct:.1f} %' for m in over)})"
        )
        return ConsolidationMeasurement(
            env=kept.env,
            point=kept.point,
            systems=kept.systems,
            steal_pct=kept.steal_pct,
            notes=[*kept.notes, note],
        )

    return measure


def _read(path: Path, planned: PlannedPoint, env: Env) -> ConsolidationMeasurement:
    raw = load_json(path, "measurement")
    try:
        m = ConsolidationMeasurement.from_json(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            str(path), [Problem("", f"not a consolidation measurement: {exc}")]
        ) from None
    if m.point != planned.point or m.env != env:
        raise InputError(
            str(path),
            [
                Problem(
                    "point",
                    "holds another point than the spec's: resume with the spec it was measured"
                    " with, or run into another --runs-dir",
                )
            ],
        )
    return m


def run_study(
    study: Study,
    env: Env,
    runs_dir: Path,
    measure: MeasureFn,
    progress: ProgressFn = lambda done, what: None,
) -> list[tuple[PlannedPoint, ConsolidationMeasurement]]:
    """Every point of ``study`` in ``env``: read back if measured, else measured and written."""
    out = []
    points = study.points(env)
    for k, planned in enumerate(points):
        run_dir = planned.run_dir(runs_dir)
        path = run_dir / "measurement.json"
        progress(k, f"{planned.label} {planned.key} seed {planned.point.seed}")
        if path.exists():
            m = _read(path, planned, env)
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
            m = measure(planned, run_dir)
            write_json(path, m.to_json())
        out.append((planned, m))
    progress(len(points), "done")
    return out


def write_record(path: Path, record: dict[str, Any]) -> None:
    """The study record as compact JSON (some 800 points fit in well under a megabyte),
    written through a temporary file beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    tmp.replace(path)


def _short(v: Any) -> Any:
    """A measured float to 6 significant digits (the record's size; the runs keep them all)."""
    return float(f"{v:.6g}") if isinstance(v, float) else v


def collect(
    study: Study, env: Env, measured: list[tuple[PlannedPoint, ConsolidationMeasurement]]
) -> dict[str, Any]:
    """The study's record (module docstring)."""
    points = []
    for planned, m in measured:
        doc = m.to_json()
        del doc["format"], doc["version"]
        for name, sys_doc in doc["systems"].items():
            series = sys_doc.pop("cpu_pct_100ms")
            doc["systems"][name] = {k: _short(v) for k, v in sys_doc.items()}
            doc["systems"][name]["cpu_hist"] = histograms(series)
        doc["label"] = planned.label
        points.append(doc)
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": study.spec.name,
        "env": env,
        "spec": study.spec.model_dump(mode="json"),
        "points": points,
    }


@dataclasses.dataclass(frozen=True)
class CurveShape:
    """One curve of a study (two points or more) as ``results.shape`` reads it."""

    curve: str
    base_rt_s: float
    peak_rt_s: float
    peak_inc_users: int
    last_rt_s: float
    degradation: float
    non_monotonic: bool


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """What a campaign wrote and found."""

    name: str
    env: Env
    runs_dir: Path
    record: Path
    figures: list[Path]
    points: int
    curves: list[CurveShape]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "env": self.env,
            "runs_dir": str(self.runs_dir),
            "record": str(self.record),
            "figures": [str(f) for f in self.figures],
            "points": self.points,
            "curves": [dataclasses.asdict(c) for c in self.curves],
        }


class ConsolidationCampaign:
    """The study of the spec at ``spec_path`` in ``env`` (lab or sim), its points' runs under
    ``runs_dir`` (default ``runs/consolidation/<name>``). Everything is checked when it is
    made, so a refusal comes before any point runs."""

    def __init__(self, spec_path: Path, env: str, runs_dir: Path | None = None) -> None:
        if env not in ("lab", "sim"):
            raise InputError("--env", [Problem("--env", f"{env!r}: choose lab or sim")])
        self.study = load_study(spec_path)
        self.env: Env = "lab" if env == "lab" else "sim"
        self.measure = lab_measure() if self.env == "lab" else sim_measure(self.study.spec.sim)
        self.runs_dir = runs_dir or Path("runs") / "consolidation" / self.study.spec.name
        self.points = len(self.study.points(self.env))

    def run(self, progress: ProgressFn = lambda done, what: None) -> StudyRun:
        """Every point (read back if measured), then the record
        (``<runs_dir>/record/<name>-<env>.json``) and its figures (``<runs_dir>/figures/``)."""
        measured = run_study(self.study, self.env, self.runs_dir, self.measure, progress)
        record = collect(self.study, self.env, measured)
        data_dir = self.runs_dir / "record"
        record_path = data_dir / f"{self.study.spec.name}-{self.env}.json"
        write_record(record_path, record)
        figures = write_figures(data_dir, self.runs_dir / "figures")
        shapes = []
        for c, cells in curves(record).items():
            if len(cells) < 2:
                continue
            sh = shape(cells)
            shapes.append(
                CurveShape(
                    c.name(),
                    sh.base_s,
                    sh.peak_s,
                    sh.peak_at,
                    sh.last_s,
                    sh.degradation,
                    sh.non_monotonic,
                )
            )
        return StudyRun(
            self.study.spec.name,
            self.env,
            self.runs_dir,
            record_path,
            figures,
            len(measured),
            shapes,
        )

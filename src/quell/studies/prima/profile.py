"""Building PRIMA's models by automated tests (Section III-B1/2): train the probe's isolation
table, then measure (U, U_total, SF, mean RT) over utilisation levels × interfering loads, and
write a model bundle. The same code drives the lab and the simulator: a *cell* is a short
scenario derived from a base scenario, run by an injected ``CellRunner``.

Every finished cell is appended to ``cells.jsonl`` in the profile directory as it completes, so
an interrupted profile resumes where it stopped and no measurement is lost.

A profile measures the link, so the machine it runs on must not be interfered with itself. A
run during which the machine's CPU steal (time its hypervisor gave to other guests) averaged
over ``max_steal_pct`` is measured again, up to ``max_attempts`` times in all: on a cloud VM,
steal slows the probe and the service together and reads as link interference that is not
there. Every run over the bound is appended to ``stolen.jsonl``; when every attempt of a cell
is, the least-stolen one is kept (in ``cells.jsonl`` too) and named in ``Profiler.over_steal``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from quell.core.files import load_yaml, read_text
from quell.core.observation import STEAL_SUSPECT_PCT
from quell.core.schema import Name, StrictModel, validation_problems
from quell.errors import InputError, Problem
from quell.experiment.run import least_stolen
from quell.models.bundle import BundleMeta, ModelBundle, build_bundle
from quell.probe.severity import probe_samples, severity_factor
from quell.probe.table import ProbeTable, TrainingLevel
from quell.scenario import load_scenario
from quell.scenario.model import Event, Iperf3, Scenario
from quell.store.run import RunStore
from quell.workload.spec import PoissonSpec

CellRunner = Callable[[Scenario, Path], Path]
"""Runs a derived scenario written at the given path; returns the run directory."""


def cell_runner(env: Literal["lab", "sim"], out_dir: Path) -> CellRunner:
    """Runs each cell in the lab or the simulator, into ``out_dir/runs/<cell>/``."""

    def run(scenario: Scenario, path: Path) -> Path:
        from quell.experiment.lab import run_lab
        from quell.experiment.sim import run_sim

        runs = out_dir / "runs" / path.stem
        summary = (run_lab if env == "lab" else run_sim)(scenario, path, runs)
        return Path(summary["run_dir"])

    return run


ProgressFn = Callable[[int, int, str], None]
"""(cells done, cells in all, what runs now)."""
MAX_REPETITIONS = 20
"""The most runs pooled per model cell or held-out point."""


class Point(StrictModel):
    util_pct: Annotated[float, Field(gt=0, lt=100)]
    interference_mbit: Annotated[float, Field(ge=0)]


class Training(StrictModel):
    max_repetitions: Annotated[int, Field(ge=1, le=50)] = 5
    rel_width: Annotated[float, Field(gt=0, lt=1)] = 0.05


class ProfileSpec(StrictModel):
    """What ``quell prima profile`` measures (a YAML file)."""

    name: Name
    workload: Annotated[str, Field(min_length=1)]
    instance_type: Annotated[str, Field(min_length=1)]
    scenario: Annotated[str, Field(min_length=1)]
    """Base scenario (relative to this file): one host with a link, one instance, a probe, a
    Poisson workload, and the iperf3 antagonist named by ``interference``."""
    interference: Annotated[str, Field(min_length=1)] = "noise"
    util_levels_pct: Annotated[list[Annotated[float, Field(gt=0, lt=100)]], Field(min_length=2)]
    interference_mbit: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=2)]
    max_total_util_pct: Annotated[float, Field(gt=0, le=200)] = 95.0
    """Skip cells whose offered U + interference exceed this share of the link (saturated)."""
    cell_s: Annotated[float, Field(gt=0, le=3600)] = 20.0
    warmup_s: Annotated[float, Field(ge=0, le=600)] = 3.0
    repetitions: Annotated[int, Field(ge=1, le=MAX_REPETITIONS)] = 1
    training: Training = Training()
    holdout: list[Point] = []
    """Points ``quell prima validate`` measures (not used to build the models)."""
    max_steal_pct: Annotated[float, Field(ge=0, le=100)] = STEAL_SUSPECT_PCT
    """Measure a run again when the machine's mean CPU steal over it exceeded this."""
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    """Runs of one cell at most, refused ones included."""
    environment: Literal["lab", "sim"] = "lab"
    clean_cells_sf: Literal["measured", "zero"] = "measured"
    """The SF the cells without a neighbour (interference 0) enter the RTM and IM with:
    ``measured``, Eq. 1 on their probe as every cell; ``zero``, 0 (no neighbour: what their
    probe reads against R_iso is the isolation table's own noise, and a clean cell read a few
    hundredths above 0 leaves the RTM's SF = 0 edge between the clean cells on either side of
    it, which overstates the response time of an instance without a neighbour there)."""


@dataclass(frozen=True)
class CellResult:
    """What one cell measured (after warm-up)."""

    kind: str  # "training", "model" or "holdout"
    util_target_pct: float
    interference_mbit: float
    repetition: int
    util_pct: float
    total_util_pct: float
    probe_s: list[float]
    mean_rt_s: float
    requests: int
    run_dir: str
    steal_pct: float | None = None
    """The machine's mean CPU steal over the measured window, in % of CPU time (None: the
    environment reports none, as the simulator, or a cell recorded before steal was kept)."""

    @property
    def key(self) -> str:
        return cell_key(self.kind, self.util_target_pct, self.interference_mbit, self.repetition)


MAX_CELL_LOG_BYTES = 1 << 28
"""The largest ``cells.jsonl`` read (256 MiB; a cell's line is about a kilobyte)."""
_CELL = TypeAdapter(CellResult)


def read_cells(path: Path) -> list[CellResult]:
    """The cells ``path`` (a profile's ``cells.jsonl``) records, in order. A line that is not
    one (cut short when a run was killed while writing it, edited by hand) raises
    ``InputError`` naming the file and each such line: remove a line to measure its cell again."""
    cells, problems = [], []
    text = read_text(path, "cell log", MAX_CELL_LOG_BYTES)
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            cells.append(_CELL.validate_json(line))
        except ValidationError as err:
            problems += [Problem(f"line {n}", str(p)) for p in validation_problems(err)]
    if problems:
        raise InputError(str(path), problems)
    return cells


@dataclass(frozen=True)
class MeasuredPoint:
    """A measured point (a model cell or a held-out point): its repetitions pooled into one
    cell and that cell's SF, and each repetition on its own with its SF (to show how much the
    runs scatter)."""

    cell: CellResult
    sf: float
    reps: tuple[CellResult, ...]
    rep_sf: tuple[float, ...]


def cell_key(kind: str, u: float, i: float, rep: int) -> str:
    return f"{kind}/{u:g}/{i:g}/{rep}"


def pool(reps: list[CellResult]) -> CellResult:
    """One cell from its repetitions: the mean utilisations, every probe sample, and the mean
    response time over all their requests (a model point per cell, not per repetition, so
    repetitions tighten a point rather than scatter several)."""
    if len(reps) == 1:
        return reps[0]
    n = sum(r.requests for r in reps)
    rt = sum(r.mean_rt_s * r.requests for r in reps if r.requests) / n if n else float("nan")
    return replace(
        reps[0],
        repetition=-1,
        util_pct=float(np.mean([r.util_pct for r in reps])),
        total_util_pct=float(np.mean([r.total_util_pct for r in reps])),
        probe_s=[x for r in reps for x in r.probe_s],
        mean_rt_s=rt,
        requests=n,
    )


def load_profile_spec(path: Path) -> tuple[ProfileSpec, Scenario]:
    """Read a profile spec and its base scenario; every problem at once."""
    raw = load_yaml(path, "profile spec")
    try:
        spec = ProfileSpec.model_validate(raw)
    except ValidationError as err:
        raise InputError(str(path), validation_problems(err)) from None
    base = load_scenario(path.parent / spec.scenario)
    problems = []
    if len(base.instances) != 1:
        problems.append(Problem("scenario", "the base scenario must have exactly one instance"))
    host = base.host(base.instances[0].host)
    if host.link_mbit is None:
        problems.append(Problem("scenario", f"host {host.id!r} needs link_mbit"))
    if base.probe is None:
        problems.append(Problem("scenario", "the base scenario needs a probe section"))
    ant = next((a for a in base.antagonists if a.id == spec.interference), None)
    if not isinstance(ant, Iperf3) or ant.host != host.id:
        problems.append(
            Problem(
                "interference", f"{spec.interference!r} must be an iperf3 antagonist on {host.id!r}"
            )
        )
    if not isinstance(base.workload.arrival, PoissonSpec):
        problems.append(Problem("scenario", "the base workload must arrive as a Poisson process"))
    if problems:
        raise InputError(str(path), problems)
    return spec, base


def _mean_request_bytes(base: Scenario) -> float:
    """Bytes per arrival: a request's file, or a whole video for video sessions (each session
    streams its video to the end, so in steady state bytes/s = session rate × video size)."""
    if base.workload.sessions is not None:
        return float(base.workload.sessions.mean_video_bytes)
    sizes = {f.path: f.size_bytes for f in base.files}
    reqs = base.workload.requests or []
    total_w = sum(r.weight for r in reqs)
    return sum(sizes[r.path] * r.weight for r in reqs) / total_w


def cell_scenario(
    spec: ProfileSpec, base: Scenario, util_pct: float, interference_mbit: float, rep: int
) -> Scenario:
    """The base scenario at one utilisation and interfering load."""
    link_mbit = base.host(base.instances[0].host).link_mbit or 0.0
    rate = util_pct / 100.0 * link_mbit * 1e6 / 8.0 / _mean_request_bytes(base)
    data = base.model_dump(mode="python")
    data["name"] = f"{spec.name}-u{util_pct:g}-i{interference_mbit:g}-r{rep}"
    data["seed"] = base.seed + 1000 * rep + int(util_pct * 10) + int(interference_mbit * 7)
    data["duration_s"] = spec.warmup_s + spec.cell_s
    data["workload"]["arrival"] = {"process": "poisson", "rate_rps": rate}
    data["events"] = []
    data["policy"] = {"name": "static", "params": {}}
    data["compare"] = []
    if interference_mbit > 0:
        for a in data["antagonists"]:
            if a["id"] == spec.interference:
                a["bitrate_mbit"] = interference_mbit / a["streams"]
        data["events"] = [Event(at_s=0.0, start=[spec.interference]).model_dump()]
    return Scenario.model_validate(data)


def measure(
    run_dir: Path, warmup_s: float
) -> tuple[float, float, list[float], float, int, float | None]:
    """(U, U_total, probe times, mean RT, requests, CPU steal %) of a finished cell, after
    warm-up."""
    with RunStore.open(run_dir) as store:
        obs = [o for o in store.observations() if o.time_s > warmup_s]
    if not obs:
        raise InputError(str(run_dir), [Problem("", "the cell recorded no observations")])
    util = float(np.mean([o.util_pct or 0.0 for o in obs]))
    link = [o.extra.get("link_util_pct") for o in obs]
    total = (
        float(np.mean([x for x in link if x is not None]))
        if any(x is not None for x in link)
        else util
    )
    probes = probe_samples(o.extra for o in obs)
    n = sum(o.requests for o in obs if o.mean_rt_seconds is not None)
    rt = sum((o.mean_rt_seconds or 0.0) * o.requests for o in obs) / n if n else float("nan")
    steal = [o.steal_ratio for o in obs if o.steal_ratio is not None]
    steal_pct = 100.0 * float(np.mean(steal)) if steal else None
    return util, total, probes, rt, n, steal_pct


def _append(path: Path, result: CellResult) -> None:
    """One JSON line, written as soon as the run is measured."""
    with path.open("a") as f:
        f.write(json.dumps(asdict(result)) + "\n")


class Profiler:
    """Runs the cells of a profile into ``out_dir`` and builds the bundle.

    Parameters
    ----------
    spec, base : the profile and its base scenario (``load_profile_spec``).
    out_dir : profile directory: ``cells.jsonl``, ``cells/`` (derived scenarios), ``runs/``.
    runner : runs one derived scenario (lab or simulator).
    """

    def __init__(
        self, spec: ProfileSpec, base: Scenario, out_dir: Path, runner: CellRunner
    ) -> None:
        self.spec = spec
        self.base = base
        self.out_dir = out_dir
        self.runner = runner
        out_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = out_dir / "cells.jsonl"
        self.stolen_path = out_dir / "stolen.jsonl"
        self.done_: dict[str, CellResult] = {}
        self.remeasured = 0
        """Runs refused for steal in this sitting (each measured again)."""
        self.over_steal: list[str] = []
        """Cells kept in this sitting although every attempt exceeded ``max_steal_pct``."""
        if self.log_path.exists():
            self.done_ = {r.key: r for r in read_cells(self.log_path)}

    # -- the plan ------------------------------------------------------------------------------
    def model_cells(self) -> Iterator[tuple[float, float, int]]:
        """Run k of every cell before run k + 1 of any, so a profile stopped part-way (or
        deepened over several sittings) has its runs spread evenly over the grid."""
        link = self.base.host(self.base.instances[0].host).link_mbit or 1.0
        for rep in range(self.spec.repetitions):
            for u in self.spec.util_levels_pct:
                for i in self.spec.interference_mbit:
                    if u + 100.0 * i / link <= self.spec.max_total_util_pct:
                        yield u, i, rep

    def planned(self) -> int:
        t = len(self.spec.util_levels_pct) * self.spec.training.max_repetitions
        return t + sum(1 for _ in self.model_cells())

    # -- running -------------------------------------------------------------------------------
    def _cell(self, kind: str, u: float, i: float, rep: int) -> CellResult:
        key = cell_key(kind, u, i, rep)
        if key in self.done_:
            return self.done_[key]
        scenario = cell_scenario(self.spec, self.base, u, i, rep)
        cell_dir = self.out_dir / "cells"
        cell_dir.mkdir(exist_ok=True)
        path = cell_dir / f"{key.replace('/', '_')}.yaml"
        path.write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))

        def once() -> CellResult:
            run_dir = self.runner(scenario, path)
            util, total, probes, rt, n, steal = measure(run_dir, self.spec.warmup_s)
            return CellResult(kind, u, i, rep, util, total, probes, rt, n, str(run_dir), steal)

        result, refused = least_stolen(
            once,
            lambda r: r.steal_pct,
            self.spec.max_steal_pct,
            self.spec.max_attempts,
            on_refused=lambda r: _append(self.stolen_path, r),
        )
        kept_stolen = any(r is result for r in refused)
        if kept_stolen:
            self.over_steal.append(key)
        self.remeasured += len(refused) - kept_stolen
        _append(self.log_path, result)
        self.done_[key] = result
        return result

    def train(self, progress: ProgressFn = lambda d, t, w: None) -> ProbeTable:
        """Probe isolation table: repeat each level until the CI rule holds or the cap."""
        table = ProbeTable(self.spec.training.rel_width)
        levels = []
        for u in self.spec.util_levels_pct:
            samples: list[float] = []
            utils: list[float] = []
            for rep in range(self.spec.training.max_repetitions):
                progress(len(self.done_), self.planned(), f"training U={u:g}% rep {rep + 1}")
                r = self._cell("training", u, 0.0, rep)
                samples += r.probe_s
                utils.append(r.util_pct)
                if len(samples) >= 2 and not table.needs_more(TrainingLevel(u, tuple(samples))):
                    break
            if not samples:
                raise InputError(
                    self.spec.name, [Problem(f"training U={u:g}%", "the probe never reported")]
                )
            levels.append(TrainingLevel(float(np.mean(utils)), tuple(samples)))
        return table.fit(levels)

    def run(self, progress: ProgressFn = lambda d, t, w: None) -> ModelBundle:
        table = self.train(progress)
        cells: dict[tuple[float, float], list[CellResult]] = {}
        for u, i, rep in self.model_cells():
            progress(
                len(self.done_),
                self.planned(),
                f"model U={u:g}% interference {i:g} Mbit/s run {rep + 1}",
            )
            cells.setdefault((u, i), []).append(self._cell("model", u, i, rep))
        rtm: list[tuple[float, float, float]] = []
        im: list[tuple[float, float, float, float]] = []
        for (u, i), reps in cells.items():
            r = pool(reps)
            sf = self.cell_sf(table, r)
            if sf is None or not np.isfinite(r.mean_rt_s):
                continue
            if i == 0 and self.spec.clean_cells_sf == "zero":
                sf = 0.0
            rtm.append((r.util_pct, sf, r.mean_rt_s))
            im.append((r.total_util_pct, sf, r.util_pct, u))
        probe = self.base.probe
        assert probe is not None
        meta = BundleMeta(
            workload=self.spec.workload,
            instance_type=self.spec.instance_type,
            environment=self.spec.environment,
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            probe_period_s=probe.period_s,
            probe_size_bytes=probe.size_bytes,
            source=str(self.out_dir),
        )
        return build_bundle(meta, table, rtm, im)

    def holdout(
        self, table: ProbeTable, progress: ProgressFn = lambda d, t, w: None
    ) -> list[MeasuredPoint]:
        """Measure the spec's held-out points, `repetitions` runs of each pooled as the model's
        cells are; each repetition's own SF is kept to show how much the runs scatter."""
        reps = self.spec.repetitions
        points = self.spec.holdout
        runs: list[list[CellResult]] = [[] for _ in points]
        for rep in range(reps):  # run k of every point before run k + 1 of any
            for k, p in enumerate(points):
                progress(
                    rep * len(points) + k,
                    len(points) * reps,
                    f"holdout U={p.util_pct:g}% interference {p.interference_mbit:g} run {rep + 1}",
                )
                runs[k].append(self._cell("holdout", p.util_pct, p.interference_mbit, rep))
        out = []
        for point_runs in runs:
            r = pool(point_runs)
            sf = self.cell_sf(table, r)
            if sf is not None:
                out.append(self._point(table, r, sf, point_runs))
        return out

    def model_points(self, table: ProbeTable) -> list[MeasuredPoint]:
        """The model cells measured so far, each with the repetitions a bundle pools (those
        below ``repetitions``)."""
        cells: dict[tuple[float, float], list[CellResult]] = {}
        for r in self.done_.values():
            if r.kind == "model" and r.repetition < self.spec.repetitions:
                cells.setdefault((r.util_target_pct, r.interference_mbit), []).append(r)
        out = []
        for runs in cells.values():
            runs.sort(key=lambda x: x.repetition)
            r = pool(runs)
            sf = self.cell_sf(table, r)
            if sf is not None:
                out.append(self._point(table, r, sf, runs))
        return out

    def _point(
        self, table: ProbeTable, pooled: CellResult, sf: float, runs: list[CellResult]
    ) -> MeasuredPoint:
        rep_sf = [(x, self.cell_sf(table, x)) for x in runs]
        kept = [(x, v) for x, v in rep_sf if v is not None]
        return MeasuredPoint(pooled, sf, tuple(x for x, _ in kept), tuple(v for _, v in kept))

    @staticmethod
    def cell_sf(table: ProbeTable, r: CellResult) -> float | None:
        """SF of a cell: Eq. 1 on the mean probe time, against R_iso at the measured U."""
        if not r.probe_s:
            return None
        return float(severity_factor(float(np.mean(r.probe_s)), table.predict(r.util_pct))[()])

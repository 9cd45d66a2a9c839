"""IC2's configuration sweeps (the paper's Section 3.2, Fig. 2 and 3): the response time of an
apache instance against one server setting, clean and under each antagonist, in the lab or the
simulator.

A spec names a base scenario (apache instances, closed-loop users, antagonists), the setting
and its values, and the conditions: each a name and the antagonists it starts at ``start_s``
(none: clean). Every (condition, value, repeat) is one run of the scenario with the setting at
that value on every apache instance, the condition's antagonists started at ``start_s`` and
running to the end, for ``duration_s``, with no policy acting. What counts is measured after
``warmup_s`` (past the start of the antagonists): the throughput and the response time (with
closed-loop users by the response-time law, which counts users left waiting; ``measure``).

Points are written to ``sweep.json`` in the output directory as they finish; a sweep stopped
part-way resumes after the last point written (a directory of another spec is refused).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from quell.core.files import load_json, load_yaml, write_json
from quell.core.schema import Name, StrictModel, validation_problems
from quell.errors import InputError, Problem
from quell.experiment.run import ProgressBar, ProgressFn, no_progress
from quell.scenario import load_scenario
from quell.scenario.model import ApacheSettings, Event, PolicySpec, Scenario
from quell.store.run import RunStore
from quell.studies.ic2.campaign import RunFn
from quell.workload.spec import ClosedLoopSpec

FORMAT = "quell.ic2.sweep"
Setting = Literal["max_request_workers", "keepalive_timeout_s", "php_max_children"]


class Condition(StrictModel):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")]
    start: list[str] = Field(default_factory=list)
    """Antagonists of the scenario started at the spec's ``start_s``; none: clean."""


class SweepSpec(StrictModel):
    """``quell ic2 sweep``'s spec file (module docstring)."""

    name: Name
    description: str = ""
    environment: Literal["lab", "sim"] = "sim"
    scenario: str
    """The base scenario, relative to the spec file."""
    setting: Setting
    values: Annotated[list[float], Field(min_length=2, max_length=50)]
    conditions: Annotated[list[Condition], Field(min_length=1, max_length=20)]
    duration_s: Annotated[float, Field(gt=0, le=86_400)]
    start_s: Annotated[float, Field(ge=0)] = 0.0
    warmup_s: Annotated[float, Field(ge=0)]
    repeats: Annotated[int, Field(ge=1, le=20)] = 1
    order: Literal["listed", "shuffled"] = "listed"
    """The values' order within a repeat: as listed, or shuffled afresh for each repeat (from
    the base scenario's seed + the repeat), so that a machine whose state drifts over minutes
    does not put the same values in the same stretch of it every time."""


@dataclass(frozen=True)
class Sweep:
    spec: SweepSpec
    path: Path
    scenario_path: Path
    scenario: Scenario

    def baseline_value(self) -> float | None:
        """The setting's value on the base scenario's apache instances (their configuration
        outside the sweep); ``None`` when they differ or there is none."""
        values = {
            float(getattr(inst.apache or ApacheSettings(), self.spec.setting))
            for inst in self.scenario.instances
            if inst.server == "apache"
        }
        return values.pop() if len(values) == 1 else None

    def points(self) -> list[tuple[str, float, int]]:
        """(condition, value, repeat) in the order they run: repeat-major, so a sweep cut short
        still has every value once; conditions inside, so a value is seen clean and under each
        antagonist close in time; the values as listed or, with ``order: shuffled``, in an
        order of their own for each repeat."""
        out = []
        for r in range(self.spec.repeats):
            values = list(self.spec.values)
            if self.spec.order == "shuffled":
                random.Random(self.scenario.seed + r).shuffle(values)
            out += [(c.name, v, r) for v in values for c in self.spec.conditions]
        return out

    def point_scenario(self, condition: str, value: float, repeat: int) -> Scenario:
        """The base scenario with ``value`` on every apache instance, the condition's
        antagonists started at ``start_s``, no other event, no policy acting."""
        cond = next(c for c in self.spec.conditions if c.name == condition)
        instances = [
            inst.model_copy(
                update={
                    "apache": ApacheSettings.model_validate(
                        (inst.apache or ApacheSettings()).model_dump()
                        | {self.spec.setting: _typed(self.spec.setting, value)}
                    )
                }
            )
            if inst.server == "apache"
            else inst
            for inst in self.scenario.instances
        ]
        events = (
            [Event(at_s=self.spec.start_s, phase=cond.name, start=list(cond.start))]
            if cond.start
            else []
        )
        return self.scenario.model_copy(
            update={
                "name": f"{self.scenario.name}-{self.spec.setting}-{value:g}-{condition}",
                "seed": self.scenario.seed + repeat,
                "duration_s": self.spec.duration_s,
                "instances": instances,
                "events": events,
                "policy": PolicySpec(name="static"),
                "compare": [],
            }
        )


def _typed(setting: str, value: float) -> float | int:
    return value if setting == "keepalive_timeout_s" else int(value)


def load_sweep(path: Path) -> Sweep:
    """Read and check a sweep spec and its scenario; every problem at once."""
    source = str(path)
    data = load_yaml(path, "file")
    if not isinstance(data, dict):
        raise InputError(source, [Problem("", "a spec must be a mapping of keys to values")])
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise InputError(source, validation_problems(err)) from None
    problems: list[Problem] = []
    scenario_path = (path.parent / spec.scenario).resolve()
    try:
        scenario = load_scenario(scenario_path)
    except InputError as exc:
        raise InputError(
            source, [Problem("scenario", f"{exc.source}: {q}") for q in exc.problems]
        ) from None
    apache = [i for i in scenario.instances if i.server == "apache"]
    if not apache:
        problems.append(Problem("scenario", "has no apache instance to set"))
    known = {a.id for a in scenario.antagonists}
    for k, c in enumerate(spec.conditions):
        problems += [
            Problem(f"conditions[{k}].start", f"no antagonist {a!r} in the scenario")
            for a in c.start
            if a not in known
        ]
    names = [c.name for c in spec.conditions]
    problems += [
        Problem("conditions", f"two conditions named {n!r}")
        for n in sorted({n for n in names if names.count(n) > 1})
    ]
    if spec.setting != "keepalive_timeout_s":
        problems += [
            Problem("values", f"{v:g} is not a whole number of workers")
            for v in spec.values
            if v != int(v) or v < 1
        ]
    for inst in apache:
        for v in spec.values:
            try:
                ApacheSettings.model_validate(
                    (inst.apache or ApacheSettings()).model_dump()
                    | {spec.setting: _typed(spec.setting, v)}
                )
            except ValidationError as err:
                problems += [
                    Problem("values", f"{v:g} on {inst.id}: {p.message}")
                    for p in validation_problems(err)
                ]
    if spec.warmup_s >= spec.duration_s:
        problems.append(Problem("warmup_s", "must be shorter than duration_s"))
    if spec.start_s > spec.warmup_s:
        problems.append(Problem("start_s", "must not be after warmup_s: measure under it"))
    if problems:
        raise InputError(source, problems)
    return Sweep(spec, path, scenario_path, scenario)


def measure(store: RunStore, scenario: Scenario, after_s: float) -> dict[str, Any]:
    """Requests completed by the apache instances after ``after_s``, their throughput, their
    response time request-weighted over the intervals, and errors. With closed-loop users the
    response time that counts (``mean_rt_s``) is the interactive response-time law's,
    R = N / X - Z: a user left without a worker for the whole window completes nothing and
    would not weigh in a mean over completed requests, but lowers X.

    Beside it, what the instances took from their CPUs over the same window (``cpu_util``, in
    cores, and ``runqueue_wait_s_per_s``, their threads' wait for a CPU per second, summed
    over the instances): a neighbour whose grip on the service differs from one run to the
    next shows there before it shows as a setting's effect."""
    ids = [i.id for i in scenario.instances if i.server == "apache"]
    n, rt_sum, errors, span = 0, 0.0, 0, 0.0
    ends: list[float] = []
    cpu: dict[float, float] = {}
    wait: dict[float, float] = {}
    for iid in ids:
        for o in store.observations(iid):
            if o.time_s - o.interval_s < after_s - 1e-9:
                continue
            ends.append(o.time_s)
            errors += o.errors
            if o.mean_rt_seconds is not None and o.requests:
                n += o.requests
                rt_sum += o.requests * o.mean_rt_seconds
            if o.cpu_util is not None:
                cpu[o.time_s] = cpu.get(o.time_s, 0.0) + o.cpu_util
            if o.runqueue_wait_seconds is not None:
                wait[o.time_s] = wait.get(o.time_s, 0.0) + o.runqueue_wait_seconds / o.interval_s
    if ends:
        span = max(ends) - after_s
    x = n / span if span > 0 else None
    arrival = scenario.workload.arrival
    law = None
    if isinstance(arrival, ClosedLoopSpec) and x:
        law = max(0.0, arrival.users / x - arrival.think_time_s)
    return {
        "requests": n,
        "errors": errors,
        "throughput_rps": x,
        "completed_mean_rt_s": rt_sum / n if n else None,
        "law_rt_s": law,
        "mean_rt_s": law if law is not None else (rt_sum / n if n else None),
        "cpu_util": sum(cpu.values()) / len(cpu) if cpu else None,
        "runqueue_wait_s_per_s": sum(wait.values()) / len(wait) if wait else None,
    }


@dataclass
class Sweeper:
    sweep: Sweep
    out: Path
    run_fn: RunFn
    progress: Callable[[float, str], None] = lambda done_s, what: None

    @property
    def total_s(self) -> float:
        return len(self.sweep.points()) * self.sweep.spec.duration_s

    def _doc(self) -> dict[str, Any]:
        path = self.out / "sweep.json"
        if path.exists():
            doc: dict[str, Any] = load_json(path, "sweep record")
            if doc.get("spec") != self.sweep.spec.model_dump(mode="json"):
                raise InputError(
                    str(self.out),
                    [
                        Problem(
                            "sweep.json",
                            "holds a sweep of another spec: resume it with the spec it was"
                            " started with, or sweep into another directory",
                        )
                    ],
                )
            return doc
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "format": FORMAT,
            "name": self.sweep.spec.name,
            "spec": self.sweep.spec.model_dump(mode="json"),
            "scenario": str(self.sweep.scenario_path),
            "baseline_value": self.sweep.baseline_value(),
            "points": [],
        }
        write_json(path, doc)
        return doc

    def prepare(self) -> None:
        self._doc()

    def run(self) -> dict[str, Any]:
        doc = self._doc()
        done = {(p["condition"], p["value"], p["repeat"]) for p in doc["points"]}
        for k, (cond, value, rep) in enumerate(self.sweep.points()):
            base_s = k * self.sweep.spec.duration_s
            label = f"{cond} {self.sweep.spec.setting}={value:g}"
            if (cond, value, rep) in done:
                self.progress(base_s + self.sweep.spec.duration_s, label)
                continue
            scenario = self.sweep.point_scenario(cond, value, rep)

            @contextmanager
            def progress(base_s: float = base_s, label: str = label) -> Iterator[ProgressFn]:
                yield lambda t, _phase: self.progress(base_s + t, label)

            summary = self.run_fn(scenario, self.sweep.scenario_path, self.out / "runs", progress)
            with RunStore.open(Path(summary["run_dir"])) as store:
                m = measure(store, scenario, self.sweep.spec.warmup_s)
            doc["points"].append(
                {
                    "condition": cond,
                    "value": value,
                    "repeat": rep,
                    "run_dir": str(summary["run_dir"]),
                    **m,
                }
            )
            write_json(self.out / "sweep.json", doc)
        doc["table"] = table(doc)
        doc["row"] = row(doc)
        write_json(self.out / "sweep.json", doc)
        return doc


def table(doc: dict[str, Any]) -> dict[str, Any]:
    """Per condition: the mean over repeats of the response time at each value, the value with
    the lowest (the optimum), each value's repeats and their range, and whether the optimum is
    resolved: ``True`` when every repeat at the optimum beat every repeat at each other value
    (the ranges do not overlap), ``False`` when some other value's range overlaps the
    optimum's (``overlaps`` names them), ``None`` when a value has a single repeat and the
    scatter is not measured."""
    out: dict[str, Any] = {}
    for cond in [c["name"] for c in doc["spec"]["conditions"]]:
        by_value: dict[float, list[float]] = {}
        for p in doc["points"]:
            if p["condition"] == cond and p["mean_rt_s"] is not None:
                by_value.setdefault(p["value"], []).append(p["mean_rt_s"])
        by_value = dict(sorted(by_value.items()))
        means = {v: sum(xs) / len(xs) for v, xs in by_value.items()}
        best = min(means, key=lambda v: means[v]) if means else None
        resolved: bool | None = None
        overlaps: list[float] = []
        if best is not None and all(len(xs) >= 2 for xs in by_value.values()):
            top = max(by_value[best])
            overlaps = [v for v, xs in by_value.items() if v != best and min(xs) <= top]
            resolved = not overlaps
        out[cond] = {
            "mean_rt_s": {f"{v:g}": round(m, 6) for v, m in means.items()},
            "best_value": best,
            "best_mean_rt_s": round(means[best], 6) if best is not None else None,
            "repeats": {f"{v:g}": len(xs) for v, xs in by_value.items()},
            "range_rt_s": {
                f"{v:g}": [round(min(xs), 6), round(max(xs), 6)] for v, xs in by_value.items()
            },
            "resolved": resolved,
            "overlaps": overlaps,
        }
    return out


def row(doc: dict[str, Any]) -> dict[str, Any]:
    """Which way the setting should move under interference, read from ``doc["table"]``, two
    ways: the paper's, from the clean optimum to each condition's (``shift``: how its Table 3
    was built), and from the configuration outside the sweep (``doc["baseline_value"]``) to
    each condition's optimum (``from_baseline``); each +1, −1 or 0. ``directions`` is the item
    for IC2's ``directions`` parameter when every interfered condition's optimum lies on the
    same side of the baseline and each of those optima is resolved (``table``: its repeats
    beat those of every other value; ``None`` otherwise), ``why`` says so in words."""
    setting = doc["spec"]["setting"]
    clean = [c["name"] for c in doc["spec"]["conditions"] if not c["start"]]
    tab = doc["table"]
    clean_best = tab[clean[0]]["best_value"] if clean and clean[0] in tab else None
    base = doc.get("baseline_value")
    per: dict[str, dict[str, int | None]] = {}
    for cond, r in tab.items():
        if cond in clean or r["best_value"] is None:
            continue
        best = float(r["best_value"])
        per[cond] = {
            "shift": None if clean_best is None else _sign(best - clean_best),
            "from_baseline": None if base is None else _sign(best - base),
        }
    sides = {d["from_baseline"] for d in per.values()}
    item = None
    if sides in ({1}, {-1}):
        item = ("+" if sides == {1} else "-") + setting
    bests = ", ".join(
        f"{c} {tab[c]['best_value']:g}" for c in tab if tab[c]["best_value"] is not None
    )
    if base is None:
        why = f"best: {bests}; no single baseline to move from"
    elif sides == {0}:
        why = f"best: {bests}; every interfered optimum is the baseline {base:g}"
    elif item is None:
        why = f"best: {bests}; baseline {base:g}: the interfered optima do not all lie on one side"
    else:
        way = "above" if item[0] == "+" else "below"
        why = f"best: {bests}; every interfered optimum lies {way} the baseline {base:g}"
    shifts = {d["shift"] for d in per.values()}
    if clean_best is not None and shifts == {0}:
        why += f" (the optimum does not move from the clean {clean_best:g})"
    # an optimum that the repeats do not separate from its neighbours gives no direction
    read = [c for c in clean[:1] if c in tab] + list(per)
    loose = [c for c in read if tab[c].get("resolved") is False]
    if loose:
        if any(c in per for c in loose):
            item = None
        why += "; not resolved: " + "; ".join(
            f"at {c} the repeats at {tab[c]['best_value']:g} overlap those at "
            + ", ".join(f"{v:g}" for v in tab[c]["overlaps"])
            for c in loose
        )
    elif any(tab[c].get("resolved") is None for c in read):
        why += "; one repeat a value: the optima's scatter is not measured"
    return {"per_condition": per, "directions": item, "why": why}


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Response time against the setting, one line per condition (the paper's Fig. 2), with
    the range of each value's repeats as a bar when there are several."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for cond, row in doc["table"].items():
        xs = [float(v) for v in row["mean_rt_s"]]
        ys = [1e3 * y for y in row["mean_rt_s"].values()]
        if not xs:
            continue
        (line,) = ax.plot(xs, ys, marker="o", label=cond)
        spans = row.get("range_rt_s", {})
        if any(row.get("repeats", {}).get(k, 1) > 1 for k in row["mean_rt_s"]):
            # each value's repeats, lowest to highest (a recorded sweep before ranges has none)
            lows = [1e3 * spans[k][0] for k in row["mean_rt_s"]]
            highs = [1e3 * spans[k][1] for k in row["mean_rt_s"]]
            ax.vlines(xs, lows, highs, colors=line.get_color(), alpha=0.5)
    ax.set_xlabel(doc["spec"]["setting"])
    ax.set_ylabel("mean response time (ms)")
    every = [y for r in doc["table"].values() for y in r["mean_rt_s"].values() if y > 0]
    if every and max(every) / min(every) > 20:
        ax.set_yscale("log")
    ax.set_title(doc["name"])
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(
    spec_path: Path, out: Path, progress: ProgressBar = lambda t, what: no_progress()
) -> dict[str, Any]:
    """``quell ic2 sweep``: every point of ``spec_path``'s sweep in ``out`` (resumed after the
    last one written), in the environment its spec names; writes ``sweep.json`` and
    ``sweep.png`` there and returns the record, with its table and IC2's row."""
    from quell.studies.ic2.campaign import run_fn

    spec = load_sweep(spec_path)
    sweeper = Sweeper(spec, out, run_fn(spec.spec.environment))
    sweeper.prepare()
    with progress(sweeper.total_s, spec.spec.name) as bar:
        sweeper.progress = bar
        doc = sweeper.run()
    plot(doc, out / "sweep.png")
    return doc


__all__ = [
    "Condition",
    "Sweep",
    "SweepSpec",
    "Sweeper",
    "load_sweep",
    "measure",
    "plot",
    "row",
    "sweep",
    "table",
]

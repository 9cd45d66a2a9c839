"""``quell study consolidation``'s spec file: the sweep of the consolidation study
(docs/papers/consolidation.md) as one YAML document, checked up front with every problem named.

The points are the product of the cap pairs, Sys_Const's users, Sys_Inc's users, Sys_Inc's
indices of dispersion, CTP off/on, the simulator's schedulers (one "scheduler" in the lab) and
the seeds, seed-major: a sweep cut short still has every point once."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from quell.core.files import load_yaml
from quell.core.schema import Name, StrictModel, validation_problems
from quell.errors import InputError, Problem
from quell.studies.consolidation.point import ConsolidationPoint, SystemLoad

Env = Literal["lab", "sim"]
SchedulerName = Literal["fluid", "quantum"]
Resources = Literal["liberal", "conservative"]
Pct = Annotated[float, Field(gt=0.0, le=100.0)]
Users = Annotated[int, Field(ge=0, le=100_000)]


class SystemResources(StrictModel):
    """Table II's configuration of each system (the seed's Fig. 2: Sys_Const[Conservative],
    Sys_Inc[Liberal]; Fig. 4 the reverse)."""

    const: Resources = "liberal"
    inc: Resources = "liberal"


def _quantum_only() -> list[SchedulerName]:
    return ["quantum"]


class SimSettings(StrictModel):
    """The simulator's own settings (quell.studies.consolidation.sim); the lab ignores them."""

    schedulers: Annotated[list[SchedulerName], Field(min_length=1, max_length=2)] = Field(
        default_factory=_quantum_only
    )
    quantum_seconds: Annotated[float, Field(gt=0.0, le=1.0)] = 0.005
    period_seconds: Annotated[float, Field(ge=0.001, le=1.0)] = 0.1
    pick: Literal["rr", "least_used"] = "least_used"
    memory_seconds: Annotated[float, Field(gt=0.0, le=600.0)] = 10.0
    preempt: bool = True
    light_cpu_seconds: Annotated[float, Field(gt=0.0, le=1.0)] = 0.001
    heavy_cpu_seconds: Annotated[float, Field(gt=0.0, le=10.0)] = 0.05


class StudySpec(StrictModel):
    """The spec file (module docstring)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$")]
    description: str = ""
    title: Name | None = None
    """The results page's heading for this study (default: its name)."""
    caps: Annotated[
        list[Annotated[list[Pct], Field(min_length=2, max_length=2)]],
        Field(min_length=1, max_length=10),
    ]
    """Pairs [Sys_Const's cap, Sys_Inc's cap] in percent of the shared core."""
    const_users: Annotated[list[Users], Field(min_length=1, max_length=20)]
    inc_users: Annotated[list[Users], Field(min_length=1, max_length=60)]
    dispersion_index: Annotated[
        list[Annotated[float, Field(ge=1.0, le=10_000.0)]], Field(min_length=1, max_length=10)
    ] = Field(default_factory=lambda: [1.0])
    ctp: Annotated[list[bool], Field(min_length=1, max_length=2)] = Field(
        default_factory=lambda: [False]
    )
    competitor_cpu_pct: Annotated[
        list[Annotated[float, Field(ge=0.0, le=100.0)]], Field(min_length=1, max_length=5)
    ] = Field(default_factory=lambda: [0.0])
    """A CPU spinner's load on the shared core, neither system's (0: none; the lab only)."""
    competitor_idle: Annotated[list[bool], Field(min_length=1, max_length=2)] = Field(
        default_factory=lambda: [False]
    )
    """The spinner at the lowest weight (``ConsolidationPoint.competitor_idle``)."""
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=3, max_length=20)]
    resources: SystemResources = SystemResources()
    think_time_seconds: Annotated[float, Field(gt=0.0, le=60.0)] = 7.0
    heavy_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1
    ramp_seconds: Annotated[float, Field(ge=0.0, le=3600.0)] = 30.0
    measure_seconds: Annotated[float, Field(gt=0.0, le=7200.0)] = 300.0
    sim: SimSettings = SimSettings()


@dataclass(frozen=True)
class PlannedPoint:
    """One point of the sweep: where its run goes and what it measures."""

    label: str
    """``lab``, or the simulator's scheduler (``fluid``, ``quantum``)."""
    point: ConsolidationPoint

    @property
    def key(self) -> str:
        p = self.point
        ctp = "-ctp" if p.ctp else ""
        idle = "idle" if p.competitor_idle else ""
        spin = f"-{idle}spin{p.competitor_cpu_pct:g}" if p.competitor_cpu_pct > 0 else ""
        return (
            f"cap{p.const.cap_pct:g}-{p.inc.cap_pct:g}_const{p.const.users}_inc{p.inc.users}"
            f"_I{p.dispersion_index:g}{ctp}{spin}"
        )

    def run_dir(self, root: Path) -> Path:
        return root / self.label / self.key / f"seed{self.point.seed}"


@dataclass(frozen=True)
class Study:
    spec: StudySpec
    path: Path

    def points(self, env: Env) -> list[PlannedPoint]:
        s = self.spec
        if env == "sim" and any(c > 0 for c in s.competitor_cpu_pct):
            raise InputError(
                str(self.path),
                [Problem("competitor_cpu_pct", "the simulator has no competitor: use --env lab")],
            )
        labels: list[str] = ["lab"] if env == "lab" else list(s.sim.schedulers)
        out = []
        for seed, label, (cc, ci), cu, iu, disp, ctp, spin, idle in itertools.product(
            s.seeds,
            labels,
            s.caps,
            s.const_users,
            s.inc_users,
            s.dispersion_index,
            s.ctp,
            s.competitor_cpu_pct,
            s.competitor_idle,
        ):
            if idle and spin == 0:
                continue  # no competitor: nothing at the lowest weight
            point = ConsolidationPoint(
                const=SystemLoad(users=cu, cap_pct=cc, resources=s.resources.const),
                inc=SystemLoad(users=iu, cap_pct=ci, resources=s.resources.inc),
                think_time_seconds=s.think_time_seconds,
                heavy_share=s.heavy_share,
                dispersion_index=disp,
                ctp=ctp,
                competitor_cpu_pct=spin,
                competitor_idle=idle,
                resources=s.resources.const,
                ramp_seconds=s.ramp_seconds,
                measure_seconds=s.measure_seconds,
                seed=seed,
            )
            out.append(PlannedPoint(label, point))
        return out


def _twice(key: str, values: list[object]) -> list[Problem]:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    return [Problem(key, f"{v} appears twice") for v in dict.fromkeys(seen)]


def load_study(path: Path) -> Study:
    """Read and check a spec; every problem at once, named with the file."""
    source = str(path)
    data = load_yaml(path, "file")
    if not isinstance(data, dict):
        raise InputError(source, [Problem("", "a spec must be a mapping of keys to values")])
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as err:
        raise InputError(source, validation_problems(err)) from None
    problems: list[Problem] = []
    for key in (
        "caps",
        "const_users",
        "inc_users",
        "dispersion_index",
        "ctp",
        "competitor_cpu_pct",
        "competitor_idle",
        "seeds",
    ):
        problems += _twice(key, list(getattr(spec, key)))
    if spec.sim.quantum_seconds > spec.sim.period_seconds:
        problems.append(Problem("sim.quantum_seconds", "must be at most sim.period_seconds"))
    if spec.measure_seconds < 0.1:
        problems.append(Problem("measure_seconds", "must be at least 0.1 s (one CPU sample)"))
    if problems:
        raise InputError(source, problems)
    return Study(spec, path)

"""One point of the consolidation study (Kanemasa et al.): two n-tier systems, Sys_Const and
Sys_Inc, whose database tiers share one core under per-system CPU caps; and what a point
measures. The study's lab (``lab``) and its simulator (``sim``) both take a
``ConsolidationPoint`` and return a ``ConsolidationMeasurement``; ``sweep`` runs the points and
``results`` writes the figures and the results page from the measurements.

The measurement is written to the point's run directory as ``measurement.json`` (and the
0.1 s CPU series beside it), as it is taken, so a sweep resumes from the points it has."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from quell.core.schema import StrictModel

SYSTEMS = ("const", "inc")
"""Sys_Const (load held fixed) and Sys_Inc (load swept), in that order everywhere."""

Pct = Annotated[float, Field(gt=0.0, le=100.0)]


class SystemLoad(StrictModel):
    """One system's users and its database tier's cap on the shared core."""

    users: Annotated[int, Field(ge=0, le=100_000)]
    cap_pct: Pct = 100.0
    """CFS quota as a percentage of the shared core (the seed's VM limit: 50, 60, 70, 100)."""
    resources: Literal["liberal", "conservative"] | None = None
    """This system's software resources (Table II) when they differ from the point's: the
    seed's Fig. 2 runs Sys_Const[Conservative] beside Sys_Inc[Liberal], Fig. 4 the reverse."""


class ConsolidationPoint(StrictModel):
    """Everything that defines one measured point; two equal points measure the same thing."""

    const: SystemLoad
    inc: SystemLoad
    think_time_seconds: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0
    """Mean of the exponential think time of every closed-loop user."""
    heavy_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1
    """Fraction of transactions that are heavy (category browses, searches)."""
    dispersion_index: Annotated[float, Field(ge=1.0, le=10_000.0)] = 1.0
    """Index of dispersion of Sys_Inc's request process (1: exponential think times; larger:
    MMPP2 bursts), the seed's I; Sys_Const's stays 1, as in the seed's Fig. 7 and 8."""
    ctp: bool = False
    """Cross-tier priority: light transactions dequeued first in front of the application tier."""
    resources: Literal["liberal", "conservative"] = "liberal"
    """The software resources of the seed's Table II, scaled to the machine."""
    competitor_cpu_pct: Annotated[float, Field(ge=0.0, le=100.0)] = 0.0
    """A third process on the shared core, neither system's: one CPU spinner busy this
    percentage of the time, in its own group with the tiers' shares and no cap (0: none). It
    tells whether another process on the core, rather than Sys_Inc's transactions, changes a
    capped tier's response time. The lab only."""
    competitor_idle: bool = False
    """The competitor at the lowest weight (``cpu.shares`` 2 against the tiers' 10240): it runs
    only when neither tier wants the core, so it keeps the core busy without taking CPU from
    them."""
    ramp_seconds: Annotated[float, Field(ge=0.0, le=3600.0)] = 10.0
    measure_seconds: Annotated[float, Field(gt=0.0, le=7200.0)] = 60.0
    seed: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class SystemMeasurement:
    """What one system did during a point's measurement window."""

    requests_total: int
    throughput_per_second: float
    mean_rt_seconds: float
    p95_rt_seconds: float
    light_mean_rt_seconds: float | None
    heavy_mean_rt_seconds: float | None
    db_cpu_pct: float
    """Mean CPU of the system's database tier, in percent of the shared core."""
    throttled_periods_total: int
    """CFS periods in which the tier ran out of quota (the simulator's quantum scheduler
    counts the same)."""
    cpu_pct_100ms: list[float] = field(default_factory=list)
    """The tier's CPU in percent of the shared core, every 0.1 s of the window; the 2 s
    histogram is computed from it."""


@dataclass(frozen=True)
class ConsolidationMeasurement:
    """One point's result, from the lab or the simulator."""

    env: Literal["lab", "sim"]
    point: ConsolidationPoint
    systems: dict[str, SystemMeasurement]
    """Keyed by ``SYSTEMS``."""
    steal_pct: float | None = None
    """Machine steal during the window (lab); a spoiled point is measured again."""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "quell-consolidation-measurement",
            "version": 1,
            "env": self.env,
            "point": self.point.model_dump(mode="json"),
            "systems": {k: asdict(v) for k, v in self.systems.items()},
            "steal_pct": self.steal_pct,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ConsolidationMeasurement:
        return cls(
            env=raw["env"],
            point=ConsolidationPoint.model_validate(raw["point"]),
            systems={k: SystemMeasurement(**v) for k, v in raw["systems"].items()},
            steal_pct=raw.get("steal_pct"),
            notes=list(raw.get("notes", [])),
        )

"""PRIMA's study end to end, as ``quell prima profile`` and ``validate`` run it: a profile spec
into a model bundle (``ProfileCampaign``), a bundle measured on the spec's held-out points
(``ValidationCampaign``). Each checks everything when it is made (the spec, the environment,
the bundle, the held-out points), so a refusal comes before any run; ``run`` measures, writes
its file into the profile directory (``bundle.json``, ``validation.json``) and returns what it
found, with the runs measured again for the machine's own CPU steal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from quell.errors import InputError, Problem
from quell.models.bundle import ModelBundle, load_bundle
from quell.scenario.model import Scenario
from quell.studies.prima.profile import (
    Profiler,
    ProfileSpec,
    ProgressFn,
    cell_runner,
    load_profile_spec,
)
from quell.studies.prima.validate import ValidationRow, scatter, summary, validate

Env = Literal["lab", "sim"]
BUNDLE_FILE = "bundle.json"
VALIDATION_FILE = "validation.json"


def _quiet(done: int, total: int, what: str) -> None:
    return None


def choose_env(spec_env: Env, given: str | None) -> Env:
    """``given`` (``--env``) if any, else the spec's; anything but lab or sim refused."""
    if given is None:
        return spec_env
    if given not in ("lab", "sim"):
        raise InputError("--env", [Problem("--env", f"{given!r}: choose lab or sim")])
    return "lab" if given == "lab" else "sim"


def _load(spec_path: Path, repetitions: int | None) -> tuple[ProfileSpec, Scenario]:
    spec, base = load_profile_spec(spec_path)
    if repetitions is not None:
        spec = spec.model_copy(update={"repetitions": repetitions})
    return spec, base


@dataclass(frozen=True)
class StealReport:
    """The runs of this sitting the machine's own CPU steal spoiled."""

    max_steal_pct: float
    remeasured: int
    """Runs measured again (kept in ``stolen_path``)."""
    over_steal: tuple[str, ...]
    """Cells kept although every attempt had steal over ``max_steal_pct``."""
    stolen_path: Path

    @classmethod
    def of(cls, profiler: Profiler) -> StealReport:
        return cls(
            profiler.spec.max_steal_pct,
            profiler.remeasured,
            tuple(profiler.over_steal),
            profiler.stolen_path,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "max_steal_pct": self.max_steal_pct,
            "remeasured": self.remeasured,
            "over_steal": list(self.over_steal),
        }


@dataclass(frozen=True)
class ProfileRun:
    spec: ProfileSpec
    environment: Env
    bundle: ModelBundle
    bundle_path: Path
    scatter: dict[str, float | int | None]
    """The floor the model cells' own scatter puts under any model built on them
    (``validate.scatter``)."""
    steal: StealReport

    def to_json(self) -> dict[str, object]:
        return {
            "bundle": str(self.bundle_path),
            "cells": len(self.bundle.data.rtm_points),
            "probe_table": self.bundle.probe_table.to_dict(),
            "scatter": self.scatter,
            "steal": self.steal.to_json(),
        }


class ProfileCampaign:
    """Train the probe and measure the U × interference cells of the spec at ``spec_path``
    into ``out`` (resumable: cells already in ``out/cells.jsonl`` are not measured again), in
    ``env`` (default: the spec's), ``repetitions`` runs per cell (default: the spec's)."""

    def __init__(
        self,
        spec_path: Path,
        out: Path,
        env: str | None = None,
        repetitions: int | None = None,
    ) -> None:
        spec, base = _load(spec_path, repetitions)
        self.environment = choose_env(spec.environment, env)
        self.spec = spec.model_copy(update={"environment": self.environment})
        self.out = out
        self.profiler = Profiler(self.spec, base, out, cell_runner(self.environment, out))

    @property
    def planned(self) -> int:
        """Runs in all, those already measured included."""
        return self.profiler.planned()

    def run(self, progress: ProgressFn = _quiet) -> ProfileRun:
        """Measure, build the bundle and write it to ``out/bundle.json``."""
        bundle = self.profiler.run(progress)
        progress(self.planned, self.planned, "done")
        path = self.out / BUNDLE_FILE
        bundle.save(path)
        return ProfileRun(
            self.spec,
            self.environment,
            bundle,
            path,
            scatter(self.profiler.model_points(bundle.probe_table)),
            StealReport.of(self.profiler),
        )


@dataclass(frozen=True)
class ValidationRun:
    rows: list[ValidationRow]
    summary: dict[str, object]
    """``validate.summary`` of the rows."""
    steal: StealReport
    path: Path
    """Where ``to_json`` was written."""

    def to_json(self) -> dict[str, object]:
        return {**self.summary, "steal": self.steal.to_json()}


class ValidationCampaign:
    """Measure the held-out points of the spec at ``spec_path`` into ``out`` and compare them
    with the bundle at ``bundle_path`` (like PRIMA's Table II)."""

    def __init__(
        self,
        spec_path: Path,
        bundle_path: Path,
        out: Path,
        env: str | None = None,
        repetitions: int | None = None,
    ) -> None:
        spec, base = _load(spec_path, repetitions)
        self.bundle = load_bundle(bundle_path, spec.workload)
        if not spec.holdout:
            raise InputError(str(spec_path), [Problem("holdout", "no held-out points to measure")])
        environment = choose_env(spec.environment, env)
        self.spec = spec
        self.out = out
        self.profiler = Profiler(spec, base, out, cell_runner(environment, out))

    @property
    def planned(self) -> int:
        return len(self.spec.holdout) * self.spec.repetitions

    def run(self, progress: ProgressFn = _quiet) -> ValidationRun:
        """Measure, compare and write ``out/validation.json``."""
        cells = self.profiler.holdout(self.bundle.probe_table, progress)
        progress(self.planned, self.planned, "done")
        rows = validate(self.bundle, cells)
        result = ValidationRun(
            rows, summary(rows), StealReport.of(self.profiler), self.out / VALIDATION_FILE
        )
        result.path.write_text(json.dumps(result.to_json(), indent=1) + "\n")
        return result

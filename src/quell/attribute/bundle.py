"""The attribution model bundle: one fitted sparse GP in one versioned JSON file — the features
it reads (in order) and the request classes of its one-hot columns, the standardisation, the
kernel, the noise, the inducing inputs and the posterior's Woodbury vector and matrix, and what
it was trained on. No pickle: loading needs neither GPy nor trust in the file beyond its schema.

``load_attribution_model`` refuses, naming every problem: a missing, unreadable, corrupt or
foreign file, another version, unknown features, and arrays whose shapes do not fit together.

Version 2 adds the interval's calibration (``quell.attribute.calibration``: the scale on the
GP's predictive standard deviation found by leaving training runs out, and how). A version 1
file is read with its old meaning: the GP's interval as fitted, uncalibrated (scale 1).

Version 3 adds the provider floor (``quell.attribute.models.provider_floor_seconds``: a request
is attributed a provider part only where its predicted excess lies above what the model predicts
for nearly every request of the uncontended training runs). Versions 1 and 2 are read with
their old meaning: a floor of 0, every positive prediction attributed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from quell.attribute.calibration import METHOD, IntervalCalibration
from quell.attribute.features import (
    BASE_FEATURES,
    CLASS_PREFIX,
    EBPF_FEATURES,
    EBPF_RECENT_FEATURES,
    PSI_KEYS,
    RECENT_FEATURES,
    psi_feature,
    psi_recent_feature,
)
from quell.attribute.models import LEVEL, SparseGP, SparsePosterior, Standardiser
from quell.core.files import write_json
from quell.core.schema import load_versioned
from quell.errors import InputError, Problem

FORMAT: Final = "quell.attribute.model"
VERSION: Final = 3
READABLE: Final = (1, 2, 3)
KNOWN_FEATURES: Final = frozenset(
    BASE_FEATURES
    + EBPF_FEATURES
    + RECENT_FEATURES
    + EBPF_RECENT_FEATURES
    + tuple(map(psi_feature, PSI_KEYS))
    + tuple(map(psi_recent_feature, PSI_KEYS))
)

Finite = Annotated[float, Field(allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _JsonModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelMeta(_JsonModel):
    created: str
    source: str = ""
    """Where the training records came from."""
    n_train: Annotated[int, Field(ge=1)]
    n_inducing: Annotated[int, Field(ge=1)]
    max_iters: Annotated[int, Field(ge=1)]
    seed: int
    labels: Literal["percentile", "paired"] = "percentile"
    scores: dict[str, Finite] = {}
    """Held-out scores at fit time (R², MAE, coverage…), for the record."""


class PosteriorData(_JsonModel):
    x_mean: list[Finite]
    x_scale: list[Positive]
    y_mean: Finite
    y_scale: Positive
    lengthscale: list[Positive]
    variance: Positive
    noise_variance: Positive
    inducing: list[list[Finite]]
    woodbury_vector: list[Finite]
    woodbury_inv: list[list[Finite]]
    linear: list[Finite] = []
    """The linear mean's coefficients over the standardised features; empty: a zero mean."""


class GroupData(_JsonModel):
    group: str
    n: Annotated[int, Field(ge=1)]
    coverage: Annotated[float, Field(ge=0, le=1)]
    """The uncalibrated interval's coverage of the left-out group."""
    quantile: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """The ``level`` quantile of the group's normalised residuals |y − μ| / σ."""


class CalibrationData(_JsonModel):
    method: Literal["leave-one-group-out", "none"]
    """``none``: too few contended training runs to leave one out; the interval as fitted."""
    level: Annotated[float, Field(gt=0, lt=1)] = LEVEL
    scale: Positive
    """What multiplies the GP's predictive standard deviation (pooled over the classes)."""
    class_scales: dict[str, Positive] = {}
    """Per request class, its own scale instead (a class not named here takes ``scale``)."""
    groups: list[GroupData] = []


class FloorData(_JsonModel):
    method: Literal["uncontended-quantile", "none"]
    """``none``: no uncontended requests in the training, or not asked for; a floor of 0."""
    quantile: Annotated[float, Field(gt=0, lt=1)] | None = None
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    requests: Annotated[int, Field(ge=0)] = 0
    """The uncontended training requests the quantile was read from."""
    runs: list[str] = []


class ModelData(_JsonModel):
    format: Literal["quell.attribute.model"]
    version: Literal[1, 2, 3]
    meta: ModelMeta
    features: list[str]
    """Non-class features, in the order of the model's first columns."""
    classes: Annotated[list[str], Field(min_length=1)]
    """Request classes; with more than one, a one-hot column each after the features."""
    posterior: PosteriorData
    calibration: CalibrationData | None = None
    """Version 2: the interval's calibration (required); version 1 has none (scale 1)."""
    floor: FloorData | None = None
    """Version 3: the provider floor (required); versions 1 and 2 have none (a floor of 0)."""


@dataclass
class AttributionModel:
    """A loaded bundle: the GP, ready to predict, and what the file said of it."""

    features: tuple[str, ...]
    classes: tuple[str, ...]
    gp: SparseGP
    data: ModelData

    @property
    def floor_seconds(self) -> float:
        """Predicted excess at or below this is not attributed to the provider."""
        return self.data.floor.seconds if self.data.floor is not None else 0.0

    def save(self, path: Path) -> None:
        write_json(path, self.data.model_dump(mode="json"))


def _columns(features: list[str], classes: list[str]) -> int:
    return len(features) + (len(classes) if len(classes) > 1 else 0)


def build_model_bundle(
    gp: SparseGP,
    features: tuple[str, ...],
    classes: tuple[str, ...],
    meta: ModelMeta,
    calibration: IntervalCalibration | None = None,
    floor: FloorData | None = None,
) -> AttributionModel:
    """The bundle of a fitted ``gp`` over ``features`` and ``classes``; with ``calibration``,
    its interval scaled by it (``gp`` itself as fitted, scale 1), else marked uncalibrated;
    with ``floor``, its provider floor, else none (0)."""
    p = gp.posterior_
    if p.interval_scale != 1.0 or p.class_interval_scale is not None:
        message = "give the GP as fitted (interval scale 1) and its calibration apart"
        raise InputError("attribution model", [Problem("interval_scale", message)])
    cal = (
        CalibrationData(method="none", scale=1.0)
        if calibration is None
        else CalibrationData(
            method="leave-one-group-out" if calibration.method == METHOD else "none",
            level=calibration.level,
            scale=calibration.scale,
            class_scales=calibration.strata if len(classes) > 1 else {},
            groups=[GroupData(**vars(g)) for g in calibration.groups],
        )
    )
    data = ModelData(
        format=FORMAT,
        version=VERSION,
        meta=meta,
        features=[f for f in features if not f.startswith(CLASS_PREFIX)],
        classes=list(classes),
        posterior=PosteriorData(
            x_mean=p.x_scaler.mean.tolist(),
            x_scale=p.x_scaler.scale.tolist(),
            y_mean=p.y_mean,
            y_scale=p.y_scale,
            lengthscale=p.lengthscale.tolist(),
            variance=p.variance,
            noise_variance=p.noise_variance,
            inducing=p.inducing.tolist(),
            woodbury_vector=p.woodbury_vector.tolist(),
            woodbury_inv=p.woodbury_inv.tolist(),
            linear=[] if p.linear is None else p.linear.tolist(),
        ),
        calibration=cal,
        floor=floor or FloorData(method="none"),
    )
    return _model(data, "attribution model")


def _model(data: ModelData, source: str) -> AttributionModel:
    problems: list[Problem] = []
    for i, f in enumerate(data.features):
        if f not in KNOWN_FEATURES:
            problems.append(Problem(f"features[{i}]", f"unknown feature {f!r}"))
    if len(set(data.classes)) != len(data.classes):
        problems.append(Problem("classes", "a class named twice"))
    d = _columns(data.features, data.classes)
    p = data.posterior
    m = len(p.woodbury_vector)
    for name, n in (("x_mean", len(p.x_mean)), ("x_scale", len(p.x_scale))):
        if n != d:
            problems.append(Problem(f"posterior.{name}", f"{n} values for {d} columns"))
    if len(p.lengthscale) != d:
        problems.append(Problem("posterior.lengthscale", f"{len(p.lengthscale)} values for {d}"))
    if len(p.inducing) != m or any(len(row) != d for row in p.inducing):
        problems.append(Problem("posterior.inducing", f"not {m} rows of {d} columns"))
    if p.linear and len(p.linear) != d:
        problems.append(Problem("posterior.linear", f"{len(p.linear)} values for {d} columns"))
    if len(p.woodbury_inv) != m or any(len(row) != m for row in p.woodbury_inv):
        problems.append(Problem("posterior.woodbury_inv", f"not {m} × {m}"))
    if data.version >= 2 and data.calibration is None:
        problems.append(Problem("calibration", "missing (required from version 2)"))
    if data.version == 1 and data.calibration is not None:
        problems.append(Problem("calibration", "not part of version 1"))
    if data.version >= 3 and data.floor is None:
        problems.append(Problem("floor", "missing (required from version 3)"))
    if data.version < 3 and data.floor is not None:
        problems.append(Problem("floor", f"not part of version {data.version}"))
    fl = data.floor
    if fl is not None and fl.method == "uncontended-quantile" and fl.quantile is None:
        problems.append(Problem("floor.quantile", "missing for an uncontended-quantile floor"))
    if fl is not None and fl.method == "none" and fl.seconds != 0:
        problems.append(Problem("floor.seconds", "must be 0 for method none"))
    cal = data.calibration
    if cal is not None and cal.class_scales:
        unknown = sorted(set(cal.class_scales) - set(data.classes))
        if unknown or len(data.classes) < 2:
            message = f"classes the model has not: {', '.join(unknown) or 'one class only'}"
            problems.append(Problem("calibration.class_scales", message))
    if problems:
        raise InputError(source, problems)
    gp = SparseGP(data.meta.n_inducing, data.meta.max_iters, data.meta.seed)
    gp.posterior_ = SparsePosterior(
        x_scaler=Standardiser(np.asarray(p.x_mean), np.asarray(p.x_scale)),
        y_mean=p.y_mean,
        y_scale=p.y_scale,
        inducing=np.asarray(p.inducing, dtype=np.float64).reshape(m, d),
        lengthscale=np.asarray(p.lengthscale, dtype=np.float64),
        variance=p.variance,
        noise_variance=p.noise_variance,
        woodbury_vector=np.asarray(p.woodbury_vector, dtype=np.float64),
        woodbury_inv=np.asarray(p.woodbury_inv, dtype=np.float64).reshape(m, m),
        linear=np.asarray(p.linear, dtype=np.float64) if p.linear else None,
        interval_scale=cal.scale if cal else 1.0,
        class_interval_scale=np.asarray([cal.class_scales.get(c, cal.scale) for c in data.classes])
        if cal and cal.class_scales
        else None,
    )
    gp.n_train_ = data.meta.n_train
    return AttributionModel(tuple(data.features), tuple(data.classes), gp, data)


def load_attribution_model(path: Path) -> AttributionModel:
    """Read an attribution model bundle."""
    data = load_versioned(path, "attribution model", FORMAT, READABLE, ModelData)
    return _model(data, str(path))


__all__ = [
    "FORMAT",
    "VERSION",
    "AttributionModel",
    "CalibrationData",
    "FloorData",
    "ModelData",
    "ModelMeta",
    "build_model_bundle",
    "load_attribution_model",
]

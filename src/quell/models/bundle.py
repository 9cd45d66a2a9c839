"""The model bundle: everything PRIMA learned about one workload on one kind of instance, in
one versioned JSON file — the probe's isolation table, the RTM and IM measurements, and what
they were measured on. ``quell prima profile`` writes it; policies load it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quell.core.files import write_json
from quell.core.schema import load_versioned
from quell.errors import InputError, Problem
from quell.models.capacity import CapacityModel, InterferenceModel, ResponseTimeModel
from quell.probe.table import ProbeTable

FORMAT: Final = "quell.prima.bundle"
VERSION: Final = 2
READABLE: Final = (1, 2)
"""Version 2 adds the instance's U and utilisation level to each IM point."""

Finite = Annotated[float, Field(allow_inf_nan=False)]


class _JsonModel(BaseModel):
    """Unknown keys refused, values frozen; not strict, since JSON has no tuples or ints apart
    from floats."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BundleMeta(_JsonModel):
    workload: Annotated[str, Field(min_length=1)]
    """What the service was loaded with (e.g. ``file-100k``, ``video``); a bundle is only valid
    for the workload it was built on."""
    instance_type: Annotated[str, Field(min_length=1)]
    environment: Literal["lab", "sim", "live"]
    created: str
    probe_kind: Literal["network"] = "network"
    probe_period_s: Annotated[float, Field(gt=0)]
    probe_size_bytes: Annotated[int, Field(gt=0)]
    source: str = ""
    """Where the measurements came from (a profile directory)."""


class ProbeTableData(_JsonModel):
    util_pct: Annotated[list[Finite], Field(min_length=2)]
    r_iso_s: Annotated[
        list[Annotated[float, Field(gt=0, allow_inf_nan=False)]], Field(min_length=2)
    ]
    ci_width_ratio: list[float]
    samples: list[Annotated[int, Field(ge=0)]]
    rel_width: Annotated[float, Field(gt=0)]
    confidence: Annotated[float, Field(gt=0, lt=1)]

    @model_validator(mode="after")
    def _same_length(self) -> ProbeTableData:
        n = len(self.util_pct)
        if not (len(self.r_iso_s) == len(self.ci_width_ratio) == len(self.samples) == n):
            raise ValueError("util_pct, r_iso_s, ci_width_ratio and samples differ in length")
        if any(b <= a for a, b in zip(self.util_pct, self.util_pct[1:], strict=False)):
            raise ValueError("util_pct must increase")
        return self


class BundleData(_JsonModel):
    format: Literal["quell.prima.bundle"]
    version: Literal[1, 2]
    meta: BundleMeta
    probe_table: ProbeTableData
    rtm_points: Annotated[
        list[tuple[Finite, Finite, Annotated[float, Field(gt=0)]]], Field(min_length=4)
    ]
    """(U %, SF, mean response time s) per measured cell."""
    im_points: Annotated[
        list[tuple[Finite, Finite] | tuple[Finite, Finite, Finite, Finite]], Field(min_length=2)
    ]
    """(U_total %, SF) per measured cell, or (U_total %, SF, U %, level %) where the IM has one
    curve per utilisation level of the instance (``InterferenceModel``)."""

    @model_validator(mode="after")
    def _one_im_form(self) -> BundleData:
        if len({len(p) for p in self.im_points}) > 1:
            raise ValueError("im_points mix (U_total, SF) and (U_total, SF, U, level) points")
        return self

    im_resolution_pct: Annotated[float, Field(gt=0)] = 2.5


@dataclass
class ModelBundle:
    """A loaded bundle: the fitted probe table, RTM and IM, and their metadata."""

    meta: BundleMeta
    probe_table: ProbeTable
    rtm: ResponseTimeModel
    im: InterferenceModel
    data: BundleData

    def capacity_model(self, target_rt_s: float) -> CapacityModel:
        return CapacityModel(self.rtm, self.im, target_rt_s).fit()

    def save(self, path: Path) -> None:
        save_bundle(self.data, path)


def build_bundle(
    meta: BundleMeta,
    probe_table: ProbeTable,
    rtm_points: list[tuple[float, float, float]],
    im_points: list[tuple[float, float]] | list[tuple[float, float, float, float]],
    im_resolution_pct: float = 2.5,
) -> ModelBundle:
    data = BundleData(
        format=FORMAT,
        version=VERSION,
        meta=meta,
        probe_table=ProbeTableData.model_validate(probe_table.to_dict()),
        rtm_points=rtm_points,
        im_points=list(im_points),
        im_resolution_pct=im_resolution_pct,
    )
    return _fit(data, "bundle")


def save_bundle(data: BundleData, path: Path) -> None:
    """Write atomically, so a reader never sees half a bundle."""
    write_json(path, data.model_dump(mode="json"))


def _fit(data: BundleData, source: str) -> ModelBundle:
    rtm_u, rtm_s, rtm_r = zip(*data.rtm_points, strict=True)
    im_cols = list(zip(*data.im_points, strict=True))
    table = ProbeTable.from_dict(data.probe_table.model_dump())
    try:
        rtm = ResponseTimeModel().fit(list(rtm_u), list(rtm_s), list(rtm_r))
        im = InterferenceModel(data.im_resolution_pct).fit(
            list(im_cols[0]),
            list(im_cols[1]),
            list(im_cols[2]) if len(im_cols) == 4 else None,
            list(im_cols[3]) if len(im_cols) == 4 else None,
        )
    except InputError as exc:
        raise InputError(source, exc.problems) from None
    except Exception as exc:  # scipy's triangulation refuses degenerate point sets
        raise InputError(source, [Problem("rtm_points", f"cannot interpolate: {exc}")]) from None
    return ModelBundle(data.meta, table, rtm, im, data)


def load_bundle(path: Path, workload: str | None = None) -> ModelBundle:
    """Read and fit a bundle. A missing, unreadable, corrupt or foreign file, or one built for
    another ``workload``, raises ``InputError`` naming the problem."""
    source = str(path)
    data = load_versioned(path, "model bundle", FORMAT, READABLE, BundleData)
    if workload is not None and data.meta.workload != workload:
        raise InputError(
            source,
            [
                Problem(
                    "meta.workload",
                    f"built for workload {data.meta.workload!r}, not {workload!r}",
                )
            ],
        )
    bad = [p for p in data.rtm_points if not all(math.isfinite(v) for v in p)]
    if bad:
        raise InputError(source, [Problem("rtm_points", "non-finite values")])
    return _fit(data, source)

"""The ``service`` section: how the simulator models each instance. The lab ignores it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ServiceModel(_Strict):
    discipline: Literal["ps", "fcfs"] = "ps"
    """Processor sharing (default) or first-come-first-served with ``workers`` servers."""
    workers: Annotated[int, Field(ge=1, le=10_000)] = 1
    queue_limit: Annotated[int, Field(ge=1)] | None = None
    """Admission limit: requests in the instance (in service + waiting) beyond which it refuses."""
    capacity_bytes_per_s: Annotated[float, Field(gt=0)] | None = None
    """Instance capacity when its host has no link rate; demand = request bytes / capacity."""

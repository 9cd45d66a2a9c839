"""Scenario-file forms of arrival processes and session workloads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Rate = Annotated[float, Field(gt=0, le=10_000_000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PoissonSpec(_Strict):
    process: Literal["poisson"]
    rate_rps: Rate


class DeterministicSpec(_Strict):
    process: Literal["deterministic"]
    rate_rps: Rate


class RateStep(_Strict):
    at_s: Annotated[float, Field(ge=0)]
    rate_rps: Annotated[float, Field(ge=0, le=10_000_000)]


class ScheduleSpec(_Strict):
    """Poisson arrivals whose rate follows steps, or ramps linearly between the points."""

    process: Literal["schedule"]
    points: Annotated[list[RateStep], Field(min_length=1)]
    shape: Literal["steps", "ramp"] = "steps"


class Mmpp2Spec(_Strict):
    """Two-state Markov-modulated Poisson process fitted to a mean rate and index of dispersion."""

    process: Literal["mmpp2"]
    rate_rps: Rate
    dispersion: Annotated[float, Field(ge=1, le=100_000)]
    peak_ratio: Annotated[float, Field(gt=1, le=10_000)] = 10.0
    burst_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1


class TraceSpec(_Strict):
    """Replay arrival times (seconds, one per line) from a file, relative to the scenario file."""

    process: Literal["trace"]
    path: Annotated[str, Field(min_length=1)]
    time_scale: Annotated[float, Field(gt=0)] = 1.0


ArrivalSpec = Annotated[
    PoissonSpec | DeterministicSpec | ScheduleSpec | Mmpp2Spec | TraceSpec,
    Field(discriminator="process"),
]


class SessionSpec(_Strict):
    """PRIMA's video-streaming sessions (Table I): sessions arrive by ``arrival``; each requests
    chunks of one Zipf-popular video, the first ``prefetch_chunks`` at once, then one per
    ``chunk_seconds``."""

    kind: Literal["video"] = "video"
    videos: Annotated[int, Field(ge=1, le=100_000)] = 100
    zipf_alpha: Annotated[float, Field(gt=0, le=5)] = 0.8
    chunk_seconds: Annotated[float, Field(gt=0)] = 10.0
    mean_chunk_bytes: Annotated[int, Field(gt=0)] = 500_000
    mean_video_bytes: Annotated[int, Field(gt=0)] = 11_000_000
    prefetch_chunks: Annotated[int, Field(ge=0)] = 3
    catalog_seed: Annotated[int, Field(ge=0)] | None = None
    """Seed of the video library (each video's size and chunk count); the scenario's seed if
    unset. Scenarios that give the same one serve the same videos whatever their own seeds, as
    one service does: the profile's cells and the experiments that use its models."""

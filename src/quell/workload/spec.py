"""Scenario-file forms of arrival processes and session workloads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from quell.core.schema import StrictModel

Rate = Annotated[float, Field(gt=0, le=10_000_000)]


class PoissonSpec(StrictModel):
    process: Literal["poisson"]
    rate_rps: Rate


class DeterministicSpec(StrictModel):
    process: Literal["deterministic"]
    rate_rps: Rate


class RateStep(StrictModel):
    at_s: Annotated[float, Field(ge=0)]
    rate_rps: Annotated[float, Field(ge=0, le=10_000_000)]


class ScheduleSpec(StrictModel):
    """Poisson arrivals whose rate follows steps, or ramps linearly between the points."""

    process: Literal["schedule"]
    points: Annotated[list[RateStep], Field(min_length=1)]
    shape: Literal["steps", "ramp"] = "steps"


class Mmpp2Spec(StrictModel):
    """Two-state Markov-modulated Poisson process fitted to a mean rate and index of dispersion."""

    process: Literal["mmpp2"]
    rate_rps: Rate
    dispersion: Annotated[float, Field(ge=1, le=100_000)]
    peak_ratio: Annotated[float, Field(gt=1, le=10_000)] = 10.0
    burst_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1


class TraceSpec(StrictModel):
    """Replay arrival times (seconds, one per line) from a file, relative to the scenario file."""

    process: Literal["trace"]
    path: Annotated[str, Field(min_length=1)]
    time_scale: Annotated[float, Field(gt=0)] = 1.0


class ClosedLoopSpec(StrictModel):
    """Closed-loop users: each of ``users`` sends a request, waits for the whole answer, thinks
    an exponential time of mean ``think_time_s`` and sends the next, on one kept-alive
    connection when ``keepalive`` (a new connection per request otherwise). Users start evenly
    over the first ``ramp_s``. The load follows the service: N / (R + Z) requests per second
    (the interactive response-time law), so there is no schedule to precompute."""

    process: Literal["closed"]
    users: Annotated[int, Field(ge=1, le=100_000)]
    think_time_s: Annotated[float, Field(ge=0, le=3600)]
    keepalive: bool = True
    ramp_s: Annotated[float, Field(ge=0, le=3600)] = 0.0


ArrivalSpec = Annotated[
    PoissonSpec | DeterministicSpec | ScheduleSpec | Mmpp2Spec | TraceSpec | ClosedLoopSpec,
    Field(discriminator="process"),
]
"""How requests arrive: open-loop processes (a schedule fixed in advance) or closed-loop users."""

OPEN_LOOP_PROCESSES = ("poisson", "deterministic", "schedule", "mmpp2", "trace")


class SessionSpec(StrictModel):
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

"""Scenario-file forms of arrival processes and session workloads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from quell.core.schema import StrictModel

Rate = Annotated[float, Field(gt=0, le=10_000_000)]


class PoissonSpec(StrictModel):
    """Poisson arrivals at a constant rate."""

    process: Literal["poisson"]
    rate_rps: Rate
    """Mean arrivals per second."""


class DeterministicSpec(StrictModel):
    """Evenly spaced arrivals."""

    process: Literal["deterministic"]
    rate_rps: Rate
    """Arrivals per second, one every 1 / rate seconds from time 0."""


class RateStep(StrictModel):
    """One point of a rate schedule."""

    at_s: Annotated[float, Field(ge=0)]
    """Seconds from the start of the run."""
    rate_rps: Annotated[float, Field(ge=0, le=10_000_000)]
    """Mean arrivals per second from here on."""


class ScheduleSpec(StrictModel):
    """Poisson arrivals whose rate follows steps, or ramps linearly between the points."""

    process: Literal["schedule"]
    points: Annotated[list[RateStep], Field(min_length=1)]
    """The rate from each point's time on (none before the first point)."""
    shape: Literal["steps", "ramp"] = "steps"
    """``steps``: each point's rate holds until the next; ``ramp``: the rate moves linearly from one
    point to the next."""


class Mmpp2Spec(StrictModel):
    """Two-state Markov-modulated Poisson process fitted to a mean rate and index of dispersion."""

    process: Literal["mmpp2"]
    rate_rps: Rate
    """Mean arrivals per second over both states."""
    dispersion: Annotated[float, Field(ge=1, le=100_000)]
    """The counts' index of dispersion over long windows (variance over mean): 1 is Poisson (and
    gives plain Poisson arrivals), more is burstier."""
    peak_ratio: Annotated[float, Field(gt=1, le=10_000)] = 10.0
    """The burst state's rate over the other state's."""
    burst_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1
    """The share of time in the burst state."""


class TraceSpec(StrictModel):
    """Replay arrival times (seconds, one per line) from a file, relative to the scenario file."""

    process: Literal["trace"]
    path: Annotated[str, Field(min_length=1)]
    """The file of arrival times (sorted, from 0), relative to the scenario's folder."""
    time_scale: Annotated[float, Field(gt=0)] = 1.0
    """Each time is multiplied by this (2: half the rate); times past the run's end are dropped."""


class ClosedLoopSpec(StrictModel):
    """Closed-loop users: each of ``users`` sends a request, waits for the whole answer, thinks
    an exponential time of mean ``think_time_s`` and sends the next, on one kept-alive
    connection when ``keepalive`` (a new connection per request otherwise). Users start evenly
    over the first ``ramp_s``. The load follows the service: N / (R + Z) requests per second
    (the interactive response-time law), so there is no schedule to precompute."""

    process: Literal["closed"]
    users: Annotated[int, Field(ge=1, le=100_000)]
    """The number of users, N."""
    think_time_s: Annotated[float, Field(ge=0, le=3600)]
    """Z: each user's mean think time between an answer and its next request."""
    keepalive: bool = True
    """Each user keeps one connection for all its requests (else a new one per request)."""
    ramp_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """Users start evenly over this long from time 0."""


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
    """The session's kind; ``video`` is the one there is."""
    videos: Annotated[int, Field(ge=1, le=100_000)] = 100
    """Videos in the library."""
    zipf_alpha: Annotated[float, Field(gt=0, le=5)] = 0.8
    """α of the Zipf popularity a session picks its video by (larger: the popular few get more of
    the sessions)."""
    chunk_seconds: Annotated[float, Field(gt=0)] = 10.0
    """Playing time of one chunk: after the prefetch, a session asks for one chunk this often."""
    mean_chunk_bytes: Annotated[int, Field(gt=0)] = 500_000
    """Mean size of a chunk (each video is cut into chunks of about this size)."""
    mean_video_bytes: Annotated[int, Field(gt=0)] = 11_000_000
    """Mean size of a video (lognormal sizes)."""
    prefetch_chunks: Annotated[int, Field(ge=0)] = 3
    """Chunks asked for at once when a session starts (filling its buffer)."""
    catalog_seed: Annotated[int, Field(ge=0)] | None = None
    """Seed of the video library (each video's size and chunk count); the scenario's seed if
    unset. Scenarios that give the same one serve the same videos whatever their own seeds, as
    one service does: the profile's cells and the experiments that use its models."""

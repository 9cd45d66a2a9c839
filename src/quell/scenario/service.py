"""The ``service`` section: how the simulator models each instance. The lab ignores it.

Every key has a default, so ``service: {}`` (or no section at all) gives processor-sharing
instances whose bottleneck is their host's link."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Seconds = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SizeModel(_Strict):
    """Request size (service demand = size / capacity). ``mean_bytes: null`` keeps the mean of
    each request's own size (the file it asks for); the distribution then only adds spread."""

    distribution: Literal["exponential", "deterministic", "lognormal", "empirical"]
    mean_bytes: Annotated[float, Field(gt=0)] | None = None
    sigma: Annotated[float, Field(gt=0, le=5)] = 1.0
    """Lognormal only: standard deviation of log(size)."""
    values_bytes: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] | None = None
    """Empirical only: sizes drawn uniformly from this list."""


class ScheduledSlowdown(_Strict):
    """Slowdown factor set at given times (a factor of 2 halves the instance's speed)."""

    kind: Literal["schedule"]
    instances: list[str] | None = None
    """Instance ids; ``None`` means every instance of the scenario."""
    points: Annotated[list[SlowdownPoint], Field(min_length=1)]


class SlowdownPoint(_Strict):
    at_s: Annotated[float, Field(ge=0)]
    factor: Annotated[float, Field(ge=1, le=1000)]


class OnOffSlowdown(_Strict):
    """Alternating on/off periods; while on, the instance is ``factor`` times slower."""

    kind: Literal["onoff"]
    instances: list[str] | None = None
    factor: Annotated[float, Field(ge=1, le=1000)]
    on_seconds: Seconds
    off_seconds: Seconds
    durations: Literal["exponential", "fixed"] = "exponential"
    """Exponential periods with these means, or exactly these lengths."""
    start_on: bool = False


Slowdown = Annotated[ScheduledSlowdown | OnOffSlowdown, Field(discriminator="kind")]


class ServiceModel(_Strict):
    discipline: Literal["ps", "fcfs"] = "ps"
    """Processor sharing (default) or first-come-first-served with ``workers`` servers."""
    workers: Annotated[int, Field(ge=1, le=10_000)] = 1
    queue_limit: Annotated[int, Field(ge=1)] | None = None
    """Admission limit: requests in the instance (in service + waiting) beyond which it refuses."""
    capacity_bytes_per_s: Annotated[float, Field(gt=0)] | None = None
    """Instance capacity when its host has no link rate; demand = request bytes / capacity.
    With FCFS each of the ``workers`` serves at capacity / workers."""
    size: SizeModel | None = None
    """Request-size distribution; ``None`` uses each requested file's size as it is."""
    slowdown: list[Slowdown] = []
    stress_ng_slowdown_per_worker: Annotated[float, Field(ge=0, le=100)] = 0.5
    """While a stress-ng antagonist runs on a host, its instances are 1 + this × workers slower."""
    boot_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    """Delay before an added instance takes requests."""
    probe_bytes: Annotated[int, Field(ge=0)] = 20_000
    """Size of the probe request sent to every instance once per interval (0: no probe)."""
    dispatch: Literal["weighted_rr", "plain_rr", "leastconn"] | None = None
    """Override the load balancer's algorithm: ``None`` follows ``load_balancer.algorithm``
    (roundrobin = weighted round robin as in HAProxy)."""
    request_log: Literal["auto", "on", "off"] = "auto"
    """Keep per-request records for the run store (``auto``: when the run has ≤ 500,000 requests)."""


ScheduledSlowdown.model_rebuild()

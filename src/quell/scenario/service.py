"""The ``service`` section: how the simulator models each instance. The lab ignores it.

Every key has a default, so ``service: {}`` (or no section at all) gives processor-sharing
instances whose bottleneck is their host's link."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from quell.core.schema import StrictModel

Seconds = Annotated[float, Field(gt=0)]
Bytes = Annotated[float, Field(gt=0)]


class ExponentialSize(StrictModel):
    """Request sizes (service demand = size / capacity) exponential with mean ``mean_bytes``."""

    distribution: Literal["exponential"]
    """The distribution each request's size is drawn from."""
    mean_bytes: Bytes | None = None
    """``null``: each request's own size (the file it asks for) is its mean: the distribution
    only adds spread (so for ``deterministic`` and ``lognormal``)."""


class DeterministicSize(StrictModel):
    """Every request of ``mean_bytes``."""

    distribution: Literal["deterministic"]
    """The distribution each request's size is drawn from."""
    mean_bytes: Bytes | None = None
    """``null``: each request of its own file's size."""


class LognormalSize(StrictModel):
    """Lognormal request sizes of mean ``mean_bytes``."""

    distribution: Literal["lognormal"]
    """The distribution each request's size is drawn from."""
    mean_bytes: Bytes | None = None
    """``null``: each request's own size is its mean."""
    sigma: Annotated[float, Field(gt=0, le=5)] = 1.0
    """Standard deviation of log(size)."""


class EmpiricalSize(StrictModel):
    """Request sizes drawn uniformly from ``values_bytes``, whatever the request asks for."""

    distribution: Literal["empirical"]
    """The distribution each request's size is drawn from."""
    values_bytes: Annotated[list[Bytes], Field(min_length=1)]
    """The sizes drawn from, each as likely."""


SizeModel = Annotated[
    ExponentialSize | DeterministicSize | LognormalSize | EmpiricalSize,
    Field(discriminator="distribution"),
]
"""``service.size``: one model per distribution (``quell.sim.service`` draws from each)."""


class ScheduledSlowdown(StrictModel):
    """Slowdown factor set at given times (a factor of 2 halves the instance's speed)."""

    kind: Literal["schedule"]
    instances: list[str] | None = None
    """Instance ids; ``None`` means every instance of the scenario."""
    points: Annotated[list[SlowdownPoint], Field(min_length=1)]
    """From each point's time on, the instances are its factor times slower."""


class SlowdownPoint(StrictModel):
    """One step of a slowdown schedule."""

    at_s: Annotated[float, Field(ge=0)]
    """From this time on (seconds from the start of the run)."""
    factor: Annotated[float, Field(ge=1, le=1000)]
    """This slowdown (1: full speed)."""


class OnOffSlowdown(StrictModel):
    """Alternating on/off periods; while on, the instance is ``factor`` times slower."""

    kind: Literal["onoff"]
    instances: list[str] | None = None
    """Instance ids; ``None`` means every instance of the scenario."""
    factor: Annotated[float, Field(ge=1, le=1000)]
    """How many times slower an instance is while on."""
    on_seconds: Seconds
    """Mean (exponential) or exact (fixed) length of an on period."""
    off_seconds: Seconds
    """Mean (exponential) or exact (fixed) length of an off period."""
    durations: Literal["exponential", "fixed"] = "exponential"
    """Exponential periods with these means, or exactly these lengths."""
    start_on: bool = False
    """On at time 0 (else off)."""


Slowdown = Annotated[ScheduledSlowdown | OnOffSlowdown, Field(discriminator="kind")]


class HostInterference(StrictModel):
    """A co-located neighbour on each of ``hosts`` that, while on, takes ``bitrate_mbit`` of the
    host's link (like iperf3 with a bitrate: the link's capacity for everyone else drops by that
    much, at most to 5 %). Each host switches on and off independently, from its own random
    stream; several sources on one host add up. Instances added later on a host suffer it too.
    """

    hosts: Annotated[list[str], Field(min_length=1)] | None = None
    """Host ids (each needs ``link_mbit``); ``None`` means every host of the scenario."""
    bitrate_mbit: Annotated[float, Field(gt=0, le=100_000)]
    """What the neighbour takes of the host's link while on, in Mbit/s."""
    on_seconds: Seconds
    """Mean (exponential) or exact (fixed) length of an on period."""
    off_seconds: Seconds
    """Mean (exponential) or exact (fixed) length of an off period."""
    durations: Literal["exponential", "fixed"] = "exponential"
    """Exponential periods with these means, or exactly these lengths."""
    start: Literal["stationary", "on", "off"] = "stationary"
    """State at time 0: ``stationary`` draws it (on with probability on / (on + off)) and the
    time left in it as if the source had been running for ever, so hosts are out of step."""


class ApacheModel(StrictModel):
    """How the simulator models an apache instance (``server: apache``): a CPU of ``cpus``
    cores shared by the requests in service (processor sharing, at most one core each), in
    front of it MaxRequestWorkers workers and php-fpm's max_children children (the settings
    are the instance's ``apache`` section; ``ReconfigureServer`` changes them). A request's CPU
    work in seconds is ``request_cpu_s`` + its bytes / ``bytes_per_cpu_s`` (+ a PHP page's
    touches × ``touch_cpu_s``, + ``connection_cpu_s`` when it comes on a new connection),
    times the instance's slowdown. docs/reference/simulator.md derives the defaults."""

    cpus: Annotated[float, Field(gt=0, le=1024)] | None = None
    """Cores of the instance; ``None``: as many as the instance (or else its host) is pinned
    to, 2 when neither is."""
    request_cpu_s: Annotated[float, Field(ge=0, le=10)] = 0.0005
    """CPU time of every request (parsing, headers, logging)."""
    bytes_per_cpu_s: Annotated[float, Field(gt=0)] = 1e9
    """Bytes of a response one core sends per second."""
    touch_cpu_s: Annotated[float, Field(ge=0, le=1e-3)] = 1e-7
    """CPU time of one touch of a PHP page's working set (``pages[].touches``)."""
    connection_cpu_s: Annotated[float, Field(ge=0, le=10)] = 0.004
    """CPU time of opening a connection (accept, TCP handshake, a worker taking it)."""
    worker_overhead: Annotated[float, Field(ge=0, le=1)] = 0.004
    """Overhead of each request in service (context switches, cache footprint): with n in
    service each is served 1 + this × n times slower."""
    worker_overhead_per_stress_ng_worker: Annotated[float, Field(ge=0, le=1)] = 0.004
    """What each stress-ng worker on the host adds to ``worker_overhead`` (a contested cache
    makes every worker's footprint costlier)."""
    memory_bytes: Annotated[float, Field(gt=0)] | None = 1e9
    """Memory for the workers and php-fpm children; ``None``: unlimited."""
    worker_memory_bytes: Annotated[float, Field(ge=0)] = 2e6
    """Memory each of MaxRequestWorkers' workers takes."""
    php_child_memory_bytes: Annotated[float, Field(ge=0)] = 3e6
    """Memory each of php-fpm's children takes."""
    swap_slowdown: Annotated[float, Field(ge=0, le=1000)] = 4.0
    """Memory pressure: with workers × their memory + children × theirs = M over
    ``memory_bytes``, the instance is 1 + this × (M / ``memory_bytes`` − 1) slower."""
    listen_backlog: Annotated[int, Field(ge=0)] | None = None
    """Requests that may wait for a worker (ListenBacklog); beyond, refused. ``None``: no
    limit (``service.queue_limit`` does not apply to apache instances)."""
    reload_s: Annotated[float, Field(ge=0, le=600)] | None = None
    """A graceful ``ReconfigureServer`` (a restart of the children) costs the instance
    ``reload_capacity_share`` of its CPU for this long. No default: it is a measured figure
    (docs/reference/simulator.md); without it a graceful reconfiguration is refused, naming these keys
    (an online one, ``graceful=False``, costs nothing)."""
    reload_capacity_share: Annotated[float, Field(ge=0, lt=1)] | None = None
    """The share of the instance's CPU a graceful ``ReconfigureServer`` takes for ``reload_s`` (a
    measured figure, like ``reload_s``)."""

    @model_validator(mode="after")
    def _reload_given_whole(self) -> ApacheModel:
        """``reload_s`` and ``reload_capacity_share`` are given together, or neither."""
        if (self.reload_s is None) != (self.reload_capacity_share is None):
            raise ValueError("give reload_s and reload_capacity_share together, or neither")
        return self


class ServiceModel(StrictModel):
    """How the simulator serves each instance's requests: the discipline, the capacity, the request
    sizes, slowdowns and neighbours, and how apache instances are modelled."""

    discipline: Literal["ps", "fcfs"] = "ps"
    """Processor sharing (default) or first-come-first-served with ``workers`` servers."""
    workers: Annotated[int, Field(ge=1, le=10_000)] = 1
    """With ``fcfs``: the servers of each instance."""
    queue_limit: Annotated[int, Field(ge=1)] | None = None
    """Admission limit: requests in the instance (in service + waiting) beyond which it refuses."""
    capacity_bytes_per_s: Annotated[float, Field(gt=0)] | None = None
    """Instance capacity when its host has no link rate; demand = request bytes / capacity.
    With FCFS each of the ``workers`` serves at capacity / workers."""
    size: SizeModel | None = None
    """Request-size distribution; ``None`` uses each requested file's size as it is."""
    slowdown: list[Slowdown] = []
    """Sources that make instances slower for a while: at given times, or on and off at random."""
    stress_ng_slowdown_per_worker: Annotated[float, Field(ge=0, le=100)] = 0.5
    """While a stress-ng antagonist runs on a host, its instances are 1 + this × workers slower."""
    interference: list[HostInterference] = []
    """Neighbours that take part of hosts' links, on and off at random (see ``HostInterference``)."""
    dispatch: Literal["weighted_rr", "plain_rr", "leastconn"] | None = None
    """Override the load balancer's algorithm: ``None`` follows ``load_balancer.algorithm``
    (roundrobin = weighted round robin as in HAProxy)."""
    apache: ApacheModel = ApacheModel()
    """How apache instances are modelled (see ``ApacheModel``)."""
    request_log: Literal["auto", "on", "off"] = "auto"
    """Keep per-request records for the run store (``auto``: when the run has ≤ 500,000 requests)."""


ScheduledSlowdown.model_rebuild()

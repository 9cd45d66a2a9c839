"""Typed scenario model. Unknown keys and wrong types are rejected; see ``load.py`` for the checks
that span several sections (unknown host, event after the end...)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from quell.core.schema import Name, StrictModel
from quell.policy import POLICIES
from quell.scenario.service import ServiceModel
from quell.workload.spec import ArrivalSpec, SessionSpec

Identifier = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,11}$")]
"""Ids become parts of namespace, cgroup and HAProxy names, so they are short and plain."""
CpuList = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class Host(StrictModel):
    """One physical machine: everything placed on it shares its link and, if pinned, its CPUs."""

    id: Identifier
    link_mbit: Annotated[float, Field(gt=0, le=100_000)] | None = None
    """Rate of the host's shared link; ``None`` leaves it unshaped."""
    cpus: CpuList | None = None


ServerKind = Literal["lighttpd", "nginx", "apache"]


class ApacheSettings(StrictModel):
    """Apache httpd (worker or event MPM) with php-fpm behind it (proxy_fcgi): the three
    settings IC2 reconfigures, and the bounds they can move within by a graceful restart.

    ``server_limit`` × ``threads_per_child`` is the most MaxRequestWorkers can become without a
    full restart (Apache refuses to change ServerLimit or ThreadsPerChild on a graceful one), and
    MaxRequestWorkers must be a multiple of ``threads_per_child``: Apache lowers a value that is
    not, silently, so quell refuses it instead."""

    mpm: Literal["worker", "event"] = "worker"
    threads_per_child: Annotated[int, Field(ge=1, le=64)] = 8
    server_limit: Annotated[int, Field(ge=1, le=256)] = 16
    max_request_workers: Annotated[int, Field(ge=1, le=16_384)] = 32
    """MaxRequestWorkers (the paper's MaxClients, MXC): requests served at once."""
    keepalive_timeout_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    """KeepAliveTimeout (KAT): how long an idle kept-alive connection keeps its worker."""
    php_max_children: Annotated[int, Field(ge=1, le=4096)] = 16
    """php-fpm's pm.max_children (PHP): PHP requests executing at once."""

    @model_validator(mode="after")
    def _within_bounds(self) -> ApacheSettings:
        problems = []
        if self.max_request_workers % self.threads_per_child:
            problems.append(
                f"max_request_workers ({self.max_request_workers}) must be a multiple of "
                f"threads_per_child ({self.threads_per_child})"
            )
        most = self.server_limit * self.threads_per_child
        if self.max_request_workers > most:
            problems.append(
                f"max_request_workers ({self.max_request_workers}) must be at most "
                f"server_limit × threads_per_child ({most})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Instance(StrictModel):
    id: Identifier
    host: Identifier
    server: ServerKind = "lighttpd"
    cpus: CpuList | None = None
    """CPUs to pin the server to; defaults to the host's CPUs."""
    weight: Annotated[int, Field(ge=0, le=256)] = 100
    maxconn: Annotated[int, Field(ge=1, le=100_000)] | None = None
    gzip: bool = False
    """nginx only: compress responses on the fly (gzip level 9), which makes each request CPU-bound."""
    apache: ApacheSettings | None = None
    """apache only: its settings (default ``ApacheSettings()``)."""
    instrument: bool = False
    """lighttpd or apache (the lab): run lighttpd, or apache's php-fpm workers, with the
    quelltoken library preloaded, a token per request; the run keeps each request's counters
    in ``instrument/<id>/requests.csv.gz`` (docs/attribution.md). HAProxy then sends one
    request per server connection."""


class FileSpec(StrictModel):
    """A file every instance serves, generated at start."""

    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]{1,100}$")]
    size_bytes: Annotated[int, Field(gt=0, le=2_000_000_000)]
    compressible: bool = False
    """Fill with text (compresses well, so gzip burns CPU) instead of random bytes."""


class PhpPage(StrictModel):
    """A PHP page every apache instance serves. Each request reads ``touches`` bytes at random
    in a working set of ``working_set_bytes`` (in the lab a string that OPcache compiles once
    into the memory php-fpm's workers share), so its time depends on the cache it finds there
    and on the CPU it gets, then answers ``response_bytes``."""

    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]{1,100}\.php$")]
    working_set_bytes: Annotated[int, Field(ge=1024, le=2_000_000_000)]
    touches: Annotated[int, Field(ge=1, le=100_000_000)]
    response_bytes: Annotated[int, Field(ge=1, le=100_000_000)] = 1000


class LoadBalancer(StrictModel):
    algorithm: Literal["roundrobin", "leastconn"] = "roundrobin"
    maxconn_per_server: Annotated[int, Field(ge=1, le=100_000)] | None = None
    cpus: CpuList | None = None
    """CPUs to pin HAProxy to (the lab); unpinned by default, it runs wherever the kernel
    puts it, which on a small machine can be an instance's core."""
    http_reuse: Literal["safe", "never"] = "safe"
    """The lab's HAProxy ``http-reuse`` for open-loop requests (closed-loop users on kept-alive
    connections always get ``never``). ``safe``, HAProxy's default: a server connection
    outlives the one-request client connection that opened it, idle in a pool HAProxy sizes by
    its estimate of the connections recently needed, and no one-request client uses it again
    (the first request of a client connection always goes over a server connection of its
    own); each holds a worker of a thread-per-connection server (Apache's worker
    MPM) for its KeepAliveTimeout. ``never``: the server connection closes with the client's."""


class RequestMix(StrictModel):
    path: str
    weight: Annotated[float, Field(gt=0)] = 1.0


class Workload(StrictModel):
    arrival: ArrivalSpec
    requests: Annotated[list[RequestMix], Field(min_length=1)] | None = None
    """Which files are requested and how often; ``None`` with ``sessions`` set."""
    sessions: SessionSpec | None = None
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    max_requests: Annotated[int, Field(ge=1, le=50_000_000)] = 1_000_000
    """Hard bound on requests sent; the schedule is cut there."""
    cpus: CpuList | None = None
    """CPUs to pin the load generator to (lab)."""


class StressNg(StrictModel):
    kind: Literal["stress-ng"]
    id: Identifier
    host: Identifier
    stressor: Literal[
        "cpu", "cache", "l1cache", "stream", "memrate", "vm", "memcpy", "hdd", "io", "iomix"
    ]
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    options: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")], str | int | float] = {}
    """Passed through as ``--KEY VALUE`` (e.g. ``cache-level: 3``, ``stream-l3-size: 3840K``)."""
    cpus: CpuList | None = None


class Iperf3(StrictModel):
    kind: Literal["iperf3"]
    id: Identifier
    host: Identifier
    streams: Annotated[int, Field(ge=1, le=32)] = 2
    bitrate_mbit: Annotated[float, Field(gt=0)] | None = None
    """Per-stream target rate; ``None`` sends as fast as the link allows."""
    cpus: CpuList | None = None


class Fio(StrictModel):
    kind: Literal["fio"]
    id: Identifier
    host: Identifier
    rw: Literal["read", "write", "randread", "randwrite", "randrw", "rw"] = "randrw"
    block_size: Annotated[str, Field(pattern=r"^[0-9]+[kKmM]?$")] = "4k"
    size_mb: Annotated[int, Field(ge=1, le=65_536)] = 256
    iodepth: Annotated[int, Field(ge=1, le=1024)] = 16
    direct: bool = True
    cpus: CpuList | None = None


class ClamScan(StrictModel):
    """A heavy job beside the service that ends by itself: clamav's ``clamscan -r`` over a data
    set the lab generates (``data_mb`` in ``files`` files: large random ones, text, many small
    ones, gzip archives), with a signature database of its own (clamav runs offline). One scan
    per start; a periodic job is a start event per period (Soroban's Fig. 4). It keeps about one
    CPU busy and reads its files; in the simulator it counts as one CPU-bound worker."""

    kind: Literal["clamscan"]
    id: Identifier
    host: Identifier
    data_mb: Annotated[int, Field(ge=1, le=4096)] = 256
    files: Annotated[int, Field(ge=1, le=100_000)] = 2000
    cpus: CpuList | None = None


Antagonist = Annotated[StressNg | Iperf3 | Fio | ClamScan, Field(discriminator="kind")]


class Event(StrictModel):
    """At ``at_s``, start and stop antagonists; ``phase`` names the phase that begins here."""

    at_s: Annotated[float, Field(ge=0)]
    phase: Identifier | None = None
    start: list[Identifier] = []
    stop: list[Identifier] = []


class PolicySpec(StrictModel):
    """Which policy decides, and its parameters (each policy validates its own ``params``)."""

    name: str = "static"
    """One of ``quell.policy.POLICIES``."""
    params: dict[str, float | int | str | bool] = {}
    label: Identifier | None = None
    """What a comparison calls this run (default: the policy's name), so ``compare`` can list
    one policy twice with different parameters."""
    balancer: Literal["roundrobin", "leastconn"] | None = None
    """The balancer algorithm this policy's run uses, in a comparison and alone (weights apply
    in both: HAProxy's ``leastconn`` sends a request to the server with the fewest open
    connections per unit of weight). Default: the one the policy relies on
    (``quell.policy.BALANCER_OF``: ``lc`` and ``target`` run behind ``leastconn``), else
    ``load_balancer.algorithm``."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
        return name

    @property
    def key(self) -> str:
        return self.label or self.name


class ProbeSpec(StrictModel):
    """The interference probe every instance carries (PRIMA Section III-B1).

    ``network``: a small web server inside the instance's network namespace serves a file of
    ``size_bytes``; a client downloads it once per ``period_s`` over the host's shared link, so
    the download time rises when a neighbour competes for that link."""

    kind: Literal["network"] = "network"
    period_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    size_bytes: Annotated[int, Field(gt=0, le=100_000_000)] = 1_000_000


class Scaling(StrictModel):
    """Where and how new instances start when a policy scales out."""

    hosts: Annotated[list[Identifier], Field(min_length=1)]
    """Hosts a new instance may be placed on, in order of preference (one new instance each)."""
    boot_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    """Delay between asking for an instance and it taking requests (stands for VM start-up)."""
    min_instances: Annotated[int, Field(ge=1)] = 1
    max_instances: Annotated[int, Field(ge=1)] | None = None
    server: ServerKind = "lighttpd"


class Target(StrictModel):
    """The service's response-time target, R_th: policies aim at it, reports judge by it."""

    mean_rt_s: Annotated[float, Field(gt=0, le=600)]


class AttributionSpec(StrictModel):
    """Attribute each instrumented instance's requests at the end of a lab run (Soroban,
    docs/attribution.md): per request the latency the model gives the provider, with its
    interval, in ``attribution/<id>.csv.gz`` of the run directory."""

    model: Annotated[str, Field(min_length=1, max_length=4096)]
    """The attribution model bundle (``quell attribute fit``), relative to the scenario's
    folder."""
    ebpf: bool = False
    """Attach the eBPF run-queue split for the run (root, a kernel with BTF, ``make native``):
    the instrumented servers' records then carry each request's wait behind other cgroups and
    its preemptions by them, and a model fitted with those features can attribute them."""


class Scenario(StrictModel):
    name: Name
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    duration_s: Annotated[float, Field(gt=0, le=86_400)]
    interval_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    initial_phase: Identifier = "baseline"
    hosts: Annotated[list[Host], Field(min_length=1)]
    instances: Annotated[list[Instance], Field(min_length=1)]
    load_balancer: LoadBalancer = LoadBalancer()
    files: Annotated[list[FileSpec], Field(min_length=1)]
    pages: list[PhpPage] = []
    """PHP pages the apache instances serve, beside the files."""
    workload: Workload
    antagonists: list[Antagonist] = []
    events: list[Event] = []
    policy: PolicySpec = PolicySpec()
    compare: list[PolicySpec] = []
    """Further policies ``lab compare`` / ``sim compare`` run on the same scenario, side by side."""
    probe: ProbeSpec | None = None
    scaling: Scaling | None = None
    target: Target | None = None
    service: ServiceModel | None = None
    """Simulator-only service model; the lab ignores it."""
    attribution: AttributionSpec | None = None
    """The lab: attribute the instrumented instances' requests with this model (checked with
    the scenario: the bundle readable, on records alone, at least one instrumented instance)."""

    def phases(self) -> list[tuple[str, float, float]]:
        """(name, start_s, end_s) for each phase: the intervals between named timed events."""
        bounds: list[tuple[str, float]] = [(self.initial_phase, 0.0)]
        for ev in sorted(self.events, key=lambda e: e.at_s):
            if ev.phase is not None:
                if ev.at_s == bounds[-1][1]:
                    bounds[-1] = (ev.phase, ev.at_s)
                else:
                    bounds.append((ev.phase, ev.at_s))
        ends = [b[1] for b in bounds[1:]] + [self.duration_s]
        return [(name, start, end) for (name, start), end in zip(bounds, ends, strict=True)]

    def host(self, host_id: str) -> Host:
        return next(h for h in self.hosts if h.id == host_id)

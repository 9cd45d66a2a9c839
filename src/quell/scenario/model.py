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
    """The host's id, which instances, antagonists and ``scaling.hosts`` name it by."""
    link_mbit: Annotated[float, Field(gt=0, le=100_000)] | None = None
    """Rate of the host's shared link; ``None`` leaves it unshaped."""
    cpus: CpuList | None = None
    """CPUs everything on the host is pinned to unless it names its own (the lab); unpinned by
    default."""


ServerKind = Literal["lighttpd", "nginx", "apache"]


class ApacheSettings(StrictModel):
    """Apache httpd (worker or event MPM) with php-fpm behind it (proxy_fcgi): the three
    settings IC2 reconfigures, and the bounds they can move within by a graceful restart.

    ``server_limit`` × ``threads_per_child`` is the most MaxRequestWorkers can become without a
    full restart (Apache refuses to change ServerLimit or ThreadsPerChild on a graceful one), and
    MaxRequestWorkers must be a multiple of ``threads_per_child``: Apache lowers a value that is
    not, silently, so quell refuses it instead."""

    mpm: Literal["worker", "event"] = "worker"
    """Apache's multi-processing module."""
    threads_per_child: Annotated[int, Field(ge=1, le=64)] = 8
    """ThreadsPerChild: the worker threads of each child process."""
    server_limit: Annotated[int, Field(ge=1, le=256)] = 16
    """ServerLimit: the most child processes."""
    max_request_workers: Annotated[int, Field(ge=1, le=16_384)] = 32
    """MaxRequestWorkers (the paper's MaxClients, MXC): requests served at once."""
    keepalive_timeout_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    """KeepAliveTimeout (KAT): how long an idle kept-alive connection keeps its worker."""
    php_max_children: Annotated[int, Field(ge=1, le=4096)] = 16
    """php-fpm's pm.max_children (PHP): PHP requests executing at once."""

    @model_validator(mode="after")
    def _within_bounds(self) -> ApacheSettings:
        """``max_request_workers`` is a multiple of ``threads_per_child`` and at most
        ``server_limit`` × ``threads_per_child``."""
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
    """One instance of the service: a web server on a host, a server of HAProxy's backend."""

    id: Identifier
    """The instance's id: its HAProxy server name, and part of its namespace and cgroup names."""
    host: Identifier
    """The id of the host it runs on."""
    server: ServerKind = "lighttpd"
    """The web server it runs."""
    cpus: CpuList | None = None
    """CPUs to pin the server to; defaults to the host's CPUs."""
    weight: Annotated[int, Field(ge=0, le=256)] = 100
    """Its HAProxy weight when the run starts (0: no requests until a policy gives it some)."""
    maxconn: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """HAProxy's maxconn for it: requests it is sent at once, the others wait in HAProxy. Default:
    ``load_balancer.maxconn_per_server``."""
    gzip: bool = False
    """nginx only: compress responses on the fly (gzip level 9), which makes each request CPU-bound."""
    apache: ApacheSettings | None = None
    """apache only: its settings (default ``ApacheSettings()``)."""
    instrument: bool = False
    """lighttpd or apache (the lab): run lighttpd, or apache's php-fpm workers, with the
    quelltoken library preloaded, a token per request; the run keeps each request's counters
    in ``instrument/<id>/requests.csv.gz`` (docs/reference/attribution.md). HAProxy then sends one
    request per server connection."""


class FileSpec(StrictModel):
    """A file every instance serves, generated at start."""

    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]{1,100}$")]
    """The URL path it is served at."""
    size_bytes: Annotated[int, Field(gt=0, le=2_000_000_000)]
    """Its size."""
    compressible: bool = False
    """Fill with text (compresses well, so gzip burns CPU) instead of random bytes."""


class PhpPage(StrictModel):
    """A PHP page every apache instance serves. Each request reads ``touches`` bytes at random
    in a working set of ``working_set_bytes`` (in the lab a string that OPcache compiles once
    into the memory php-fpm's workers share), so its time depends on the cache it finds there
    and on the CPU it gets, then answers ``response_bytes``."""

    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]{1,100}\.php$")]
    """The URL path it is served at (ending in ``.php``)."""
    working_set_bytes: Annotated[int, Field(ge=1024, le=2_000_000_000)]
    """The size of the working set each request reads in."""
    touches: Annotated[int, Field(ge=1, le=100_000_000)]
    """Bytes each request reads, at random places in the working set."""
    response_bytes: Annotated[int, Field(ge=1, le=100_000_000)] = 1000
    """The size of the answer."""


class LoadBalancer(StrictModel):
    """HAProxy, the one load balancer in front of every instance."""

    algorithm: Literal["roundrobin", "leastconn"] = "roundrobin"
    """HAProxy's balance algorithm for the instances (weighted round robin, or the fewest open
    connections per unit of weight)."""
    maxconn_per_server: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """HAProxy's maxconn for every instance that gives none of its own; ``None``: no limit."""
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
    """One entry of the request mix: a path and how often it is asked for."""

    path: str
    """A path of ``files`` or ``pages``."""
    weight: Annotated[float, Field(gt=0)] = 1.0
    """How often it is asked for, relative to the other entries' weights."""


class Workload(StrictModel):
    """The load: when requests arrive (``arrival``) and what they ask for (``requests``, or
    ``sessions`` of video chunks; exactly one of the two)."""

    arrival: ArrivalSpec
    """When requests (or, with ``sessions``, sessions) arrive; ``process`` selects the form."""
    requests: Annotated[list[RequestMix], Field(min_length=1)] | None = None
    """Which files are requested and how often; ``None`` with ``sessions`` set."""
    sessions: SessionSpec | None = None
    """Video sessions instead of ``requests``: each session asks for its own chunks."""
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    """The lab's load generator gives up on a request after this long and counts it as a timeout;
    what users felt per request (every report) counts each request without an answer as taking
    this long. Must be above 2 × ``target.mean_rt_s``."""
    max_requests: Annotated[int, Field(ge=1, le=50_000_000)] = 1_000_000
    """Hard bound on requests sent; the schedule is cut there."""
    cpus: CpuList | None = None
    """CPUs to pin the load generator to (lab)."""


class StressNg(StrictModel):
    """stress-ng on the host: CPU, cache, memory or disk contention."""

    kind: Literal["stress-ng"]
    id: Identifier
    """The antagonist's id, which ``events`` start and stop it by."""
    host: Identifier
    """The id of the host it runs on."""
    stressor: Literal[
        "cpu", "cache", "l1cache", "stream", "memrate", "vm", "memcpy", "hdd", "io", "iomix"
    ]
    """The stress-ng stressor it runs (``--STRESSOR WORKERS``)."""
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    """Worker processes of the stressor."""
    options: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")], str | int | float] = {}
    """Passed through as ``--KEY VALUE`` (e.g. ``cache-level: 3``, ``stream-l3-size: 3840K``)."""
    cpus: CpuList | None = None
    """CPUs to pin it to; defaults to the host's CPUs."""


class Iperf3(StrictModel):
    """iperf3 sending over the host's link: network contention."""

    kind: Literal["iperf3"]
    id: Identifier
    """The antagonist's id, which ``events`` start and stop it by."""
    host: Identifier
    """The id of the host whose link it floods."""
    streams: Annotated[int, Field(ge=1, le=32)] = 2
    """Parallel TCP streams (iperf3's ``-P``)."""
    bitrate_mbit: Annotated[float, Field(gt=0)] | None = None
    """Per-stream target rate; ``None`` sends as fast as the link allows."""
    cpus: CpuList | None = None
    """CPUs to pin it to; defaults to the host's CPUs."""


class Fio(StrictModel):
    """fio on the host's disk: I/O contention."""

    kind: Literal["fio"]
    id: Identifier
    """The antagonist's id, which ``events`` start and stop it by."""
    host: Identifier
    """The id of the host it runs on."""
    rw: Literal["read", "write", "randread", "randwrite", "randrw", "rw"] = "randrw"
    """fio's I/O pattern (``--rw``)."""
    block_size: Annotated[str, Field(pattern=r"^[0-9]+[kKmM]?$")] = "4k"
    """fio's block size (``--bs``: bytes, or with k or m)."""
    size_mb: Annotated[int, Field(ge=1, le=65_536)] = 256
    """The size of the file it reads and writes, in MiB (``--size``)."""
    iodepth: Annotated[int, Field(ge=1, le=1024)] = 16
    """I/O requests in flight (``--iodepth``)."""
    direct: bool = True
    """Bypass the page cache (``--direct=1``)."""
    cpus: CpuList | None = None
    """CPUs to pin it to; defaults to the host's CPUs."""


class ClamScan(StrictModel):
    """A heavy job beside the service that ends by itself: clamav's ``clamscan -r`` over a data
    set the lab generates (``data_mb`` in ``files`` files: large random ones, text, many small
    ones, gzip archives), with a signature database of its own (clamav runs offline). One scan
    per start; a periodic job is a start event per period (Soroban's Fig. 4). It keeps about one
    CPU busy and reads its files; in the simulator it counts as one CPU-bound worker."""

    kind: Literal["clamscan"]
    id: Identifier
    """The antagonist's id, which ``events`` start and stop it by."""
    host: Identifier
    """The id of the host it runs on."""
    data_mb: Annotated[int, Field(ge=1, le=4096)] = 256
    """The size of the data set it scans, in MiB."""
    files: Annotated[int, Field(ge=1, le=100_000)] = 2000
    """The files the data set is spread over."""
    cpus: CpuList | None = None
    """CPUs to pin it to; defaults to the host's CPUs."""


Antagonist = Annotated[StressNg | Iperf3 | Fio | ClamScan, Field(discriminator="kind")]


class Event(StrictModel):
    """At ``at_s``, start and stop antagonists; ``phase`` names the phase that begins here."""

    at_s: Annotated[float, Field(ge=0)]
    """When, in seconds from the start of the run (before ``duration_s``)."""
    phase: Identifier | None = None
    """The phase that begins here (a name not used before); ``None``: the phase goes on."""
    start: list[Identifier] = []
    """Ids of antagonists that start here."""
    stop: list[Identifier] = []
    """Ids of running antagonists that stop here."""


ParamValue = float | int | str | bool
PolicyParams = dict[str, ParamValue | dict[str, ParamValue]]
"""A policy's ``params``: scalars, or one level of sections (``defence``'s ``prima``, ``ic2``)."""


class PolicySpec(StrictModel):
    """Which policy decides, and its parameters (each policy validates its own ``params``)."""

    name: str = "static"
    """One of ``quell.policy.POLICIES``."""
    params: PolicyParams = {}
    """The policy's parameters, each policy's own (``defence`` takes its parts' as sections)."""
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
    """The probe's kind; ``network`` is the one there is."""
    period_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    """Time between two downloads."""
    size_bytes: Annotated[int, Field(gt=0, le=100_000_000)] = 1_000_000
    """The size of the file it downloads."""


class Scaling(StrictModel):
    """Where and how new instances start when a policy scales out."""

    hosts: Annotated[list[Identifier], Field(min_length=1)]
    """Hosts a new instance may be placed on, in order of preference (one new instance each)."""
    boot_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    """Delay between asking for an instance and it taking requests (stands for VM start-up)."""
    min_instances: Annotated[int, Field(ge=1)] = 1
    """A policy never goes below this many serving instances."""
    max_instances: Annotated[int, Field(ge=1)] | None = None
    """A policy never goes above this many; ``None``: no cap but the free hosts of ``hosts``."""
    server: ServerKind = "lighttpd"
    """The web server a new instance runs."""


class Target(StrictModel):
    """The service's response-time target, R_th: policies aim at it, reports judge by it."""

    mean_rt_s: Annotated[float, Field(gt=0, le=600)]
    """R_th: the mean response time the service must stay under, in seconds."""


class AttributionSpec(StrictModel):
    """Attribute each instrumented instance's requests at the end of a lab run (Soroban,
    docs/reference/attribution.md): per request the latency the model gives the provider, with its
    interval, in ``attribution/<id>.csv.gz`` of the run directory."""

    model: Annotated[str, Field(min_length=1, max_length=4096)]
    """The attribution model bundle (``quell attribute fit``), relative to the scenario's
    folder."""
    ebpf: bool = False
    """Attach the eBPF run-queue split for the run (root, a kernel with BTF, ``make native``):
    the instrumented servers' records then carry each request's wait behind other cgroups and
    its preemptions by them, and a model fitted with those features can attribute them."""


class Scenario(StrictModel):
    """A scenario: what runs, where, under which load, beside which neighbours, decided by which
    policy."""

    name: Name
    """The scenario's name, in tables and reports and in its run directories' names."""
    description: str = ""
    """Free text for the reader; quell does not use it."""
    seed: Annotated[int, Field(ge=0)] = 0
    """The seed every random stream of a run derives from (arrivals, sizes, neighbours): the same
    seed, the same requests."""
    duration_s: Annotated[float, Field(gt=0, le=86_400)]
    """How long the run lasts."""
    interval_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    """The control interval: every this long the environment is observed and the policy decides."""
    initial_phase: Identifier = "baseline"
    """The name of the phase from the start until the first event that names one."""
    hosts: Annotated[list[Host], Field(min_length=1)]
    """The machines."""
    instances: Annotated[list[Instance], Field(min_length=1)]
    """The service's instances the run starts with, each on a host."""
    load_balancer: LoadBalancer = LoadBalancer()
    """HAProxy, in front of the instances."""
    files: Annotated[list[FileSpec], Field(min_length=1)]
    """The files every instance serves."""
    pages: list[PhpPage] = []
    """PHP pages the apache instances serve, beside the files."""
    workload: Workload
    """The load: how requests arrive and what they ask for."""
    antagonists: list[Antagonist] = []
    """The neighbours: programs beside the service that compete for its hosts' CPUs, caches, disks
    or links, started and stopped by ``events``."""
    events: list[Event] = []
    """Timed starts and stops of antagonists, and the phases they begin."""
    policy: PolicySpec = PolicySpec()
    """The policy that decides."""
    compare: list[PolicySpec] = []
    """Further policies ``lab compare`` / ``sim compare`` run on the same scenario, side by side."""
    probe: ProbeSpec | None = None
    """The interference probe; ``None``: none runs."""
    scaling: Scaling | None = None
    """Where new instances may start; ``None``: policies may not scale."""
    target: Target | None = None
    """The response-time target; ``None``: none (policies that need one refuse to start)."""
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

"""What an environment reports: one ``Observation`` per instance per sampling interval."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Observation:
    """One instance over one sampling interval ``[end_s - interval_s, end_s)``.

    Times are seconds since the start of the run. A value the environment could not measure
    (no request completed, no steal counter, no PSI) is ``None``, never a made-up zero.
    """

    time_s: float
    instance_id: str
    interval_s: float
    requests: int = 0
    throughput_rps: float = 0.0
    mean_rt_seconds: float | None = None
    p50_rt_seconds: float | None = None
    p95_rt_seconds: float | None = None
    p99_rt_seconds: float | None = None
    errors: int = 0
    cpu_util: float | None = None
    """CPU time of the instance's cgroup per second of wall time (1.0 = one full core)."""
    steal_ratio: float | None = None
    """Share of the host's CPU time stolen by the hypervisor (0..1)."""
    psi_cpu_some_pct: float | None = None
    psi_memory_some_pct: float | None = None
    psi_io_some_pct: float | None = None
    """PSI "some" stall share over the interval, in percent, from the instance's cgroup or the host."""
    runqueue_wait_seconds: float | None = None
    """Time the server's threads spent runnable but waiting for a CPU during the interval."""
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    util_pct: float | None = None
    """Utilisation of the instance's bottleneck resource (its host link or its CPU), in percent."""
    weight: int | None = None
    """Current load-balancer weight of the instance."""
    extra: Mapping[str, float] = field(default_factory=dict)
    """Open mapping for metrics that later systems add (severity factor, CPI...)."""

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in OBSERVATION_FIELDS}
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Observation:
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        kwargs["extra"] = dict(d.get("extra") or {})
        return cls(**kwargs)


MAXCONN_KEY = "lb_maxconn"
"""``Observation.extra`` key: the most connections the load balancer keeps open to the instance
at once (``SetMaxConn``; HAProxy's ``slim``). Absent when it has no such cap."""
CPU_CAP_KEY = "cpu_cap_cpus"
"""``Observation.extra`` key: the CPU time the instance may use per period, in CPUs
(``SetCpuCap``; its cgroup's quota over period). Absent when it is not capped."""
SERVER_SETTING_KEYS = {
    "max_request_workers": "server_max_request_workers",
    "keepalive_timeout_s": "server_keepalive_timeout_s",
    "php_max_children": "server_php_max_children",
}
"""``ReconfigureServer`` setting → the ``Observation.extra`` key that shows the value in force
on the instance (as the server reports it, where it can), for servers that have it (apache)."""
OLDEST_KEY = "oldest_in_flight_seconds"
"""``Observation.extra`` key: how long the oldest request the instance still holds at the end of
the interval (or glance) has been there. Absent when it holds none or it is not measured."""
SERVED_UTIL_KEY = "served_util_pct"
"""``Observation.extra`` key: the capacity the instance's requests and probes received in the
interval (or glance), finished or still in service, in percent of its capacity over the
interval: what a NIC's byte counter shows (bytes out per second), where ``util_pct`` counts
only the work of the requests that completed. Absent where it is not measured."""
BUSY_KEY = "busy_seconds"
"""``Observation.extra`` key: the time in the interval (or glance) the instance had at least one
request or probe in service (the balancer's current sessions above zero). With
``SERVED_UTIL_KEY``, ``served_util_pct × interval_s / busy_seconds`` is the rate it was served at
while it served: under processor sharing, the capacity its neighbours left it. Absent where it
is not measured."""
THROTTLED_KEY = "cfs_throttled_seconds"
"""``Observation.extra`` key: time the instance's cgroup spent throttled by its CPU quota in the
interval (cgroup ``cpu.stat`` ``throttled_usec``). Absent where it is not measured."""
PROVIDER_SHARE_KEY = "provider_rt_share"
"""``Observation.extra`` key: the share of the instance's response time in the interval that
per-request attribution gives the provider (``quell.attribute``: Σ provider-attributed latency
over Σ response time of the interval's attributed requests, 0..1). Absent where the instance is
not instrumented or no attributed request completed; ``defence`` names it in its reasons."""

STEAL_SUSPECT_PCT = 0.5
"""The machine's mean CPU steal, in percent of its CPU time, above which a lab measurement is
suspect. On a cloud VM, steal (time the hypervisor gives other guests) slows the probe and the
service together and reads as interference that is not there: clean lab runs stayed under
0.35 %, and one at 0.98 % read a severity factor of 0.022 where clean ones read 0.005."""

OBSERVATION_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(Observation) if f.name != "extra"
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """All instances at one tick, as one environment saw them."""

    time_s: float
    environment: str
    instances: Mapping[str, Observation]

    @property
    def total_throughput_rps(self) -> float:
        return sum(o.throughput_rps for o in self.instances.values())

"""Turns the machine's counters into one ``Observation`` per instance per interval.

Reads, for each instance: its cgroup's CPU time, PSI, CPU cap and time throttled by the cap
(``THROTTLED_KEY``), the run-queue wait of its server processes (schedstat summed over every
thread, followed process by process so that workers coming and going and a reload do not break
the series: ``wait_since``), its interface counters (from inside its namespace), HAProxy's view
of it (weight, sessions, queue, response time, maxconn), and the client-side latencies of the
requests it answered.
Host-wide: steal time from /proc/stat, and each lab host's total link utilisation from its
uplink's transmit counter. Cumulative counters become interval values through
``CounterDelta``, which refuses to difference across a process restart or a counter reset."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quell.core.observation import (
    CPU_CAP_KEY,
    MAXCONN_KEY,
    THROTTLED_KEY,
    Observation,
    Snapshot,
)
from quell.errors import ComponentError
from quell.lab.cgroups import Group
from quell.signals.cgroup import (
    CgroupLayout,
    read_cpu_cap,
    read_cpu_usage_ns,
    read_group_pressure,
    read_throttling,
)
from quell.signals.delta import CounterDelta
from quell.signals.haproxy import ServerStat
from quell.signals.procfs import (
    read_cpu_times,
    read_net_dev,
    read_schedstat_by_process,
    read_system_pressure,
    wait_since,
)
from quell.store.run import RequestRecord

PSI_RESOURCES = ("cpu", "memory", "io")
LINK_UTIL_KEY = "link_util_pct"
"""``Observation.extra`` key: everything the instance's host sent through its shaped uplink in
the interval (its instances, their probes, network antagonists), in % of the link's rate."""


@dataclass(frozen=True)
class InstanceProbe:
    """What the sampler needs to know about one instance."""

    instance_id: str
    group: Group
    link_mbit: float | None
    cpu_count: int
    interface: str = "eth0"
    host: str | None = None
    """The lab host the instance runs on, whose uplink counter ``links`` carries."""


@dataclass(frozen=True)
class LinkReading:
    """One host's shaped uplink: bytes sent through it so far (None: unreadable) and its rate."""

    host: str
    tx_bytes: int | None
    link_mbit: float


def latency_stats(records: Sequence[RequestRecord]) -> dict[str, float | None]:
    lat = np.array(
        [r.latency_s for r in records if r.latency_s is not None and 200 <= r.status < 400]
    )
    if lat.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return {"mean": float(lat.mean()), "p50": float(p50), "p95": float(p95), "p99": float(p99)}


class Sampler:
    def __init__(self, layout: CgroupLayout, proc_root: Path = Path("/proc")) -> None:
        self.layout = layout
        self.proc_root = proc_root
        self._delta = CounterDelta()
        self._wait_ns: dict[str, dict[int, int]] = {}
        """Per instance, each server process's cumulative run-queue wait at the last reading."""

    def _rate(
        self, key: object, value: float | None, dt: float, gen: object = None
    ) -> float | None:
        if value is None:
            return None
        d = self._delta.update(key, value, gen)
        return None if d is None or dt <= 0 else d / dt

    def prime(
        self,
        instances: Iterable[InstanceProbe],
        links: Sequence[LinkReading] = (),
        host_counters: bool = True,
    ) -> None:
        """Take a first reading so the first interval already has deltas. With
        ``host_counters`` False only the instances' counters are read (an instance joining
        mid-run must not shorten the interval of the host-wide ones)."""
        self.sample(0.0, 1.0, list(instances), {}, [], links, host_counters=host_counters)

    def sample(
        self,
        time_s: float,
        interval_s: float,
        instances: Sequence[InstanceProbe],
        lb: Mapping[str, ServerStat],
        records: Sequence[RequestRecord],
        links: Sequence[LinkReading] = (),
        extra: Mapping[str, Mapping[str, float]] | None = None,
        host_counters: bool = True,
    ) -> Snapshot:
        """One snapshot. ``links``: the hosts' uplink counters, from which each instance gets
        its host's ``link_util_pct``; ``extra``: per-instance values for ``Observation.extra``."""
        dt = interval_s
        steal = None
        link_util: dict[str, float] = {}
        if host_counters:
            cpu = read_cpu_times(self.proc_root)
            steal_rate = self._rate("host/steal", cpu.steal, dt)
            total_rate = self._rate("host/total", cpu.total, dt)
            steal = steal_rate / total_rate if steal_rate is not None and total_rate else None
            for link in links:
                sent = float(link.tx_bytes) if link.tx_bytes is not None else None
                rate = self._rate(("link", link.host), sent, dt)
                if rate is not None:
                    link_util[link.host] = rate * 8 / (link.link_mbit * 1e6) * 100.0
        by_server: dict[str, list[RequestRecord]] = {}
        for r in records:
            by_server.setdefault(r.server, []).append(r)
        out: dict[str, Observation] = {}
        for inst in instances:
            iid = inst.instance_id
            pids = inst.group.pids()
            gen = tuple(pids)
            try:
                usage = float(read_cpu_usage_ns(self.layout, inst.group.name))
            except OSError:
                usage = None
            cpu_ns = self._rate((iid, "cpu"), usage, dt)
            cpu_util = cpu_ns / 1e9 if cpu_ns is not None else None
            psi: dict[str, float | None] = {}
            for res in PSI_RESOURCES:
                p = read_group_pressure(self.layout, inst.group.name, res)  # type: ignore[arg-type]
                if p is None:
                    p = read_system_pressure(res, self.proc_root)  # type: ignore[arg-type]
                stall = self._rate((iid, "psi", res), p.some_total_us if p else None, dt)
                psi[res] = stall / 1e6 * 100.0 if stall is not None else None
            waits = {
                pid: st.wait_ns
                for pid, st in read_schedstat_by_process(pids, self.proc_root).items()
            }
            before = self._wait_ns.get(iid)
            self._wait_ns[iid] = waits
            wait = None
            if before is not None and waits and dt > 0:
                wait = wait_since(before, waits) / dt
            rx = tx = None
            if pids:
                try:
                    dev = read_net_dev(pids[0], self.proc_root).get(inst.interface)
                except OSError:
                    dev = None
                if dev is not None:
                    rx_rate = self._rate((iid, "rx"), dev.rx_bytes, dt, gen)
                    tx_rate = self._rate((iid, "tx"), dev.tx_bytes, dt, gen)
                    rx = round(rx_rate * dt) if rx_rate is not None else None
                    tx = round(tx_rate * dt) if tx_rate is not None else None
            if inst.link_mbit is not None:
                util = tx * 8 / (dt * inst.link_mbit * 1e6) * 100.0 if tx is not None else None
            else:
                util = cpu_util / inst.cpu_count * 100.0 if cpu_util is not None else None
            recs = by_server.get(iid, [])
            ok = [r for r in recs if 200 <= r.status < 400]
            stats = latency_stats(recs)
            stat = lb.get(iid)
            more: dict[str, float] = {}
            if stat is not None:
                more = {"lb_sessions": float(stat.scur), "lb_queue": float(stat.qcur)}
                if stat.rtime_ms is not None:
                    more["lb_rtime_ms"] = float(stat.rtime_ms)
                if stat.slim is not None:
                    more[MAXCONN_KEY] = float(stat.slim)
            try:
                cap = read_cpu_cap(self.layout, inst.group.name)
            except ComponentError:
                cap = None
            if cap is not None:
                more[CPU_CAP_KEY] = cap
            try:
                throttled_ns = read_throttling(self.layout, inst.group.name).throttled_ns
            except ComponentError:
                self._delta.forget((iid, "throttled"))
            else:
                throttled = self._delta.update((iid, "throttled"), float(throttled_ns))
                if throttled is not None:
                    more[THROTTLED_KEY] = throttled / 1e9
            if inst.host in link_util:
                more[LINK_UTIL_KEY] = link_util[inst.host]
            more.update((extra or {}).get(iid, {}))
            out[iid] = Observation(
                time_s=time_s,
                instance_id=iid,
                interval_s=interval_s,
                requests=len(ok),
                throughput_rps=len(ok) / dt,
                mean_rt_seconds=stats["mean"],
                p50_rt_seconds=stats["p50"],
                p95_rt_seconds=stats["p95"],
                p99_rt_seconds=stats["p99"],
                errors=len(recs) - len(ok),
                cpu_util=cpu_util,
                steal_ratio=steal,
                psi_cpu_some_pct=psi["cpu"],
                psi_memory_some_pct=psi["memory"],
                psi_io_some_pct=psi["io"],
                runqueue_wait_seconds=wait / 1e9 * dt if wait is not None else None,
                net_rx_bytes=rx,
                net_tx_bytes=tx,
                util_pct=util,
                weight=stat.weight if stat is not None else None,
                extra=more,
            )
        return Snapshot(time_s=time_s, environment="lab", instances=out)

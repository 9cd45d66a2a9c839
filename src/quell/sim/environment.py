"""``SimEnvironment``: the simulator behind the same ``Environment`` protocol as the lab.

Every host with ``link_mbit`` is one processor-sharing resource (its link) shared by all its
instances, their probes and the streams of a running iperf3 antagonist (k streams = k jobs that
never finish). A neighbour with a bitrate (iperf3 ``bitrate_mbit`` or ``service.interference``)
takes that much of the link's capacity instead. An instance on a host without a link rate has
its own resource of ``service.capacity_bytes_per_s``. Time is virtual: ``observe`` runs the
event core up to ``clock.now()`` and summarises the interval that just ended.

What the lab and the simulator agree on: an added instance is in snapshots once it serves
(after ``scaling.boot_s``); a removed one is reported until it has drained, then disappears;
``extra["probe_rt_seconds"]`` is the mean time of the probes completed in the interval
(``scenario.probe``) and ``extra["probe_samples"]`` how many,
``extra["link_util_pct"]`` the work done on the instance's host link in the interval by everyone
on it, neighbours included, as a share of the link's capacity, and
``extra["oldest_in_flight_seconds"]`` the age of the oldest request the instance still holds,
``extra["served_util_pct"]`` the capacity its requests and probes received, finished or not (its
NIC's bytes out), and ``extra["busy_seconds"]`` the time it had one in service.

Closed-loop users (``workload.arrival.process: closed``) send as they get answers, so they
have no schedule: the event core draws their requests and think times as it goes. An apache
instance (``server: apache``) is a CPU of its own behind a worker pool, a php-fpm pool and
keep-alive (``service.apache``); ``ReconfigureServer`` changes its settings, shown in
``extra`` under ``quell.core.observation.SERVER_SETTING_KEYS``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetMaxConn,
    SetWeight,
)
from quell.core.clock import VirtualClock
from quell.core.observation import (
    BUSY_KEY,
    MAXCONN_KEY,
    OLDEST_KEY,
    SERVED_UTIL_KEY,
    SERVER_SETTING_KEYS,
    Observation,
    Snapshot,
)
from quell.core.rng import component_rng
from quell.errors import ActionError, EnvironmentStateError, InputError, Problem
from quell.probe.severity import PROBE_COUNT_KEY, PROBE_KEY
from quell.scenario.model import (
    ApacheSettings,
    ClamScan,
    Event,
    Fio,
    Iperf3,
    Scenario,
    StressNg,
)
from quell.scenario.service import ServiceModel
from quell.sim.core import MAX_PAGES, Algorithm, EventCore, Records, interval_stats
from quell.sim.service import MAX_TAKEN_SHARE, apache_cpus, memory_factor, plan_service
from quell.sim.table import Table
from quell.store.run import RequestRecord
from quell.workload.schedule import RequestSchedule
from quell.workload.spec import ClosedLoopSpec

log = logging.getLogger(__name__)

AUTO_LOG_MAX_REQUESTS = 500_000
_QUANTILES = (0.50, 0.95, 0.99)
DEFAULT_BOOT_S = 30.0
"""Delay of ``AddInstance`` when the scenario has no ``scaling`` section."""
LINK_UTIL_KEY = "link_util_pct"
BUSY_WORKERS_KEY = "server_busy_workers"
"""An apache instance's workers busy over the interval, on average (serving, waiting for a
php-fpm child, or held by an idle kept-alive connection): server-status' BusyWorkers."""

# instance states
BOOTING, SERVING, DRAINING, GONE = 0, 1, 2, 3


class InstanceState(NamedTuple):
    """What ``SimEnvironment`` keeps per instance beside the event core's state
    (``EventCore.instances_``), a row per instance in the core's order."""

    host: NDArray[np.object_]  # its host's id
    state: NDArray[np.int64]  # BOOTING, SERVING, DRAINING, GONE
    maxconn: NDArray[np.int64]  # its HAProxy maxconn (0: no cap)
    capacity: NDArray[np.float64]  # what util_pct is a share of (bytes/s, or cores)
    slow: NDArray[np.float64]  # its service.slowdown factor in force
    cpu: NDArray[np.float64]  # its slowdown by its host's CPU antagonists and memory pressure
    apache: NDArray[np.object_]  # its ApacheSettings in force (None: not an apache instance)
    dropped: NDArray[np.int64]  # requests aborted since the last snapshot (RemoveInstance)
    probe_phase: NDArray[np.float64]  # its probes' phase in the probe period (drawn once)
    probe_next: NDArray[np.float64]  # its next probe (inf: not probing: booting, removed)


class LinkState(NamedTuple):
    """Per event-core resource: its nominal capacity and what neighbours with a bitrate take."""

    nominal: NDArray[np.float64]
    iperf: NDArray[np.float64]  # bytes/s taken by running iperf3 antagonists with a bitrate
    interference: NDArray[np.float64]  # bytes/s taken by service.interference sources on
    taken: NDArray[np.float64]  # bytes/s taken in all (capped)
    taken_area: NDArray[np.float64]  # ∫ taken dt since the last snapshot,
    taken_t: NDArray[np.float64]  # brought up to this time
    fill: NDArray[np.float64]  # work of unlimited iperf3 streams since the last snapshot


class _GlanceMark(NamedTuple):
    records: int  # how many of ``_pending`` the last glance read
    time_s: float
    work: NDArray[np.float64]
    refused: NDArray[np.int64]
    served: NDArray[np.float64]  # ``EventCore.served``: capacity received,
    busy: NDArray[np.float64]  # and time with a job in service


class SimEnvironment:
    """Simulate ``scenario`` (its ``service`` section, or defaults) in virtual time.

    Parameters
    ----------
    scenario : the scenario, as loaded.
    base_dir : where relative paths in the scenario (traces) resolve.
    schedule : a precomputed request schedule (default: built from the scenario seed).
    log_capacity : keep ``capacity_log_`` (for checks; it grows with hosts × intervals).
    """

    name = "sim"

    def __init__(
        self,
        scenario: Scenario,
        base_dir: Path = Path("."),
        schedule: RequestSchedule | None = None,
        log_capacity: bool = False,
    ) -> None:
        self.scenario = scenario
        self.base_dir = base_dir
        self.clock = VirtualClock()
        svc = scenario.service or ServiceModel()
        self.service_ = svc
        self.boot_s_ = scenario.scaling.boot_s if scenario.scaling else DEFAULT_BOOT_S
        problems = []
        if len(scenario.pages) > MAX_PAGES:
            problems.append(Problem("pages", f"the simulator models at most {MAX_PAGES} PHP pages"))
        try:
            plan = plan_service(scenario, base_dir, schedule)
        except InputError as exc:
            problems.extend(exc.problems)
        if problems:
            raise InputError(scenario.name, problems)
        self.closed_loop_ = plan.users is not None
        self.schedule_ = plan.schedule
        """The request schedule; for closed-loop users, none (no times: only the paths)."""
        self.sizes_bytes_ = plan.sizes_bytes
        self._arr_pages = plan.pages[self.schedule_.path_index]
        algorithm: Algorithm = svc.dispatch or (
            "leastconn" if scenario.load_balancer.algorithm == "leastconn" else "weighted_rr"
        )
        self.core_ = EventCore(algorithm)
        self.core_.set_pages(
            [p.touches * svc.apache.touch_cpu_s for p in scenario.pages[:MAX_PAGES]]
        )
        self._links = Table(LinkState)
        self._host_resource: dict[str, int] = {}
        for h in scenario.hosts:
            if h.link_mbit is not None:
                self._host_resource[h.id] = self._new_resource(h.link_mbit * 1e6 / 8.0)
        self.instance_ids_: list[str] = []
        self._index: dict[str, int] = {}
        self._instances = Table(InstanceState)
        self._running: set[str] = set()
        """the antagonists running"""
        self._booting: dict[int, float] = {}
        self._reload_end: dict[int, float] = {}
        """apache instances reloading (a graceful ReconfigureServer): when it ends"""
        self._probe_rng = component_rng(scenario.seed, "sim/probes")
        for inst, cpus in zip(scenario.instances, plan.cpus, strict=True):
            apache = (inst.apache or ApacheSettings()) if inst.server == "apache" else None
            i = self._add(inst.id, inst.host, inst.weight, inst.maxconn, True, apache, cpus)
            self._start_probes(i, 0.0)
        it_t, it_h, it_level = plan.interference
        host_res = np.asarray([self._host_resource.get(h.id, -1) for h in scenario.hosts])
        self._it_t, self._it_r, self._it_level = it_t, host_res[it_h], it_level
        self._it_cursor = 0
        self._chg_t, self._chg_i, self._chg_f = plan.slowdown
        self._chg_cursor = 0
        self._now_changes: list[tuple[int, float]] = []
        self._arr_cursor = 0
        self._pending: list[Records] = []
        self._last_obs_s = 0.0
        self._glance = _GlanceMark(
            0, 0.0, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
        )
        """Where the last glance (or observe) left off: the records of ``_pending`` it read, its
        time, and the instances' work done, refusals, capacity served and time busy then."""
        self.lb_refused_total_ = 0
        self.log_capacity = log_capacity
        self.capacity_log_: list[NDArray[np.float64]] = []
        """With ``log_capacity``, per snapshot: each link host's mean capacity left by neighbours
        with a bitrate over the interval (bytes/s, in ``scenario.hosts`` order; NaN for hosts
        without a link) — what the oracle computes from the scenario."""
        arrival = scenario.workload.arrival
        if plan.users is not None and isinstance(arrival, ClosedLoopSpec):
            first = np.arange(arrival.users, dtype=np.float64) * (arrival.ramp_s / arrival.users)
            self.core_.add_users(
                first, arrival.keepalive, plan.users, scenario.workload.max_requests
            )
        mode = svc.request_log
        most = scenario.workload.max_requests if self.closed_loop_ else len(self.schedule_)
        self.request_log_ = mode == "on" or (mode == "auto" and most <= AUTO_LOG_MAX_REQUESTS)
        self._log: list[Records] = []
        self._closed = False

    @property
    def instances_(self) -> InstanceState:
        """Per instance: host, state, limits, slowdown, settings, probes (``InstanceState``)."""
        return self._instances.cols

    # -- building ----------------------------------------------------------------------------
    def _job_cap(self) -> float:
        svc = self.service_
        if svc.discipline == "fcfs" and svc.capacity_bytes_per_s is not None:
            return svc.capacity_bytes_per_s / svc.workers
        return float("inf")

    def _new_resource(self, capacity: float, job_cap: float | None = None) -> int:
        """A resource of the event core, and its row of ``LinkState``."""
        cap = self._job_cap() if job_cap is None else job_cap
        r = self.core_.add_resource(capacity, cap)
        self._links.append(nominal=capacity, taken_t=self.core_.now_s_)
        return r

    def _add(
        self,
        iid: str,
        host: str,
        weight: int,
        maxconn: int | None,
        serving: bool,
        apache: ApacheSettings | None = None,
        cpus: float = 0.0,
    ) -> int:
        """Instance ``iid`` on ``host``: on the host's link or a resource of its own of
        ``service.capacity_bytes_per_s``; an apache instance (``apache`` its settings) on a
        CPU of its own of ``cpus`` cores."""
        svc = self.service_
        if apache is not None:
            cap = cpus
            r = self._new_resource(cpus, 1.0)  # one core at most per request
        elif host in self._host_resource:
            r = self._host_resource[host]
            cap = float(self._links.cols.nominal[r])
        else:
            assert svc.capacity_bytes_per_s is not None
            cap = svc.capacity_bytes_per_s
            r = self._new_resource(cap)
        maxconn = maxconn or self.scenario.load_balancer.maxconn_per_server
        i = self.core_.add_instance(
            r,
            weight=weight,
            concurrency_limit=self._concurrency_limit(maxconn, apache),
            queue_limit=self._queue_limit(apache),
            eligible=serving,
        )
        probe = self.scenario.probe
        self._instances.append(
            host=host,
            state=SERVING if serving else BOOTING,
            maxconn=maxconn or 0,
            capacity=cap,
            slow=1.0,
            apache=apache,
            probe_phase=self._probe_rng.uniform(0.0, probe.period_s) if probe else np.inf,
            probe_next=np.inf,
        )
        if apache is not None:
            model = svc.apache
            self.core_.set_server(
                i,
                php_children=apache.php_max_children,
                keepalive_timeout_s=apache.keepalive_timeout_s,
                idle_holds_worker=apache.mpm == "worker",
                request_work=model.request_cpu_s,
                work_per_byte=1.0 / model.bytes_per_cpu_s,
                connection_work=model.connection_cpu_s,
            )
        self.instance_ids_.append(iid)
        self._index[iid] = i
        cpu = self._cpu_factor(i)
        self.instances_.cpu[i] = cpu
        if cpu != 1.0:
            self.core_.instances_.factor[i] = cpu
        return i

    def _concurrency_limit(
        self, maxconn: int | None, apache: ApacheSettings | None = None
    ) -> int | None:
        """Requests an instance may have in service: its maxconn and its workers (apache's
        MaxRequestWorkers, or the FCFS workers of the others)."""
        svc = self.service_
        if apache is not None:
            workers: int | None = apache.max_request_workers
        else:
            workers = svc.workers if svc.discipline == "fcfs" else None
        limits = [x for x in (maxconn, workers) if x]
        return min(limits) if limits else None

    def _queue_limit(self, apache: ApacheSettings | None) -> int | None:
        """Requests an instance holds at most (busy workers and waiting)."""
        if apache is None:
            return self.service_.queue_limit
        backlog = self.service_.apache.listen_backlog
        return None if backlog is None else apache.max_request_workers + backlog

    def _start_probes(self, i: int, serving_from_s: float) -> None:
        """Instance i's probes: one per ``probe.period_s`` from ``serving_from_s`` + its phase."""
        self.instances_.probe_next[i] = serving_from_s + self.instances_.probe_phase[i]

    def _cpu_factor(self, i: int) -> float:
        """Instance i's slowdown by its host (stress-ng's workers) and, for an apache
        instance, its memory pressure; sets an apache instance's overhead per worker."""
        svc = self.service_
        host = self.instances_.host[i]
        workers = sum(
            a.workers if isinstance(a, StressNg) else 1  # a clamscan: one CPU-bound worker
            for a in self.scenario.antagonists
            if isinstance(a, StressNg | ClamScan) and a.host == host and a.id in self._running
        )
        factor = 1.0 + svc.stress_ng_slowdown_per_worker * workers
        apache = self.instances_.apache[i]
        if apache is not None:
            model = svc.apache
            overhead = model.worker_overhead + model.worker_overhead_per_stress_ng_worker * workers
            self.core_.set_overhead(int(self.core_.instances_.res[i]), overhead)
            factor *= memory_factor(model, apache)
        return factor

    # -- what neighbours take of a link --------------------------------------------------------
    def _set_taken(self, r: int, t: float) -> float:
        """Make resource r's taken capacity follow its iperf3 and interference levels from
        ``t`` on; returns the capacity left for the instances."""
        link = self._links.cols
        new = min(link.iperf[r] + link.interference[r], MAX_TAKEN_SHARE * link.nominal[r])
        link.taken_area[r] += link.taken[r] * (t - link.taken_t[r])
        link.taken_t[r] = t
        link.taken[r] = new
        return float(link.nominal[r] - new)

    def _flush_taken(self, t: float) -> None:
        link = self._links.cols
        if not link.taken.any():  # nothing taken: no area to add, and no time to keep
            return
        link.taken_area[:] += link.taken * (t - link.taken_t)
        link.taken_t[:] = t

    def _interference_until(
        self, t_next: float
    ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
        """The capacity changes of ``service.interference`` in ``[now, t_next)``."""
        k0 = self._it_cursor
        if k0 == self._it_t.size:  # no change left
            return np.empty(0), np.empty(0, dtype=np.int64), np.empty(0)
        k1 = int(np.searchsorted(self._it_t, t_next, side="left"))
        self._it_cursor = k1
        times = self._it_t[k0:k1]
        res = self._it_r[k0:k1]
        caps = np.empty(times.size)
        for k, (t, r, level) in enumerate(
            zip(times.tolist(), res.tolist(), self._it_level[k0:k1].tolist(), strict=True)
        ):
            self._links.cols.interference[r] = level
            caps[k] = self._set_taken(r, t)
        return times, np.asarray([EventCore.capacity_code(r) for r in res.tolist()]), caps

    def _reloads_until(
        self, t_next: float
    ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
        """The capacity changes of apache reloads that end in ``[now, t_next)``: back to all
        the instance's cores."""
        done = [(t, i) for i, t in self._reload_end.items() if t < t_next]
        for _, i in done:
            del self._reload_end[i]
        done.sort()
        res = [int(self.core_.instances_.res[i]) for _, i in done]
        return (
            np.asarray([t for t, _ in done], dtype=np.float64),
            np.asarray([EventCore.capacity_code(r) for r in res], dtype=np.int64),
            np.asarray([self._links.cols.nominal[r] for r in res], dtype=np.float64),
        )

    # -- probes ------------------------------------------------------------------------------
    def _probes_until(self, t_next: float) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Probe times in ``[now, t_next)`` and their instances, sorted by time."""
        probe = self.scenario.probe
        if probe is None:
            return np.empty(0), np.empty(0, dtype=np.int64)
        nxt = self.instances_.probe_next
        due = np.flatnonzero(nxt < t_next)
        if due.size == 0:
            return np.empty(0), np.empty(0, dtype=np.int64)
        period = probe.period_s
        first = nxt[due]
        count = np.floor((t_next - first) / period).astype(np.int64) + 1
        count -= (first + (count - 1) * period >= t_next).astype(np.int64)  # float edge
        nxt[due] = first + count * period
        k = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        times = np.repeat(first, count) + k * period
        inst = np.repeat(due, count)
        order = np.argsort(times, kind="stable")
        return times[order], inst[order]

    # -- running -----------------------------------------------------------------------------
    def _advance(self, t_s: float) -> None:
        core = self.core_
        times = self.schedule_.times_s
        size = float(self.scenario.probe.size_bytes) if self.scenario.probe else 0.0
        while core.now_s_ < t_s:
            t_prev = core.now_s_
            boots = [b for b in self._booting.values() if b > t_prev]
            t_next = min([t_s, *boots])
            a0 = self._arr_cursor
            a1 = int(np.searchsorted(times, t_next, side="left"))
            pt, pi = self._probes_until(t_next)
            c0 = self._chg_cursor
            c1 = int(np.searchsorted(self._chg_t, t_next, side="left"))
            ci = self._chg_i[c0:c1]
            cf = self._chg_f[c0:c1] * self.instances_.cpu[ci] if c1 > c0 else self._chg_f[c0:c1]
            ct = self._chg_t[c0:c1]
            if self._now_changes:
                now_i = np.asarray([i for i, _ in self._now_changes], dtype=np.int64)
                now_f = np.asarray([f for _, f in self._now_changes])
                ct = np.concatenate([np.full(now_i.size, t_prev), ct])
                ci = np.concatenate([now_i, ci])
                cf = np.concatenate([now_f, cf])
                self._now_changes = []
            it_t, it_c, it_f = self._interference_until(t_next)
            re_t, re_c, re_f = self._reloads_until(t_next)
            if re_t.size:
                it_t = np.concatenate([it_t, re_t])
                it_c = np.concatenate([it_c, re_c])
                it_f = np.concatenate([it_f, re_f])
            if it_t.size:
                ct = np.concatenate([ct, it_t])
                order = np.argsort(ct, kind="stable")
                ct = ct[order]
                ci = np.concatenate([ci, it_c])[order]
                cf = np.concatenate([cf, it_f])[order]
            streams = core.resources_.perm > 0
            work0 = core.instances_.work.copy() if streams.any() else None
            area0 = self._links.cols.taken_area.copy() if work0 is not None else None
            rec = core.run(
                t_next,
                times[a0:a1],
                self.sizes_bytes_[a0:a1],
                pt,
                pi,
                np.full(pt.size, size),
                ct,
                ci,
                cf,
                self._arr_pages[a0:a1],
            )
            self._flush_taken(t_next)
            if work0 is not None and area0 is not None:
                # unlimited iperf3 streams take all the link the instances leave
                inst, link = core.instances_, self._links.cols
                done = np.bincount(inst.res, inst.work - work0, minlength=streams.size)
                left = link.nominal * (t_next - t_prev) - (link.taken_area - area0) - done
                link.fill[:] += np.where(streams, np.maximum(left, 0.0), 0.0)
            if c1 > c0:
                for i, f in zip(
                    self._chg_i[c0:c1].tolist(), self._chg_f[c0:c1].tolist(), strict=True
                ):
                    self.instances_.slow[i] = f
            self._arr_cursor, self._chg_cursor = a1, c1
            self._pending.append(rec)
            if self.request_log_:
                self._log.append(rec)
            for i, ready in list(self._booting.items()):
                if ready <= core.now_s_:
                    core.set_eligible(i, True)
                    self.instances_.state[i] = SERVING
                    self._start_probes(i, ready)
                    del self._booting[i]

    def _refuse_if_closed(self, operation: str) -> None:
        if self._closed:
            raise EnvironmentStateError(self.name, operation, "closed")

    def observe(self) -> Snapshot:
        self._refuse_if_closed("observe")
        t = self.clock.now()
        self._advance(t)
        interval = t - self._last_obs_s
        snap = self._snapshot(t, interval)
        self._last_obs_s = t
        inst = self.core_.instances_
        self._glance = _GlanceMark(0, t, inst.work.copy(), inst.rej.copy(), *self.core_.served())
        return snap

    def glance(self) -> Snapshot:
        """The window since the last glance or observe, ending now, without closing observe's
        interval: per serving or draining instance, the requests completed in it and their
        response times, the refusals, the probe downloads completed, the age of the oldest
        request held now and the utilisation of the work completed; no link utilisation and no
        server settings (those are observe's). The event core runs up to now, as for an event or
        an action, so the next observe differs from one without glances at most by the rounding
        of its clocks' last bits (``check_glance_keeps_observe``)."""
        self._refuse_if_closed("glance")
        t = self.clock.now()
        self._advance(t)
        core, mark = self.core_, self._glance
        records = self._pending[mark.records :]
        inst = core.instances_
        n = core.n_instances
        window = t - mark.time_s
        served_now, busy_now = core.served()
        self._glance = _GlanceMark(
            len(self._pending), t, inst.work.copy(), inst.rej.copy(), served_now, busy_now
        )
        stats = interval_stats([r for r in records if len(r)], n, _QUANTILES)
        work = inst.work - np.pad(mark.work, (0, n - mark.work.size))
        refused = inst.rej - np.pad(mark.refused, (0, n - mark.refused.size))
        served = served_now - np.pad(mark.served, (0, n - mark.served.size))
        busy = busy_now - np.pad(mark.busy, (0, n - mark.busy.size))
        probe_sum, probe_count = np.zeros(n), np.zeros(n)
        for r in records:
            k = r.probe_count.size
            probe_sum[:k] += r.probe_sum_s
            probe_count[:k] += r.probe_count
        oldest = t - core.oldest_start_s()
        ins = self.instances_
        counts, sums, quant = stats.requests, stats.rt_sum_s, stats.rt_quantiles_s
        states, capacity = ins.state.tolist(), ins.capacity.tolist()
        weight = inst.weight.tolist()
        out: dict[str, Observation] = {}
        for i, state in enumerate(states):
            if state not in (SERVING, DRAINING) or window <= 0:
                continue
            c = int(counts[i])
            util = 100.0 * work[i] / (capacity[i] * window)
            extra: dict[str, float] = {
                SERVED_UTIL_KEY: float(100.0 * served[i] / (capacity[i] * window)),
                BUSY_KEY: float(busy[i]),
            }
            if probe_count[i] > 0:
                extra[PROBE_KEY] = float(probe_sum[i] / probe_count[i])
                extra[PROBE_COUNT_KEY] = float(probe_count[i])
            if np.isfinite(oldest[i]):
                extra[OLDEST_KEY] = float(oldest[i])
            iid = self.instance_ids_[i]
            out[iid] = Observation(
                time_s=t,
                instance_id=iid,
                interval_s=window,
                requests=c,
                throughput_rps=c / window,
                mean_rt_seconds=float(sums[i] / c) if c else None,
                p50_rt_seconds=float(quant[0, i]) if c else None,
                p95_rt_seconds=float(quant[1, i]) if c else None,
                p99_rt_seconds=float(quant[2, i]) if c else None,
                errors=int(refused[i]),
                util_pct=float(util),
                weight=round(weight[i]),
                extra=extra,
            )
        return Snapshot(time_s=t, environment=self.name, instances=out)

    def _link_util(self, interval: float, work: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per resource: % of its nominal capacity used in the interval by everyone on it
        (``work``: what each instance's completed jobs used)."""
        link = self._links.cols
        used = np.bincount(self.core_.instances_.res, work, minlength=len(self._links))
        total = used + link.taken_area + link.fill
        avail = link.nominal - link.taken_area / interval if interval > 0 else link.nominal
        if self.log_capacity:
            host_res = [self._host_resource.get(h.id, -1) for h in self.scenario.hosts]
            self.capacity_log_.append(np.where(np.asarray(host_res) >= 0, avail[host_res], np.nan))
        link.taken_area[:] = 0.0
        link.fill[:] = 0.0
        if interval <= 0:
            return np.full(len(self._links), np.nan)
        return np.asarray(100.0 * total / (link.nominal * interval))

    def _snapshot(self, t: float, interval: float) -> Snapshot:
        core = self.core_
        iv = core.take_interval(self._pending, _QUANTILES)
        self._pending = []
        self.lb_refused_total_ += iv.stats.unrouted
        counts, sums, quant = iv.stats.requests, iv.stats.rt_sum_s, iv.stats.rt_quantiles_s
        link_util = self._link_util(interval, iv.work)
        oldest = t - iv.oldest_start_s
        ins = self.instances_
        # (lists: one element of each per instance and interval, read as Python values)
        states, capacity, settings = ins.state.tolist(), ins.capacity.tolist(), ins.apache.tolist()
        maxconn, dropped = ins.maxconn.tolist(), ins.dropped.tolist()
        res, weight = core.instances_.res.tolist(), core.instances_.weight.tolist()
        out: dict[str, Observation] = {}
        for i, state in enumerate(states):
            if state not in (SERVING, DRAINING):
                continue
            c = int(counts[i])
            work = iv.work[i]
            util = 100.0 * work / (capacity[i] * interval) if interval > 0 else None
            cpu = None if util is None else util / 100.0
            extra: dict[str, float] = {}
            if interval > 0:
                extra[SERVED_UTIL_KEY] = float(100.0 * iv.served[i] / (capacity[i] * interval))
                extra[BUSY_KEY] = float(iv.busy_s[i])
            if (apache := settings[i]) is not None:
                # its resource is its CPU: CPU time per second, in cores
                cpu = None if util is None else float(work / interval)
                for setting, key in SERVER_SETTING_KEYS.items():
                    extra[key] = float(getattr(apache, setting))
                if interval > 0:
                    extra[BUSY_WORKERS_KEY] = float(iv.busy_worker_s[i] / interval)
            if np.isfinite(link_util[res[i]]):  # NaN: no time passed, nothing measured
                extra[LINK_UTIL_KEY] = float(link_util[res[i]])
            if maxconn[i]:
                extra[MAXCONN_KEY] = float(maxconn[i])
            if iv.probe_count[i] > 0:
                extra[PROBE_KEY] = float(iv.probe_sum_s[i] / iv.probe_count[i])
                extra[PROBE_COUNT_KEY] = float(iv.probe_count[i])
            if np.isfinite(oldest[i]):
                extra[OLDEST_KEY] = float(oldest[i])
            out[self.instance_ids_[i]] = Observation(
                time_s=t,
                instance_id=self.instance_ids_[i],
                interval_s=interval,
                requests=c,
                throughput_rps=c / interval if interval > 0 else 0.0,
                mean_rt_seconds=float(sums[i] / c) if c else None,
                p50_rt_seconds=float(quant[0, i]) if c else None,
                p95_rt_seconds=float(quant[1, i]) if c else None,
                p99_rt_seconds=float(quant[2, i]) if c else None,
                errors=int(iv.refused[i]) + dropped[i],
                cpu_util=cpu,
                util_pct=util,
                weight=round(weight[i]),
                extra=extra,
            )
            if state == DRAINING and iv.in_system[i] == 0:
                ins.state[i] = GONE  # removed and drained: this was its last report
        ins.dropped[:] = 0  # reported (the others, booting or gone, have none to report)
        return Snapshot(time_s=t, environment=self.name, instances=out)

    # -- acting ------------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out each action the simulator models; if any cannot be, raise ``ActionError``
        naming each of them (the others stay applied).

        Actions may name an instance that is booting (``SetWeight`` sets the weight it will
        start with; ``RemoveInstance`` cancels it) or draining, not one that is gone."""
        self._refuse_if_closed("apply")
        self._advance(self.clock.now())
        failed: list[tuple[object, str]] = []
        applied: list[object] = []
        for a in actions:
            why = self._apply_one(a)
            if why is None:
                applied.append(a)
            else:
                failed.append((a, why))
        if failed:
            raise ActionError(self.name, failed, applied)

    def _apply_one(self, a: Action) -> str | None:
        """Carry out ``a``; ``None`` when done, else why it was not (nothing changed then)."""
        if isinstance(a, AddInstance):
            known = self._index.get(a.instance_id)
            if known is not None and self.instances_.state[known] != GONE:
                return f"{a.instance_id!r} exists"
            if a.host not in {h.id for h in self.scenario.hosts}:
                return f"unknown host {a.host!r}"
            server = self.scenario.scaling.server if self.scenario.scaling else "lighttpd"
            apache = ApacheSettings() if server == "apache" else None
            if (
                apache is None
                and a.host not in self._host_resource
                and self.service_.capacity_bytes_per_s is None
            ):
                return f"host {a.host!r} has no capacity"
            boot = self.boot_s_
            cpus = apache_cpus(self.service_.apache, None, self.scenario.host(a.host))
            i = self._add(a.instance_id, a.host, a.weight, None, boot == 0, apache, cpus)
            if boot > 0:
                self._booting[i] = self.core_.now_s_ + boot
            else:
                self._start_probes(i, self.core_.now_s_)
            return None
        i_opt = self._index.get(a.instance_id)
        if i_opt is None or self.instances_.state[i_opt] == GONE:
            return f"unknown instance {a.instance_id!r}"
        i = i_opt
        ins = self.instances_
        if isinstance(a, SetWeight):
            self.core_.set_weight(i, float(a.weight))
        elif isinstance(a, SetMaxConn):
            ins.maxconn[i] = a.maxconn  # 0 lifts the cap, as in HAProxy
            limit = self._concurrency_limit(a.maxconn or None, ins.apache[i])
            self.core_.set_concurrency_limit(i, limit)
        elif isinstance(a, ReconfigureServer):
            return self._reconfigure(i, a)
        elif isinstance(a, RemoveInstance):
            self.core_.set_eligible(i, False)
            ins.probe_next[i] = np.inf
            if ins.state[i] == BOOTING:
                del self._booting[i]
                ins.state[i] = GONE  # never served, never reported
            elif ins.state[i] == SERVING:
                ins.state[i] = DRAINING
            if not a.drain:
                ins.dropped[i] += self.core_.drop_jobs(i)
        else:
            return f"{type(a).__name__} is not modelled by the simulator"
        return None

    def _reconfigure(self, i: int, a: ReconfigureServer) -> str | None:
        """Apply apache settings to instance i: at once with ``graceful=False``; with
        ``graceful=True`` a restart of its children closes its idle kept-alive connections and
        costs ``service.apache.reload_capacity_share`` of its CPU for ``reload_s``. Why not, when
        it cannot (nothing changed then)."""
        ins = self.instances_
        old = ins.apache[i]
        if old is None:
            return f"{a.instance_id!r} is not an apache instance: it has no settings to change"
        unknown = sorted(set(a.settings) - set(SERVER_SETTING_KEYS))
        if unknown:
            known = ", ".join(SERVER_SETTING_KEYS)
            return f"unknown setting(s) {', '.join(unknown)} (known: {known})"
        given = {  # a count read back from ``extra`` comes as a float: 16.0 is 16
            k: int(v)
            if isinstance(v, float) and v.is_integer() and k != "keepalive_timeout_s"
            else v
            for k, v in a.settings.items()
        }
        try:
            new = ApacheSettings.model_validate(old.model_dump() | given)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            return f"settings refused: {problems}"
        model = self.service_.apache
        if a.graceful and (model.reload_s is None or model.reload_capacity_share is None):
            return (
                "the cost of a graceful reload is not known: set service.apache.reload_s and"
                " reload_capacity_share (docs/simulator.md), or reconfigure online"
                " (graceful=False)"
            )
        core = self.core_
        ins.apache[i] = new
        if a.graceful:  # the old children exit, ending their idle kept-alive connections
            core.close_kept_alive(i)
        core.set_concurrency_limit(i, self._concurrency_limit(int(ins.maxconn[i]) or None, new))
        core.set_queue_limit(i, self._queue_limit(new))
        core.set_php_children(i, new.php_max_children)
        core.set_keepalive_timeout(i, new.keepalive_timeout_s)
        self._set_cpu_factor(i)  # memory pressure follows the pools' sizes
        if a.graceful and model.reload_s and model.reload_capacity_share is not None:
            r = int(core.instances_.res[i])
            nominal = float(self._links.cols.nominal[r])
            core.set_capacity(r, nominal * (1.0 - model.reload_capacity_share))
            self._reload_end[i] = core.now_s_ + model.reload_s
        return None

    def trigger(self, event: Event) -> None:
        """Start/stop antagonists at the event's time: iperf3 shares its host's link, stress-ng
        slows its host's instances; fio has no effect in the model."""
        self._refuse_if_closed("trigger")
        self._advance(self.clock.now())
        by_id = {a.id: a for a in self.scenario.antagonists}
        touched: set[str] = set()
        for aid in event.start:
            self._running.add(aid)
            touched.add(by_id[aid].host)
        for aid in event.stop:
            self._running.discard(aid)
            touched.add(by_id[aid].host)
        for host in touched:
            self._apply_host(host)

    def _apply_host(self, host: str) -> None:
        running = [a for a in self.scenario.antagonists if a.id in self._running and a.host == host]
        if host in self._host_resource:
            r = self._host_resource[host]
            streams = 0.0
            taken = 0.0
            for a in running:
                if isinstance(a, Iperf3):
                    if a.bitrate_mbit is None:
                        streams += a.streams
                    else:
                        taken += a.streams * a.bitrate_mbit * 1e6 / 8.0
            self.core_.set_permanent_jobs(r, streams)
            self._links.cols.iperf[r] = taken
            self.core_.set_capacity(r, self._set_taken(r, self.core_.now_s_))
        if any(isinstance(a, Fio) for a in running):
            log.info("fio on %s: no effect in the simulator's model", host)
        for i in np.flatnonzero(self.instances_.host == host).tolist():
            self._set_cpu_factor(i)

    def _set_cpu_factor(self, i: int) -> None:
        """Instance i's slowdown by its host and its memory, from now on."""
        ins = self.instances_
        cpu = self._cpu_factor(i)
        if cpu != ins.cpu[i]:
            ins.cpu[i] = cpu
            self._now_changes.append((i, float(ins.slow[i]) * cpu))

    def take_requests(self) -> list[RequestRecord]:
        """Per-request records since the last call (only with the request log on)."""
        recs, self._log = self._log, []
        out: list[RequestRecord] = []
        ids = self.instance_ids_
        for r in recs:
            for i, s, rt, z in zip(
                r.instance.tolist(),
                r.start_s.tolist(),
                r.rt_s.tolist(),
                r.size_bytes.tolist(),
                strict=True,
            ):
                if rt >= 0:
                    out.append(RequestRecord(s, rt, 200, int(z), ids[i]))
                else:
                    out.append(RequestRecord(s, None, 503, 0, ids[i] if i >= 0 else "", "refused"))
        return out

    def close(self) -> None:
        """Drop what is held; from then on the environment refuses to observe or act."""
        self._closed = True
        self._pending = []
        self._log = []

    # -- checks ------------------------------------------------------------------------------
    def in_system(self) -> NDArray[np.int64]:
        return self.core_.in_system()

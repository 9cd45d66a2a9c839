"""``SimEnvironment``: the simulator behind the same ``Environment`` protocol as the lab.

Every host with ``link_mbit`` is one processor-sharing resource (its link) shared by all its
instances and by the streams of a running iperf3 antagonist (k streams = k jobs that never
finish). An instance on a host without a link rate has its own resource of
``service.capacity_bytes_per_s``. Time is virtual: ``observe`` runs the event core up to
``clock.now()`` and summarises the interval that just ended."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from quell.core.action import Action, AddInstance, RemoveInstance, SetMaxConn, SetWeight
from quell.core.clock import VirtualClock
from quell.core.observation import Observation, Snapshot
from quell.core.rng import component_rng
from quell.errors import InputError, Problem
from quell.scenario.model import Event, Fio, Iperf3, Scenario, StressNg
from quell.scenario.service import ServiceModel
from quell.sim.core import Algorithm, EventCore, Records
from quell.sim.service import draw_sizes, slowdown_changes
from quell.store.run import RequestRecord
from quell.workload.schedule import RequestSchedule, build_schedule

log = logging.getLogger(__name__)

AUTO_LOG_MAX_REQUESTS = 500_000
_QUANTILES = (0.50, 0.95, 0.99)


class SimEnvironment:
    """Simulate ``scenario`` (its ``service`` section, or defaults) in virtual time.

    Parameters
    ----------
    scenario : the scenario, as loaded.
    base_dir : where relative paths in the scenario (traces) resolve.
    schedule : a precomputed request schedule (default: built from the scenario seed).
    """

    name = "sim"

    def __init__(
        self,
        scenario: Scenario,
        base_dir: Path = Path("."),
        schedule: RequestSchedule | None = None,
    ) -> None:
        self.scenario = scenario
        self.base_dir = base_dir
        self.clock = VirtualClock()
        svc = scenario.service or ServiceModel()
        self.service_ = svc
        self.schedule_ = schedule if schedule is not None else build_schedule(scenario, base_dir)
        self.sizes_bytes_ = draw_sizes(svc.size, self.schedule_.size_bytes, scenario.seed)
        algorithm: Algorithm = svc.dispatch or (
            "leastconn" if scenario.load_balancer.algorithm == "leastconn" else "weighted_rr"
        )
        self.core_ = EventCore(algorithm)
        self._host_resource: dict[str, int] = {}
        self._host_capacity: dict[str, float] = {}
        for h in scenario.hosts:
            if h.link_mbit is not None:
                cap = h.link_mbit * 1e6 / 8.0
                self._host_capacity[h.id] = cap
                self._host_resource[h.id] = self.core_.add_resource(cap, self._job_cap())
        self.instance_ids_: list[str] = []
        self._index: dict[str, int] = {}
        self._host_of: list[str] = []
        self._capacity: list[float] = []
        self._slow: list[float] = []
        self._cpu: list[float] = []
        self._reported: list[bool] = []
        self._dropped: list[int] = []
        problems: list[Problem] = []
        for k, inst in enumerate(scenario.instances):
            if inst.host not in self._host_resource and svc.capacity_bytes_per_s is None:
                problems.append(
                    Problem(
                        f"instances[{k}]",
                        f"host {inst.host!r} has no link_mbit: set service.capacity_bytes_per_s",
                    )
                )
                continue
            self._add(inst.id, inst.host, inst.weight, inst.maxconn, eligible=True)
        if problems:
            raise InputError(scenario.name, problems)
        ct, ci, cf = slowdown_changes(
            svc.slowdown, self.instance_ids_, scenario.duration_s, scenario.seed
        )
        self._chg_t, self._chg_i, self._chg_f = ct, ci, cf
        self._chg_cursor = 0
        self._now_changes: list[tuple[int, float]] = []
        self._arr_cursor = 0
        self._booting: dict[int, float] = {}
        self._running: set[str] = set()
        self._probe_rng = component_rng(scenario.seed, "sim/probes")
        self._probe_t = np.empty(0)
        self._probe_i = np.empty(0, dtype=np.int64)
        self._pending: list[Records] = []
        self._probe_rt = np.full(self.core_.n_instances, np.nan)
        self._last_obs_s = 0.0
        self._last_work = np.zeros(self.core_.n_instances)
        self._last_rej = np.zeros(self.core_.n_instances, dtype=np.int64)
        self.lb_refused_total_ = 0
        mode = svc.request_log
        self.request_log_ = mode == "on" or (
            mode == "auto" and len(self.schedule_) <= AUTO_LOG_MAX_REQUESTS
        )
        self._log: list[Records] = []
        self._schedule_probes(0.0, scenario.interval_s)

    # -- building ----------------------------------------------------------------------------
    def _job_cap(self) -> float:
        svc = self.service_
        if svc.discipline == "fcfs" and svc.capacity_bytes_per_s is not None:
            return svc.capacity_bytes_per_s / svc.workers
        return float("inf")

    def _add(self, iid: str, host: str, weight: int, maxconn: int | None, eligible: bool) -> int:
        svc = self.service_
        if host in self._host_resource:
            r = self._host_resource[host]
            cap = self._host_capacity[host]
        else:
            assert svc.capacity_bytes_per_s is not None
            cap = svc.capacity_bytes_per_s
            r = self.core_.add_resource(cap, self._job_cap())
        maxconn = maxconn or self.scenario.load_balancer.maxconn_per_server
        limits = [x for x in (maxconn, svc.workers if svc.discipline == "fcfs" else None) if x]
        i = self.core_.add_instance(
            r,
            weight=weight,
            concurrency_limit=min(limits) if limits else None,
            queue_limit=svc.queue_limit,
            eligible=eligible,
        )
        self.instance_ids_.append(iid)
        self._index[iid] = i
        self._host_of.append(host)
        self._capacity.append(cap)
        self._slow.append(1.0)
        self._cpu.append(self._cpu_factor(host))
        self._reported.append(True)
        self._dropped.append(0)
        if self._cpu[-1] != 1.0:
            self.core_.i_factor_[i] = self._cpu[-1]
        return i

    def _cpu_factor(self, host: str) -> float:
        per = self.service_.stress_ng_slowdown_per_worker
        workers = sum(
            a.workers
            for a in self.scenario.antagonists
            if isinstance(a, StressNg) and a.host == host and a.id in getattr(self, "_running", ())
        )
        return 1.0 + per * workers

    def _schedule_probes(self, start_s: float, interval_s: float) -> None:
        if self.service_.probe_bytes <= 0:
            return
        live = [i for i in range(self.core_.n_instances) if self._reported[i]]
        t = start_s + self._probe_rng.uniform(0.0, interval_s, size=len(live))
        order = np.argsort(t, kind="stable")
        self._probe_t = np.concatenate([self._probe_t, t[order]])
        self._probe_i = np.concatenate([self._probe_i, np.asarray(live, dtype=np.int64)[order]])

    # -- running -----------------------------------------------------------------------------
    def _advance(self, t_s: float) -> None:
        core = self.core_
        times = self.schedule_.times_s
        while core.now_s_ < t_s:
            boots = [b for b in self._booting.values() if b > core.now_s_]
            t_next = min([t_s, *boots])
            a0 = self._arr_cursor
            a1 = int(np.searchsorted(times, t_next, side="left"))
            p1 = int(np.searchsorted(self._probe_t, t_next, side="left"))
            c0 = self._chg_cursor
            c1 = int(np.searchsorted(self._chg_t, t_next, side="left"))
            ci = self._chg_i[c0:c1]
            cf = self._chg_f[c0:c1] * np.asarray(self._cpu)[ci] if c1 > c0 else self._chg_f[c0:c1]
            if self._now_changes:
                now_i = np.asarray([i for i, _ in self._now_changes], dtype=np.int64)
                now_f = np.asarray([f for _, f in self._now_changes])
                ct = np.concatenate([np.full(now_i.size, core.now_s_), self._chg_t[c0:c1]])
                ci = np.concatenate([now_i, ci])
                cf = np.concatenate([now_f, cf])
                self._now_changes = []
            else:
                ct = self._chg_t[c0:c1]
            rec = core.run(
                t_next,
                times[a0:a1],
                self.sizes_bytes_[a0:a1],
                self._probe_t[:p1],
                self._probe_i[:p1],
                np.full(p1, float(self.service_.probe_bytes)),
                ct,
                ci,
                cf,
            )
            for i, f in zip(self._chg_i[c0:c1], self._chg_f[c0:c1], strict=True):
                self._slow[int(i)] = float(f)
            self._arr_cursor, self._chg_cursor = a1, c1
            self._probe_t, self._probe_i = self._probe_t[p1:], self._probe_i[p1:]
            self._pending.append(rec)
            if self.request_log_:
                self._log.append(rec)
            seen = ~np.isnan(rec.probe_rt_s)
            self._probe_rt[: seen.size][seen] = rec.probe_rt_s[seen]
            for i, ready in list(self._booting.items()):
                if ready <= core.now_s_:
                    core.set_eligible(i, True)
                    del self._booting[i]

    def observe(self) -> Snapshot:
        t = self.clock.now()
        self._advance(t)
        interval = t - self._last_obs_s
        snap = self._snapshot(t, interval)
        self._last_obs_s = t
        self._schedule_probes(t, self.scenario.interval_s)
        return snap

    def _snapshot(self, t: float, interval: float) -> Snapshot:
        core = self.core_
        n = core.n_instances
        recs = [r for r in self._pending if len(r)]
        self._pending = []
        inst = np.concatenate([r.instance for r in recs]) if recs else np.empty(0, np.int64)
        rt = np.concatenate([r.rt_s for r in recs]) if recs else np.empty(0)
        self.lb_refused_total_ += int(np.count_nonzero(inst < 0))
        ok = (inst >= 0) & (rt >= 0)
        inst_ok, rt_ok = inst[ok], rt[ok]
        counts = np.bincount(inst_ok, minlength=n)
        sums = np.bincount(inst_ok, weights=rt_ok, minlength=n)
        order = np.lexsort((rt_ok, inst_ok))
        rt_sorted = rt_ok[order]
        first = np.cumsum(counts) - counts
        quant = np.full((len(_QUANTILES), n), np.nan)
        has = counts > 0
        for k, q in enumerate(_QUANTILES):
            pos = (counts[has] - 1) * q
            lo = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo + 1, counts[has] - 1)
            frac = pos - lo
            base = first[has]
            quant[k, has] = rt_sorted[base + lo] * (1 - frac) + rt_sorted[base + hi] * frac
        rej = core.i_rej_ - self._last_rej
        self._last_rej = core.i_rej_.copy()
        work = core.i_work_ - self._last_work
        self._last_work = core.i_work_.copy()
        probe_rt = self._probe_rt
        self._probe_rt = np.full(n, np.nan)
        in_system = core.in_system()
        out: dict[str, Observation] = {}
        for i in range(n):
            if not self._reported[i]:
                continue
            c = int(counts[i])
            util = 100.0 * work[i] / (self._capacity[i] * interval) if interval > 0 else None
            extra = {} if np.isnan(probe_rt[i]) else {"probe_rt_seconds": float(probe_rt[i])}
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
                errors=int(rej[i]) + self._dropped[i],
                cpu_util=None if util is None else util / 100.0,
                util_pct=util,
                weight=round(float(core.i_weight_[i])),
                extra=extra,
            )
            self._dropped[i] = 0
            if not core.i_elig_[i] and i not in self._booting and in_system[i] == 0:
                self._reported[i] = False  # removed and drained
        return Snapshot(time_s=t, environment=self.name, instances=out)

    # -- acting ------------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out what the simulator models; the others are named in one ``InputError``."""
        self._advance(self.clock.now())
        problems: list[Problem] = []
        for a in actions:
            if isinstance(a, AddInstance):
                if a.instance_id in self._index:
                    problems.append(Problem("AddInstance", f"{a.instance_id!r} exists"))
                    continue
                if a.host not in {h.id for h in self.scenario.hosts}:
                    problems.append(Problem("AddInstance", f"unknown host {a.host!r}"))
                    continue
                if a.host not in self._host_resource and self.service_.capacity_bytes_per_s is None:
                    problems.append(Problem("AddInstance", f"host {a.host!r} has no capacity"))
                    continue
                boot = self.service_.boot_seconds
                i = self._add(a.instance_id, a.host, a.weight, None, eligible=boot == 0)
                self._probe_rt = np.append(self._probe_rt, np.nan)
                self._last_work = np.append(self._last_work, 0.0)
                self._last_rej = np.append(self._last_rej, 0)
                if boot > 0:
                    self._booting[i] = self.core_.now_s_ + boot
                continue
            i_opt = self._index.get(a.instance_id)
            if i_opt is None or not self._reported[i_opt]:
                problems.append(Problem(type(a).__name__, f"unknown instance {a.instance_id!r}"))
                continue
            i = i_opt
            if isinstance(a, SetWeight):
                self.core_.set_weight(i, float(a.weight))
            elif isinstance(a, SetMaxConn):
                svc = self.service_
                limit = min(a.maxconn, svc.workers) if svc.discipline == "fcfs" else a.maxconn
                self.core_.set_concurrency_limit(i, limit)
            elif isinstance(a, RemoveInstance):
                self.core_.set_eligible(i, False)
                self._booting.pop(i, None)
                if not a.drain:
                    self._dropped[i] += self.core_.drop_jobs(i)
            else:
                problems.append(
                    Problem(type(a).__name__, "not modelled by the simulator (action ignored)")
                )
        if problems:
            raise InputError("sim.apply", problems)

    def trigger(self, event: Event) -> None:
        """Start/stop antagonists at the event's time: iperf3 shares its host's link, stress-ng
        slows its host's instances; fio has no effect in the model."""
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
            cap = self._host_capacity[host]
            streams = 0.0
            taken = 0.0
            for a in running:
                if isinstance(a, Iperf3):
                    if a.bitrate_mbit is None:
                        streams += a.streams
                    else:
                        taken += a.streams * a.bitrate_mbit * 1e6 / 8.0
            self.core_.set_permanent_jobs(r, streams)
            self.core_.set_capacity(r, cap - min(taken, 0.95 * cap))
        if any(isinstance(a, Fio) for a in running):
            log.info("fio on %s: no effect in the simulator's model", host)
        cpu = self._cpu_factor(host)
        for i, h in enumerate(self._host_of):
            if h == host and cpu != self._cpu[i]:
                self._cpu[i] = cpu
                self._now_changes.append((i, self._slow[i] * cpu))

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
        self._pending = []
        self._log = []

    # -- checks ------------------------------------------------------------------------------
    def in_system(self) -> NDArray[np.int64]:
        return self.core_.in_system()

"""``EventCore``: the state of a simulated fleet (resources, instances, jobs) and the one method
that moves it forward in time. The theory tests, the bench and ``SimEnvironment`` all drive it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from quell.sim import kernel

Algorithm = Literal["weighted_rr", "plain_rr", "leastconn"]
_ALGO = {
    "weighted_rr": kernel.ALGO_WEIGHTED_RR,
    "plain_rr": kernel.ALGO_PLAIN_RR,
    "leastconn": kernel.ALGO_LEASTCONN,
}
NO_LIMIT = 2**62
_EMPTY_F = np.empty(0, dtype=np.float64)
_EMPTY_I = np.empty(0, dtype=np.int64)
_POOL0 = 1024


@dataclass(frozen=True)
class Records:
    """What one ``EventCore.run`` produced. ``rt_s`` is -1 for a refused request; ``instance``
    is -1 when no server was eligible. ``probe_sum_s[i]`` adds up the times of instance i's
    probes that completed, ``probe_count[i]`` counts them."""

    instance: NDArray[np.int64]
    start_s: NDArray[np.float64]
    rt_s: NDArray[np.float64]
    size_bytes: NDArray[np.float64]
    probe_sum_s: NDArray[np.float64]
    probe_count: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.instance.size)


def _f(*values: float) -> NDArray[np.float64]:
    return np.array(values, dtype=np.float64)


class EventCore:
    """Processor-sharing resources with instances on them, a load balancer in front.

    Parameters
    ----------
    algorithm : dispatch of arrivals: ``weighted_rr`` (stride scheduling: instance i's picks
        are evenly spaced 1/weight apart, as HAProxy's roundrobin), ``plain_rr`` (weights only
        switch an instance on/off), ``leastconn`` (fewest (connections + 1) / weight).

    Resources and instances are added with ``add_resource``/``add_instance``. The state is a
    set of flat arrays (see ``quell.sim.kernel``); those with a trailing underscore may be read.
    """

    def __init__(self, algorithm: Algorithm = "weighted_rr") -> None:
        self.algorithm = algorithm
        self.now_s_ = 0.0
        # resources: capacity, per-job cap, permanent jobs, jobs, virtual time, last update,
        # busy time, slab offset and capacity in the job pool
        self.r_cap_ = _EMPTY_F.copy()
        self.r_jobcap_ = _EMPTY_F.copy()
        self.r_perm_ = _EMPTY_F.copy()
        self.r_n_ = _EMPTY_I.copy()
        self.r_vtime_ = _EMPTY_F.copy()
        self.r_tlast_ = _EMPTY_F.copy()
        self.r_busy_ = _EMPTY_F.copy()
        """Time each resource had at least one job in service (seconds)."""
        self._r_off = _EMPTY_I.copy()
        self._r_capn = _EMPTY_I.copy()
        self._jobs: tuple[NDArray[Any], ...] = (
            np.empty(_POOL0),
            np.empty(_POOL0),
            np.empty(_POOL0, dtype=np.int64),
            np.empty(_POOL0),
        )
        # instances
        self.i_res_ = _EMPTY_I.copy()
        self.i_factor_ = _EMPTY_F.copy()
        self.i_climit_ = _EMPTY_I.copy()
        self.i_qlimit_ = _EMPTY_I.copy()
        self.i_weight_ = _EMPTY_F.copy()
        self.i_elig_ = np.empty(0, dtype=np.bool_)
        self.i_active_ = _EMPTY_I.copy()
        self.i_wait_ = _EMPTY_I.copy()
        self.i_pos_ = _EMPTY_F.copy()
        self.i_seq_ = _EMPTY_F.copy()
        self.i_area_ = _EMPTY_F.copy()
        """∫ (jobs in service + waiting) dt per instance: Little's L times elapsed time."""
        self.i_tlast_ = _EMPTY_F.copy()
        self.i_work_ = _EMPTY_F.copy()
        """Capacity used by completed jobs (bytes × slowdown) per instance."""
        self.i_rej_ = _EMPTY_I.copy()
        """Refused requests (admission limit) per instance."""
        self._q_off = _EMPTY_I.copy()
        self._q_capn = _EMPTY_I.copy()
        self._qhead = _EMPTY_I.copy()
        self._qpool: tuple[NDArray[Any], ...] = (np.empty(_POOL0), np.empty(_POOL0))
        self._iscal = np.zeros(2, dtype=np.int64)
        self.scalars_ = _f(0.0, 0.0)

    # -- the kernel's argument groups --------------------------------------------------------
    def _res(self) -> tuple[Any, ...]:
        return (
            self.r_cap_, self.r_jobcap_, self.r_perm_, self.r_n_, self.r_vtime_, self.r_tlast_,
            self.r_busy_, self._r_off, self._r_capn,
        )  # fmt: skip

    def _inst(self) -> tuple[Any, ...]:
        return (
            self.i_res_, self.i_factor_, self.i_climit_, self.i_qlimit_, self.i_weight_,
            self.i_elig_, self.i_active_, self.i_wait_, self.i_pos_, self.i_seq_, self.i_area_,
            self.i_tlast_, self.i_work_, self.i_rej_,
        )  # fmt: skip

    def _queues(self) -> tuple[Any, ...]:
        return (self._q_off, self._q_capn, self._qhead, *self._qpool)

    def _make_space(self) -> None:
        """Compact both pools and leave at least as much free space as is in use."""
        self._r_off, self._jobs, self._iscal[0] = _compact(
            self._r_off, self._r_capn, np.zeros_like(self.r_n_), self.r_n_, self._jobs
        )
        self._q_off, self._qpool, self._iscal[1] = _compact(
            self._q_off, self._q_capn, self._qhead, self.i_wait_, self._qpool
        )
        self._qhead[:] = 0

    # -- building ----------------------------------------------------------------------------
    @property
    def n_resources(self) -> int:
        return int(self.r_cap_.size)

    @property
    def n_instances(self) -> int:
        return int(self.i_res_.size)

    def add_resource(
        self, capacity_bytes_per_s: float, job_cap_bytes_per_s: float = float("inf")
    ) -> int:
        """A shared server of ``capacity_bytes_per_s`` split equally among its jobs, each job
        getting at most ``job_cap_bytes_per_s``. Returns its index."""
        self.r_cap_ = np.append(self.r_cap_, float(capacity_bytes_per_s))
        self.r_jobcap_ = np.append(self.r_jobcap_, float(job_cap_bytes_per_s))
        self.r_perm_ = np.append(self.r_perm_, 0.0)
        self.r_n_ = np.append(self.r_n_, 0)
        self.r_vtime_ = np.append(self.r_vtime_, 0.0)
        self.r_tlast_ = np.append(self.r_tlast_, self.now_s_)
        self.r_busy_ = np.append(self.r_busy_, 0.0)
        self._r_off = np.append(self._r_off, 0)
        self._r_capn = np.append(self._r_capn, 0)
        return self.n_resources - 1

    def add_instance(
        self,
        resource: int,
        weight: float = 100.0,
        concurrency_limit: int | None = None,
        queue_limit: int | None = None,
        eligible: bool = True,
    ) -> int:
        """An instance whose jobs run on ``resource``: at most ``concurrency_limit`` in service
        (FCFS workers or maxconn), the rest wait in FIFO order; refused beyond ``queue_limit``
        jobs in the instance."""
        w = float(weight)
        self.i_res_ = np.append(self.i_res_, resource)
        self.i_factor_ = np.append(self.i_factor_, 1.0)
        self.i_climit_ = np.append(
            self.i_climit_, NO_LIMIT if concurrency_limit is None else concurrency_limit
        )
        self.i_qlimit_ = np.append(self.i_qlimit_, -1 if queue_limit is None else queue_limit)
        self.i_weight_ = np.append(self.i_weight_, w)
        self.i_elig_ = np.append(self.i_elig_, bool(eligible))
        self.i_active_ = np.append(self.i_active_, 0)
        self.i_wait_ = np.append(self.i_wait_, 0)
        self.i_pos_ = np.append(self.i_pos_, self._fresh_position(w))
        self.i_seq_ = np.append(self.i_seq_, -1.0e12 + self.n_instances)
        self.i_area_ = np.append(self.i_area_, 0.0)
        self.i_tlast_ = np.append(self.i_tlast_, self.now_s_)
        self.i_work_ = np.append(self.i_work_, 0.0)
        self.i_rej_ = np.append(self.i_rej_, 0)
        self._q_off = np.append(self._q_off, 0)
        self._q_capn = np.append(self._q_capn, 0)
        self._qhead = np.append(self._qhead, 0)
        return self.n_instances - 1

    def _fresh_position(self, weight: float) -> float:
        step = 1.0 if self.algorithm == "plain_rr" else 1.0 / max(weight, 1e-300)
        return float(self.scalars_[0]) + 0.5 * step

    # -- changing ----------------------------------------------------------------------------
    def set_weight(self, instance: int, weight: float) -> None:
        """Change a weight; the instance keeps its place in the round-robin cycle, rescaled."""
        old = float(self.i_weight_[instance])
        w = float(weight)
        if self.algorithm == "weighted_rr" and old > 0 and w > 0:
            vpass = float(self.scalars_[0])
            self.i_pos_[instance] = vpass + (self.i_pos_[instance] - vpass) * old / w
        elif old <= 0 < w:
            self.i_pos_[instance] = self._fresh_position(w)
        self.i_weight_[instance] = w

    def set_eligible(self, instance: int, eligible: bool) -> None:
        """Whether the balancer may send new requests to ``instance`` (booted, not removed)."""
        if eligible and not self.i_elig_[instance]:
            self.i_pos_[instance] = self._fresh_position(float(self.i_weight_[instance]))
        self.i_elig_[instance] = eligible

    def set_permanent_jobs(self, resource: int, jobs: float) -> None:
        """Antagonist streams that share ``resource`` like jobs that never finish."""
        self.r_perm_[resource] = jobs

    def set_capacity(self, resource: int, capacity_bytes_per_s: float) -> None:
        self.r_cap_[resource] = capacity_bytes_per_s

    @staticmethod
    def capacity_code(resource: int) -> int:
        """The ``change_instance`` value of a capacity change of ``resource`` in ``run``."""
        return -resource - 1

    def set_concurrency_limit(self, instance: int, limit: int | None) -> None:
        self.i_climit_[instance] = NO_LIMIT if limit is None else limit
        while (
            kernel.admit_waiting(
                self._res(), self._jobs, self._inst(), self._queues(), self._iscal, self.now_s_
            )
            != kernel.OK
        ):
            self._make_space()

    def drop_jobs(self, instance: int) -> int:
        """Abort everything ``instance`` has in service or waiting; returns the count."""
        return int(
            kernel.drop_instance(instance, self._res(), self._jobs, self._inst(), self._queues())
        )

    def in_system(self) -> NDArray[np.int64]:
        """Jobs in service or waiting, per instance."""
        return self.i_active_ + self.i_wait_

    def oldest_start_s(self) -> NDArray[np.float64]:
        """Per instance, the arrival time of its oldest request in service or waiting (probes
        left out); ``inf`` for an instance that holds none."""
        out: NDArray[np.float64] = kernel.oldest_start(
            self.r_n_,
            self._r_off,
            self._jobs[1],
            self._jobs[2],
            self.i_wait_,
            self._q_off,
            self._qhead,
            self._qpool[0],
        )
        return out

    # -- running -----------------------------------------------------------------------------
    def run(
        self,
        t_end_s: float,
        arrival_s: NDArray[np.float64],
        size_bytes: NDArray[np.float64],
        probe_s: NDArray[np.float64] = _EMPTY_F,
        probe_instance: NDArray[np.int64] = _EMPTY_I,
        probe_bytes: NDArray[np.float64] = _EMPTY_F,
        change_s: NDArray[np.float64] = _EMPTY_F,
        change_instance: NDArray[np.int64] = _EMPTY_I,
        change_factor: NDArray[np.float64] = _EMPTY_F,
    ) -> Records:
        """Advance to ``t_end_s``. Arrivals, probes and changes are sorted and lie in
        ``[now, t_end_s)``. A change with ``change_instance = i >= 0`` sets instance i's slowdown
        factor (work multiplier) to ``change_factor``; one with ``capacity_code(r)`` sets
        resource r's capacity (bytes/s) to it."""
        n_max = arrival_s.size + probe_s.size + int(self.r_n_.sum()) + int(self.i_wait_.sum())
        out = (
            np.empty(n_max, dtype=np.int64),
            np.empty(n_max),
            np.empty(n_max),
            np.empty(n_max),
        )
        probe_rt = np.zeros((2, self.n_instances))
        cursor = np.zeros(4, dtype=np.int64)
        args = (
            np.ascontiguousarray(arrival_s, dtype=np.float64),
            np.ascontiguousarray(size_bytes, dtype=np.float64),
            np.ascontiguousarray(probe_s, dtype=np.float64),
            np.ascontiguousarray(probe_instance, dtype=np.int64),
            np.ascontiguousarray(probe_bytes, dtype=np.float64),
            np.ascontiguousarray(change_s, dtype=np.float64),
            np.ascontiguousarray(change_instance, dtype=np.int64),
            np.ascontiguousarray(change_factor, dtype=np.float64),
        )
        algo = _ALGO[self.algorithm]
        while (
            kernel.run_segment(
                float(t_end_s),
                algo,
                *args,
                cursor,
                self._res(),
                self._jobs,
                self._inst(),
                self._queues(),
                self.scalars_,
                self._iscal,
                out,
                probe_rt,
            )
            != kernel.OK
        ):
            self._make_space()
        self.now_s_ = float(t_end_s)
        n = int(cursor[3])
        return Records(out[0][:n], out[1][:n], out[2][:n], out[3][:n], probe_rt[0], probe_rt[1])


@dataclass(frozen=True)
class IntervalStats:
    """What one interval's records add up to, per instance: completed requests, the sum of
    their response times, and the response-time quantiles asked for (one row per quantile, NaN
    where none completed); and the requests no server was eligible for."""

    requests: NDArray[np.int64]
    rt_sum_s: NDArray[np.float64]
    rt_quantiles_s: NDArray[np.float64]
    unrouted: int


def interval_stats(
    records: Sequence[Records], n_instances: int, quantiles: Sequence[float]
) -> IntervalStats:
    """Add up ``records`` (one interval's, in order) for ``n_instances`` instances."""
    if len(records) == 1:
        inst, rt = records[0].instance, records[0].rt_s
    elif records:
        inst = np.concatenate([r.instance for r in records])
        rt = np.concatenate([r.rt_s for r in records])
    else:
        inst, rt = _EMPTY_I, _EMPTY_F
    counts, sums, quant, unrouted = kernel.interval_stats(
        inst, rt, n_instances, np.asarray(quantiles, dtype=np.float64)
    )
    return IntervalStats(counts, sums, quant, int(unrouted))


def load_event_core() -> None:
    """Load the compiled code a run calls at every interval now (from numba's disk cache;
    compiled the first time) rather than at the first interval: a tiny run."""
    core = EventCore()
    core.add_instance(core.add_resource(1.0))
    records = core.run(1.0, _f(0.5), _f(1.0))
    interval_stats([records], 1, (0.5,))
    core.oldest_start_s()


def _compact(
    off: NDArray[np.int64],
    capn: NDArray[np.int64],
    live_from: NDArray[np.int64],
    live_n: NDArray[np.int64],
    arrays: tuple[NDArray[Any], ...],
) -> tuple[NDArray[np.int64], tuple[NDArray[Any], ...], int]:
    """Copy each slab's live entries to the front of fresh, larger arrays (slabs keep their
    capacity; live entries start at the slab's offset). Returns new offsets, arrays, used."""
    new_off = np.concatenate([[0], np.cumsum(capn)[:-1]]).astype(np.int64)
    used = int(capn.sum())
    size = 2 * used + 2 * int(capn.max(initial=0)) + _POOL0
    total = int(live_n.sum())
    first = np.cumsum(live_n) - live_n
    within = np.arange(total) - np.repeat(first, live_n)
    src = np.repeat(off + live_from, live_n) + within
    dst = np.repeat(new_off, live_n) + within
    new = []
    for a in arrays:
        b = np.empty(size, dtype=a.dtype)
        b[dst] = a[src]
        new.append(b)
    return new_off, tuple(new), used

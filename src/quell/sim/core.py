"""``EventCore``: the state of a simulated fleet (resources, instances, jobs) and the one method
that moves it forward in time. The theory tests, the bench and ``SimEnvironment`` all drive it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from quell.sim import kernel
from quell.sim.table import Table

P = TypeVar("P", kernel.Jobs, kernel.QueuePool)
T = TypeVar("T", bound=np.generic)
Algorithm = Literal["weighted_rr", "plain_rr", "leastconn"]
_ALGO = {
    "weighted_rr": kernel.ALGO_WEIGHTED_RR,
    "plain_rr": kernel.ALGO_PLAIN_RR,
    "leastconn": kernel.ALGO_LEASTCONN,
}
NO_LIMIT = 2**62
MAX_PAGES = kernel.MAX_PAGES
"""PHP pages the event core tells apart."""
_EMPTY_F = np.empty(0, dtype=np.float64)
_EMPTY_I = np.empty(0, dtype=np.int64)
_POOL0 = 1024

RequestDraws = Callable[[int], tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]]
"""``draw(u)``: closed-loop user u's next requests, as many as it returns (the same number
every call): their sizes, PHP pages (0: a static file) and the think time after each."""


@dataclass(frozen=True)
class Records:
    """What one ``EventCore.run`` produced, in order of completion (or refusal). ``rt_s`` is -1
    for a refused request; ``instance`` is -1 when no server was eligible. ``size_bytes`` is the
    request's size as it came (an apache instance's work is computed from it). ``probe_sum_s[i]`` adds up the times of instance i's
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

    Resources and instances are added with ``add_resource``/``add_instance``; an instance
    becomes an apache server (worker pool, php-fpm pool, keep-alive) with ``set_server``;
    closed-loop users come with ``add_users``. The state is the named groups of flat arrays of
    ``quell.sim.kernel``; ``resources_`` and ``instances_`` may be read.
    """

    def __init__(self, algorithm: Algorithm = "weighted_rr") -> None:
        self.algorithm = algorithm
        self.now_s_ = 0.0
        self._res = Table(kernel.Resources)
        self._inst = Table(kernel.Instances)
        self._accept = Table(kernel.Queue)
        self._php = Table(kernel.Queue)
        self._jobs = kernel.Jobs(
            np.empty(_POOL0), np.empty(_POOL0), np.empty(_POOL0, dtype=np.int64), np.empty(_POOL0)
        )
        self._waiting = kernel.QueuePool(
            np.empty(_POOL0), np.empty(_POOL0), np.empty(_POOL0, dtype=np.int64)
        )
        self._used = np.zeros(2, dtype=np.int64)
        self._lb = _f(0.0, 0.0)
        self.page_work_ = _f(0.0)
        """Work of each PHP page (index 1 on; 0 is a static file's: none)."""
        self._users = kernel.Users(
            kernel.IndexedHeap(_EMPTY_I, _EMPTY_I, _EMPTY_F, _EMPTY_F),
            _EMPTY_I, _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_I,
        )  # fmt: skip
        self.keepalive = False
        self._draw: RequestDraws | None = None
        self._draws = kernel.Draws(
            np.empty((0, 1)), np.empty((0, 1), dtype=np.int64), np.empty((0, 1))
        )
        self._sent = 0
        self._max_sent = 0
        self._marks = (_EMPTY_F, _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_F)
        """The instances' work, refusals, busy-worker area, served capacity and busy time at
        the last ``take_interval``."""

    @property
    def resources_(self) -> kernel.Resources:
        """Per resource: capacity, jobs, virtual time, busy time (``kernel.Resources``)."""
        return self._res.cols

    @property
    def instances_(self) -> kernel.Instances:
        """Per instance: its resource, limits, weight, work done, areas (``kernel.Instances``)."""
        return self._inst.cols

    def _state(self) -> kernel.State:
        return kernel.State(
            self._res.cols, self._jobs, self._inst.cols, self._accept.cols, self._php.cols,
            self._waiting, self._users, self._draws, self.page_work_, self._lb, self._used,
        )  # fmt: skip

    def _make_space(self) -> None:
        """Compact both pools and leave at least as much free space as is in use."""
        res = self._res.cols
        res.off[:], self._jobs, self._used[0] = _compact(
            res.off, res.capn, np.zeros_like(res.n), res.n, self._jobs
        )
        accept, php = self._accept.cols, self._php.cols
        off, self._waiting, self._used[1] = _compact(
            np.concatenate([accept.off, php.off]),
            np.concatenate([accept.capn, php.capn]),
            np.concatenate([accept.head, php.head]),
            np.concatenate([accept.n, php.n]),
            self._waiting,
        )
        n = self.n_instances
        accept.off[:], php.off[:] = off[:n], off[n:]
        accept.head[:] = 0
        php.head[:] = 0

    # -- building ----------------------------------------------------------------------------
    @property
    def n_resources(self) -> int:
        return len(self._res)

    @property
    def n_instances(self) -> int:
        return len(self._inst)

    def add_resource(
        self, capacity_bytes_per_s: float, job_cap_bytes_per_s: float = float("inf")
    ) -> int:
        """A shared server of ``capacity_bytes_per_s`` split equally among its jobs, each job
        getting at most ``job_cap_bytes_per_s`` (for an apache instance's CPU: work in
        CPU-seconds, capacity in cores, one core per job). Returns its index."""
        return self._res.append(
            cap=capacity_bytes_per_s, jobcap=job_cap_bytes_per_s, tlast=self.now_s_
        )

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
        if self.n_instances >= kernel.MAX_INSTANCES:
            raise ValueError(f"at most {kernel.MAX_INSTANCES} instances")
        self._accept.append()
        self._php.append()
        return self._inst.append(
            res=resource,
            factor=1.0,
            climit=NO_LIMIT if concurrency_limit is None else concurrency_limit,
            qlimit=-1 if queue_limit is None else queue_limit,
            weight=w,
            elig=eligible,
            pos=self._fresh_position(w),
            seq=-1.0e12 + self.n_instances,  # before any pick: the lowest index first
            tlast=self.now_s_,
            plimit=NO_LIMIT,
            bwork=1.0,
        )

    def set_server(
        self,
        instance: int,
        php_children: int,
        keepalive_timeout_s: float,
        idle_holds_worker: bool,
        request_work: float,
        work_per_byte: float,
        connection_work: float,
    ) -> None:
        """Make ``instance`` an apache server: a request's work (on its resource) is
        ``request_work`` + ``work_per_byte`` × its size (+ its PHP page's work, + a new
        connection's ``connection_work``); a PHP page needs one of ``php_children`` php-fpm
        children; a closed-loop user's kept-alive connection stays open
        ``keepalive_timeout_s`` after each answer, holding a worker while idle when
        ``idle_holds_worker`` (the worker MPM). Its concurrency limit is its workers."""
        inst = self._inst.cols
        inst.apache[instance] = True
        inst.rwork[instance] = request_work
        inst.bwork[instance] = work_per_byte
        inst.cwork[instance] = connection_work
        inst.hold[instance] = idle_holds_worker
        self.set_keepalive_timeout(instance, keepalive_timeout_s)
        self.set_php_children(instance, php_children)

    def set_keepalive_timeout(self, instance: int, seconds: float) -> None:
        """From now on, connections answered by ``instance`` stay open this long idle."""
        self._inst.cols.kat[instance] = seconds

    def set_php_children(self, instance: int, children: int) -> None:
        self._inst.cols.plimit[instance] = children
        self._admit_waiting()

    def set_overhead(self, resource: int, per_job: float) -> None:
        """Divide the per-job rate of ``resource`` by 1 + ``per_job`` × its jobs."""
        self._res.cols.ovh[resource] = per_job

    def set_pages(self, work: Sequence[float]) -> None:
        """The work of PHP pages 1, 2, ... on an apache instance (before its slowdown)."""
        if len(work) > kernel.MAX_PAGES:
            raise ValueError(f"at most {kernel.MAX_PAGES} PHP pages")
        self.page_work_ = np.concatenate([[0.0], np.asarray(work, dtype=np.float64)])

    def add_users(
        self,
        first_s: NDArray[np.float64],
        keepalive: bool,
        draw: RequestDraws,
        max_requests: int,
    ) -> None:
        """Closed-loop users, user u sending its first request at ``first_s[u]``: each waits
        for its answer (or refusal), thinks, and sends the next, until ``max_requests``
        requests were sent in all. ``draw(u)`` gives user u's next requests and the think
        after each, from the user's own stream, so what a user asks for and how long it thinks
        do not depend on the server. With ``keepalive`` a user keeps its connection to an
        apache instance open between requests (``set_server``); elsewhere, and without it,
        each request is a new connection the balancer dispatches."""
        n = int(first_s.size)
        queue = kernel.IndexedHeap(
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
            np.asarray(first_s, dtype=np.float64).copy(),
            np.arange(n, dtype=np.float64),
        )
        kernel.build_heap(queue)
        self._users = kernel.Users(
            queue, np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.zeros(n),
            np.zeros(n), np.zeros(n, dtype=np.int64),
        )  # fmt: skip
        self.keepalive = keepalive
        self._draw = draw
        rows = [draw(u) for u in range(n)]
        self._draws = kernel.Draws._make(
            np.ascontiguousarray(np.stack([row[k] for row in rows]).reshape(n, -1))
            for k in range(3)
        )
        self._sent, self._max_sent = 0, max_requests

    @property
    def requests_sent(self) -> int:
        """Requests the closed-loop users have sent."""
        return self._sent

    def _more_draws(self, user: int) -> None:
        """User ``user``'s next requests (it has sent, and had answered, all it had)."""
        assert self._draw is not None
        for have, more in zip(self._draws, self._draw(user), strict=True):
            have[user] = more
        self._users.sent[user] = 0

    def _fresh_position(self, weight: float) -> float:
        step = 1.0 if self.algorithm == "plain_rr" else 1.0 / max(weight, 1e-300)
        return float(self._lb[0]) + 0.5 * step

    # -- changing ----------------------------------------------------------------------------
    def set_weight(self, instance: int, weight: float) -> None:
        """Change a weight; the instance keeps its place in the round-robin cycle, rescaled."""
        inst = self._inst.cols
        old = float(inst.weight[instance])
        w = float(weight)
        if self.algorithm == "weighted_rr" and old > 0 and w > 0:
            vpass = float(self._lb[0])
            inst.pos[instance] = vpass + (inst.pos[instance] - vpass) * old / w
        elif old <= 0 < w:
            inst.pos[instance] = self._fresh_position(w)
        inst.weight[instance] = w

    def set_eligible(self, instance: int, eligible: bool) -> None:
        """Whether the balancer may send new requests to ``instance`` (booted, not removed)."""
        inst = self._inst.cols
        if eligible and not inst.elig[instance]:
            inst.pos[instance] = self._fresh_position(float(inst.weight[instance]))
        inst.elig[instance] = eligible

    def set_permanent_jobs(self, resource: int, jobs: float) -> None:
        """Antagonist streams that share ``resource`` like jobs that never finish."""
        self._res.cols.perm[resource] = jobs

    def set_capacity(self, resource: int, capacity_bytes_per_s: float) -> None:
        self._res.cols.cap[resource] = capacity_bytes_per_s

    @staticmethod
    def capacity_code(resource: int) -> int:
        """The ``change_instance`` value of a capacity change of ``resource`` in ``run``."""
        return -resource - 1

    def set_concurrency_limit(self, instance: int, limit: int | None) -> None:
        self._inst.cols.climit[instance] = NO_LIMIT if limit is None else limit
        self._admit_waiting()

    def set_queue_limit(self, instance: int, limit: int | None) -> None:
        """Refuse requests beyond ``limit`` in the instance (busy workers + waiting)."""
        self._inst.cols.qlimit[instance] = -1 if limit is None else limit

    def _admit_waiting(self) -> None:
        while kernel.admit_waiting(self._state(), self.now_s_) != kernel.OK:
            self._make_space()

    def close_kept_alive(self, instance: int) -> int:
        """Close ``instance``'s idle kept-alive connections and free the workers they held
        (waiting requests take them at the next limit change or departure); returns how many
        were closed."""
        return int(kernel.close_kept_alive(instance, self._state()))

    def drop_jobs(self, instance: int) -> int:
        """Abort every request ``instance`` has (in service or waiting) and close its kept-alive
        connections; returns how many requests were aborted."""
        return int(kernel.drop_instance(instance, self.now_s_, self._state()))

    def in_system(self) -> NDArray[np.int64]:
        """Requests holding a worker or waiting for one, per instance."""
        return self._inst.cols.active + self._accept.cols.n

    def busy_workers(self) -> NDArray[np.int64]:
        """Workers busy per instance: serving, waiting for php-fpm, or held by keep-alive."""
        return self._inst.cols.active + self._inst.cols.held

    def oldest_start_s(self) -> NDArray[np.float64]:
        """Per instance, the arrival time of its oldest request in service or waiting (probes
        left out); ``inf`` for an instance that holds none."""
        out = np.empty(self.n_instances)
        kernel.oldest_start(self._state(), out)
        return out

    def served(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Per instance since it was added: the capacity its jobs have received (work ×
        slowdown), finished or still in service, and the time it had at least one job in
        service, both up to now (what a NIC's byte counter and the balancer's current sessions
        show of it). Under processor sharing, served over busy is the rate its resource gave it
        while it served."""
        inst = self._inst.cols
        k = inst.serving
        left = self._res.cols.vtime[inst.res] - inst.vmark
        return inst.served + k * left, inst.busy + (k > 0) * self.now_s_

    def take_interval(self, records: Sequence[Records], quantiles: Sequence[float]) -> Interval:
        """What ``records`` (every ``run``'s since the last call, in order) and the instances'
        counters add up to since the last call, and what the instances hold at its end."""
        inst = self._inst.cols
        n = self.n_instances
        work, refused, warea, served0, busy0 = self._marks
        served, busy = self.served()
        self._marks = (inst.work.copy(), inst.rej.copy(), inst.warea.copy(), served, busy)
        probe_sum, probe_count = np.zeros(n), np.zeros(n)
        for r in records:
            k = r.probe_count.size
            probe_sum[:k] += r.probe_sum_s
            probe_count[:k] += r.probe_count
        return Interval(
            stats=interval_stats([r for r in records if len(r)], n, quantiles),
            work=inst.work - _padded(work, n),
            refused=inst.rej - _padded(refused, n),
            busy_worker_s=inst.warea - _padded(warea, n),
            served=served - _padded(served0, n),
            busy_s=busy - _padded(busy0, n),
            probe_sum_s=probe_sum,
            probe_count=probe_count,
            in_system=self.in_system(),
            oldest_start_s=self.oldest_start_s(),
        )

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
        arrival_page: NDArray[np.int64] | None = None,
    ) -> Records:
        """Advance to ``t_end_s``. Arrivals, probes and changes are sorted and lie in
        ``[now, t_end_s)``. A change with ``change_instance = i >= 0`` sets instance i's slowdown
        factor (work multiplier) to ``change_factor``; one with ``capacity_code(r)`` sets
        resource r's capacity (bytes/s) to it. ``arrival_page``: each arrival's PHP page (0, the
        default: a static file). Closed-loop users (``add_users``) send as they go."""
        n_max = (
            arrival_s.size
            + probe_s.size
            + int(self._res.cols.n.sum())
            + int(self._accept.cols.n.sum() + self._php.cols.n.sum())
            + 2 * self._users.sent.size
        )
        out = _output(n_max)
        probe_rt = np.zeros((2, self.n_instances))
        cursor = np.zeros(kernel.CURSOR_SIZE, dtype=np.int64)
        cursor[kernel.SENT], cursor[kernel.MAX_SENT] = self._sent, self._max_sent
        pages = np.zeros(arrival_s.size, dtype=np.int64) if arrival_page is None else arrival_page
        sched = kernel.Schedule(
            np.ascontiguousarray(arrival_s, dtype=np.float64),
            np.ascontiguousarray(size_bytes, dtype=np.float64),
            np.ascontiguousarray(pages, dtype=np.int64),
            np.ascontiguousarray(probe_s, dtype=np.float64),
            np.ascontiguousarray(probe_instance, dtype=np.int64),
            np.ascontiguousarray(probe_bytes, dtype=np.float64),
            np.ascontiguousarray(change_s, dtype=np.float64),
            np.ascontiguousarray(change_instance, dtype=np.int64),
            np.ascontiguousarray(change_factor, dtype=np.float64),
        )
        algo = _ALGO[self.algorithm]
        seg = _segment(self.n_resources, self.n_instances)
        # the open loop over servers that are not apache runs a version compiled without
        # workers' pools, keep-alive, overhead and users (see ``kernel.run_segment``)
        ext = self._users.sent.size or self._inst.cols.apache.any() or self._res.cols.ovh.any()
        extended = 1 if ext else None
        while True:
            status = kernel.run_segment(
                float(t_end_s), algo, extended, self.keepalive, sched, cursor, self._state(), seg,
                out, probe_rt,
            )  # fmt: skip
            self._sent = int(cursor[kernel.SENT])
            if status == kernel.OK:
                break
            if status == kernel.NEED_SPACE:
                self._make_space()
            elif status == kernel.NEED_DRAWS:
                self._more_draws(int(cursor[kernel.NEEDY]))
            else:  # NEED_OUT
                out = kernel.Output._make(np.concatenate([a, np.empty_like(a)]) for a in out)
        self.now_s_ = float(t_end_s)
        n = int(cursor[kernel.WRITTEN])
        return Records(
            out.inst[:n], out.start[:n], out.rt[:n], out.size[:n], probe_rt[0], probe_rt[1]
        )


def _output(n: int) -> kernel.Output:
    return kernel.Output(np.empty(n, dtype=np.int64), np.empty(n), np.empty(n), np.empty(n))


def _heap(n: int) -> kernel.IndexedHeap:
    return kernel.IndexedHeap(
        np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n), np.empty(n)
    )


def _segment(n_resources: int, n_instances: int) -> kernel.Segment:
    """What ``kernel.run_segment`` derives from the state as each call starts."""
    return kernel.Segment(
        np.empty(n_resources), np.empty(n_instances), _heap(n_resources), _heap(n_instances)
    )


@dataclass(frozen=True)
class IntervalStats:
    """What one interval's records add up to, per instance: completed requests, the sum of
    their response times, and the response-time quantiles asked for (one row per quantile, NaN
    where none completed); and the requests no server was eligible for."""

    requests: NDArray[np.int64]
    rt_sum_s: NDArray[np.float64]
    rt_quantiles_s: NDArray[np.float64]
    unrouted: int


@dataclass(frozen=True)
class Interval:
    """What one interval added up to per instance (``EventCore.take_interval``)."""

    stats: IntervalStats
    work: NDArray[np.float64]
    """Capacity the jobs completed used (work × slowdown)."""
    refused: NDArray[np.int64]
    busy_worker_s: NDArray[np.float64]
    """∫ busy workers dt (apache instances; 0 elsewhere)."""
    served: NDArray[np.float64]
    """Capacity its jobs received, finished or still in service (``EventCore.served``),"""
    busy_s: NDArray[np.float64]
    """and the time it had at least one job in service."""
    probe_sum_s: NDArray[np.float64]
    """The times of the probes completed, added up, and how many."""
    probe_count: NDArray[np.float64]
    in_system: NDArray[np.int64]
    """At the interval's end: requests holding a worker or waiting for one,"""
    oldest_start_s: NDArray[np.float64]
    """and when the oldest of them arrived (``inf``: none)."""


def _padded(a: NDArray[T], n: int) -> NDArray[T]:
    """``a`` with 0 for the instances added since (n in all)."""
    return np.pad(a, (0, n - a.size))


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
    arrays: P,
) -> tuple[NDArray[np.int64], P, int]:
    """Copy each slab's live entries to the front of fresh, larger arrays (slabs keep their
    capacity; live entries start at the slab's offset). Returns new offsets, the arrays (a
    named tuple of the same kind), used."""
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
    return new_off, type(arrays)._make(new), used

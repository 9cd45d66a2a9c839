"""``EventCore``: the state of a simulated fleet (resources, instances, jobs) and the one method
that moves it forward in time. The theory tests, the bench and ``SimEnvironment`` all drive it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
MAX_PAGES = kernel.MAX_PAGES
"""PHP pages the event core tells apart."""
_EMPTY_F = np.empty(0, dtype=np.float64)
_EMPTY_I = np.empty(0, dtype=np.int64)
_POOL0 = 1024
_NO_USERS = np.empty(0, dtype=np.int64)

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
    closed-loop users come with ``add_users``. The state is a set of flat arrays (see
    ``quell.sim.kernel``); those with a trailing underscore may be read.
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
        self.r_ovh_ = _EMPTY_F.copy()
        """Overhead per active job: the per-job rate is divided by 1 + this × jobs."""
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
        self.i_plimit_ = _EMPTY_I.copy()
        """php-fpm children (PHP pages served at once) per apache instance."""
        self.i_pact_ = _EMPTY_I.copy()
        self.i_pwait_ = _EMPTY_I.copy()
        """PHP requests with a child, and waiting for one (holding their worker)."""
        self.i_held_ = _EMPTY_I.copy()
        """Workers held by idle kept-alive connections (apache's worker MPM)."""
        self.i_warea_ = _EMPTY_F.copy()
        """∫ (workers busy: serving, waiting for php-fpm, held by keep-alive) dt per instance."""
        self.i_kat_ = _EMPTY_F.copy()
        self.i_hold_ = np.empty(0, dtype=np.bool_)
        self.i_apache_ = np.empty(0, dtype=np.bool_)
        self.i_rwork_ = _EMPTY_F.copy()
        self.i_bwork_ = _EMPTY_F.copy()
        self.i_cwork_ = _EMPTY_F.copy()
        """Work of a request on the instance: fixed + per byte × size (+ a new connection's,
        + its PHP page's on an apache instance)."""
        self._q_off = _EMPTY_I.copy()
        self._q_capn = _EMPTY_I.copy()
        self._qhead = _EMPTY_I.copy()
        self._pq_off = _EMPTY_I.copy()
        self._pq_capn = _EMPTY_I.copy()
        self._pqhead = _EMPTY_I.copy()
        self._qpool: tuple[NDArray[Any], ...] = (
            np.empty(_POOL0),
            np.empty(_POOL0),
            np.empty(_POOL0, dtype=np.int64),
        )
        self._iscal = np.zeros(2, dtype=np.int64)
        self.scalars_ = _f(0.0, 0.0)
        self.page_work_ = _f(0.0)
        """Work of each PHP page (index 1 on; 0 is a static file's: none)."""
        # closed-loop users: heap, position, key (next event time), tie-break, state, the
        # instance of a kept-alive connection, when it closes, when the user sends after it,
        # how many of its drawn requests it has sent
        self._users: tuple[NDArray[Any], ...] = (
            _NO_USERS, _NO_USERS, _EMPTY_F, _EMPTY_F, _NO_USERS, _NO_USERS, _EMPTY_F, _EMPTY_F,
            _NO_USERS,
        )  # fmt: skip
        self.keepalive = False
        self._draw: RequestDraws | None = None
        self._draws: tuple[NDArray[Any], ...] = (
            np.empty((0, 1)),
            np.empty((0, 1), dtype=np.int64),
            np.empty((0, 1)),
        )
        """Each user's requests drawn ahead (a row per user): sizes, pages, thinks."""
        self._ucursor = np.zeros(5, dtype=np.int64)
        """[requests the users sent, the user whose draws ran out, -, -, most requests]"""

    # -- the kernel's argument groups --------------------------------------------------------
    def _res(self) -> tuple[Any, ...]:
        return (
            self.r_cap_, self.r_jobcap_, self.r_perm_, self.r_n_, self.r_vtime_, self.r_tlast_,
            self.r_busy_, self._r_off, self._r_capn, self.r_ovh_,
        )  # fmt: skip

    def _inst(self) -> tuple[Any, ...]:
        return (
            self.i_res_, self.i_factor_, self.i_climit_, self.i_qlimit_, self.i_weight_,
            self.i_elig_, self.i_active_, self.i_wait_, self.i_pos_, self.i_seq_, self.i_area_,
            self.i_tlast_, self.i_work_, self.i_rej_, self.i_plimit_, self.i_pact_,
            self.i_pwait_, self.i_held_, self.i_warea_, self.i_kat_, self.i_hold_,
            self.i_apache_, self.i_rwork_, self.i_bwork_, self.i_cwork_,
        )  # fmt: skip

    def _queues(self) -> tuple[Any, ...]:
        return (
            self._q_off, self._q_capn, self._qhead, *self._qpool, self._pq_off, self._pq_capn,
            self._pqhead,
        )  # fmt: skip

    def _make_space(self) -> None:
        """Compact both pools and leave at least as much free space as is in use."""
        self._r_off, self._jobs, self._iscal[0] = _compact(
            self._r_off, self._r_capn, np.zeros_like(self.r_n_), self.r_n_, self._jobs
        )
        n = self.n_instances
        off, self._qpool, self._iscal[1] = _compact(
            np.concatenate([self._q_off, self._pq_off]),
            np.concatenate([self._q_capn, self._pq_capn]),
            np.concatenate([self._qhead, self._pqhead]),
            np.concatenate([self.i_wait_, self.i_pwait_]),
            self._qpool,
        )
        self._q_off, self._pq_off = off[:n], off[n:]
        self._qhead[:] = 0
        self._pqhead[:] = 0

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
        getting at most ``job_cap_bytes_per_s`` (for an apache instance's CPU: work in
        CPU-seconds, capacity in cores, one core per job). Returns its index."""
        self.r_cap_ = np.append(self.r_cap_, float(capacity_bytes_per_s))
        self.r_jobcap_ = np.append(self.r_jobcap_, float(job_cap_bytes_per_s))
        self.r_perm_ = np.append(self.r_perm_, 0.0)
        self.r_n_ = np.append(self.r_n_, 0)
        self.r_vtime_ = np.append(self.r_vtime_, 0.0)
        self.r_tlast_ = np.append(self.r_tlast_, self.now_s_)
        self.r_busy_ = np.append(self.r_busy_, 0.0)
        self.r_ovh_ = np.append(self.r_ovh_, 0.0)
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
        if self.n_instances >= kernel.MAX_INSTANCES:
            raise ValueError(f"at most {kernel.MAX_INSTANCES} instances")
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
        self.i_plimit_ = np.append(self.i_plimit_, NO_LIMIT)
        self.i_pact_ = np.append(self.i_pact_, 0)
        self.i_pwait_ = np.append(self.i_pwait_, 0)
        self.i_held_ = np.append(self.i_held_, 0)
        self.i_warea_ = np.append(self.i_warea_, 0.0)
        self.i_kat_ = np.append(self.i_kat_, 0.0)
        self.i_hold_ = np.append(self.i_hold_, False)
        self.i_apache_ = np.append(self.i_apache_, False)
        self.i_rwork_ = np.append(self.i_rwork_, 0.0)
        self.i_bwork_ = np.append(self.i_bwork_, 1.0)
        self.i_cwork_ = np.append(self.i_cwork_, 0.0)
        for name in ("_q_off", "_q_capn", "_qhead", "_pq_off", "_pq_capn", "_pqhead"):
            setattr(self, name, np.append(getattr(self, name), 0))
        return self.n_instances - 1

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
        self.i_apache_[instance] = True
        self.i_rwork_[instance] = request_work
        self.i_bwork_[instance] = work_per_byte
        self.i_cwork_[instance] = connection_work
        self.i_hold_[instance] = idle_holds_worker
        self.set_keepalive_timeout(instance, keepalive_timeout_s)
        self.set_php_children(instance, php_children)

    def set_keepalive_timeout(self, instance: int, seconds: float) -> None:
        """From now on, connections answered by ``instance`` stay open this long idle."""
        self.i_kat_[instance] = seconds

    def set_php_children(self, instance: int, children: int) -> None:
        self.i_plimit_[instance] = children
        self._admit_waiting()

    def set_overhead(self, resource: int, per_job: float) -> None:
        """Divide the per-job rate of ``resource`` by 1 + ``per_job`` × its jobs."""
        self.r_ovh_[resource] = per_job

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
        heap = np.arange(n, dtype=np.int64)
        k1 = np.asarray(first_s, dtype=np.float64).copy()
        pos = np.empty(n, dtype=np.int64)
        kernel._ih_build(heap, pos, k1, np.arange(n, dtype=np.float64), n)
        self._users = (
            heap, pos, k1, np.arange(n, dtype=np.float64), np.zeros(n, dtype=np.int64),
            np.full(n, -1, dtype=np.int64), np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64),
        )  # fmt: skip
        self.keepalive = keepalive
        self._draw = draw
        rows = [draw(u) for u in range(n)]
        self._draws = tuple(
            np.ascontiguousarray(np.stack([row[k] for row in rows]).reshape(n, -1))
            for k in range(3)
        )
        self._ucursor[:] = (0, 0, 0, 0, max_requests)

    @property
    def requests_sent(self) -> int:
        """Requests the closed-loop users have sent."""
        return int(self._ucursor[0])

    def _more_draws(self, user: int) -> None:
        """User ``user``'s next requests (it has sent, and had answered, all it had)."""
        assert self._draw is not None
        for have, more in zip(self._draws, self._draw(user), strict=True):
            have[user] = more
        self._users[8][user] = 0

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
        self._admit_waiting()

    def set_queue_limit(self, instance: int, limit: int | None) -> None:
        """Refuse requests beyond ``limit`` in the instance (busy workers + waiting)."""
        self.i_qlimit_[instance] = -1 if limit is None else limit

    def _admit_waiting(self) -> None:
        while (
            kernel.admit_waiting(
                self._res(),
                self._jobs,
                self._inst(),
                self._queues(),
                self.page_work_,
                self._iscal,
                self.now_s_,
            )
            != kernel.OK
        ):
            self._make_space()

    def close_kept_alive(self, instance: int) -> int:
        """Close ``instance``'s idle kept-alive connections and free the workers they held
        (waiting requests take them at the next limit change or departure); returns how many
        were closed."""
        return int(kernel.close_kept_alive(instance, self._inst(), self._users))

    def drop_jobs(self, instance: int) -> int:
        """Abort every request ``instance`` has (in service or waiting) and close its kept-alive
        connections; returns how many requests were aborted."""
        dropped = kernel.drop_instance(
            instance,
            self.now_s_,
            self._res(),
            self._jobs,
            self._inst(),
            self._queues(),
            self._users,
            self._draws,
        )
        return int(dropped)

    def in_system(self) -> NDArray[np.int64]:
        """Requests holding a worker or waiting for one, per instance."""
        return self.i_active_ + self.i_wait_

    def busy_workers(self) -> NDArray[np.int64]:
        """Workers busy per instance: serving, waiting for php-fpm, or held by keep-alive."""
        return self.i_active_ + self.i_held_

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
            self.i_pwait_,
            self._pq_off,
            self._pqhead,
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
            + int(self.r_n_.sum())
            + int(self.i_wait_.sum() + self.i_pwait_.sum())
            + 2 * self._users[0].size
        )
        out: tuple[NDArray[Any], ...] = (
            np.empty(n_max, dtype=np.int64),
            np.empty(n_max),
            np.empty(n_max),
            np.empty(n_max),
        )
        probe_rt = np.zeros((2, self.n_instances))
        cursor = np.zeros(9, dtype=np.int64)
        cursor[4:] = self._ucursor
        pages = np.zeros(arrival_s.size, dtype=np.int64) if arrival_page is None else arrival_page
        args = (
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
        # the open loop over servers that are not apache runs a version compiled without
        # workers' pools, keep-alive and users (see ``kernel.run_segment``)
        extended = 1 if self._users[0].size or self.i_apache_.any() else None
        while True:
            status = kernel.run_segment(
                float(t_end_s),
                algo,
                extended,
                self.keepalive,
                *args,
                cursor,
                self._res(),
                self._jobs,
                self._inst(),
                self._queues(),
                self._users,
                self._draws,
                self.page_work_,
                self.scalars_,
                self._iscal,
                out,
                probe_rt,
            )
            self._ucursor[:] = cursor[4:]
            if status == kernel.OK:
                break
            if status == kernel.NEED_SPACE:
                self._make_space()
            elif status == kernel.NEED_DRAWS:
                self._more_draws(int(cursor[5]))
            else:  # NEED_OUT
                out = tuple(np.concatenate([a, np.empty_like(a)]) for a in out)
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

"""The consolidation study's simulator (Kanemasa et al., docs/papers/consolidation.md): two closed
n-tier systems whose database tiers share one core under per-system CPU caps.

Each system is a closed loop: ``users`` users think (exponential, mean ``think_time_seconds``;
for Sys_Inc at an index of dispersion I > 1 the think rate is modulated by a two-state Markov
chain shared by all its users, fitted with ``quell.workload.arrival.Mmpp2.fit``), then send a
request. The request takes a web worker (FIFO queue), then an application worker (FIFO, or
light transactions first with cross-tier priority: non-preemptive), each application worker
holding one database connection, and runs one database job on the shared core: light or heavy
(``heavy_share``), of a fixed CPU cost. It releases both workers when the job is done; the user
thinks again. The front tiers spend no time of their own: they are on other cores, below
saturation (the lab shows it); they matter through their token pools.

The shared core runs one group per system (its database tier), the group's jobs in processor
sharing among themselves (a database's backends in one cgroup), the groups under one of two
schedulers:

* ``fluid``: capped processor sharing. Every runnable group gets min(cap, fair share), the
  rest goes to the groups below their caps (water-filling); work-conserving otherwise. A cap
  is a rate: with 50/50 caps each group gets its 50 % whenever it has work, whatever the other
  does, so this scheduler predicts no interference at 50/50.
* ``quantum``: one group at a time, in quanta of ``quantum_seconds``, with a per-period quota
  (cap of a ``period_seconds`` CFS period): a group that used its quota in the current period
  is throttled until the next period starts. The next group is picked at each quantum's end
  (or when the running group runs out of work or quota), non-preemptively, by ``pick``:
  ``"rr"`` round robin among runnable, unthrottled groups (it tends to ``fluid`` as the quantum
  shrinks); ``"least_used"`` the group with the lower recent CPU use (an exponentially
  weighted mean over ``memory_seconds`` of its use per period; ties round robin), the seed's
  "higher priority to the VM with averagely lower CPU utilization" (ESXi's credits, CFS's
  vruntime): the one that produces the non-monotonic curves.

Randomness: one ``numpy.random.Generator`` per user (think times and transaction classes) and
one per system (its burst chain), all spawned from ``point.seed``, so two schedulers see the
same users (common random numbers) and the same seed gives the same result.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from quell.errors import InputError, Problem
from quell.studies.consolidation.point import (
    SYSTEMS,
    ConsolidationMeasurement,
    ConsolidationPoint,
    SystemMeasurement,
)
from quell.workload.arrival import Mmpp2

Scheduler = Literal["fluid", "quantum"]
Pick = Literal["rr", "least_used"]

SAMPLE_SECONDS = 0.1
"""The CPU series' step, as the lab samples cpuacct."""

BURST_PEAK_RATIO = 10.0
"""Think rate in a burst over think rate between bursts (``Mmpp2.fit``'s default)."""
BURST_FRACTION = 0.1
"""Share of time in bursts (``Mmpp2.fit``'s default)."""


@dataclass(frozen=True)
class Tiers:
    """One system's token pools: web workers and application workers (each holding one
    database connection)."""

    web_workers: int
    app_workers: int


RESOURCES: dict[str, Tiers] = {
    "liberal": Tiers(web_workers=85, app_workers=24),
    "conservative": Tiers(web_workers=30, app_workers=4),
}
"""The seed's Table II divided by 4, the simulator's scale of users (``USER_SCALE``): Apache
MaxClients 340 / 120 → 85 / 30 web workers; the database connections 96 / 16 → 24 / 4
application workers (Tomcat's threads beyond its connection pool wait for a connection: that
queue is the application tier's)."""

USER_SCALE = 0.25
"""The simulator's users per seed user (the seed's 2,400 users are 600 here)."""


@dataclass(frozen=True)
class Costs:
    """Database CPU per transaction, in seconds of the shared core."""

    light_seconds: float = 0.001
    heavy_seconds: float = 0.05


class _Draws:
    """A user's own random stream, drawn in blocks (one Generator call per 256 values)."""

    __slots__ = ("_exp", "_gen", "_i", "_j", "_uni")

    def __init__(self, gen: np.random.Generator) -> None:
        self._gen = gen
        self._exp = gen.standard_exponential(256)
        self._uni = gen.random(256)
        self._i = 0
        self._j = 0

    def exp(self) -> float:
        if self._i == 256:
            self._exp = self._gen.standard_exponential(256)
            self._i = 0
        v = float(self._exp[self._i])
        self._i += 1
        return v

    def uni(self) -> float:
        if self._j == 256:
            self._uni = self._gen.random(256)
            self._j = 0
        v = float(self._uni[self._j])
        self._j += 1
        return v


class _Request:
    __slots__ = ("arrived", "heavy", "system", "user")

    def __init__(self, system: int, user: int, arrived: float, heavy: bool) -> None:
        self.system = system
        self.user = user
        self.arrived = arrived
        self.heavy = heavy


class _System:
    """One system's users, token pools, queues and its database group on the shared core."""

    def __init__(
        self,
        index: int,
        users: int,
        cap: float,
        tiers: Tiers,
        point: ConsolidationPoint,
        costs: Costs,
        draws: list[_Draws],
        chain: np.random.Generator,
    ) -> None:
        self.index = index
        self.users = users
        self.cap = cap
        self.web_free = self.web_total = tiers.web_workers
        self.app_free = self.app_total = tiers.app_workers
        self.web_queue: deque[_Request] = deque()
        self.app_light: deque[_Request] = deque()
        self.app_heavy: deque[_Request] = deque()  # the only app queue without CTP
        self.ctp = point.ctp
        self.heavy_share = point.heavy_share
        self.costs = costs
        self.draws = draws
        self.chain = chain
        self.generation = [0] * users
        self.thinking: dict[int, float] = {}  # user → think end, for resampling in a burst
        # Burst chain (I > 1): think mean per state.
        # Bursts are Sys_Inc's only; Sys_Const keeps I = 1, as in the seed's Fig. 7 and 8.
        self.bursty = index == 1 and point.dispersion_index > 1.0 and users > 0
        self.high = False
        self.next_switch = math.inf
        self.think_mean = point.think_time_seconds
        if self.bursty:
            m = Mmpp2.fit(
                users / point.think_time_seconds,
                point.dispersion_index,
                peak_ratio=BURST_PEAK_RATIO,
                burst_fraction=BURST_FRACTION,
            )
            self.mmpp = m
            self.high = bool(chain.random() < m.burst_fraction)
            self.think_mean = users / (m.rate_high if self.high else m.rate_low)
            self.next_switch = float(
                chain.exponential(1.0 / (m.leave_high if self.high else m.leave_low))
            )
        # Database group: processor sharing among its jobs by virtual (attained) time.
        self.v = 0.0
        self.jobs: list[tuple[float, int, _Request]] = []
        self.rate = 0.0
        self.binding = False  # fluid: the cap holds the group below its fair share
        # Quota and use.
        self.quota_left = math.inf
        self.throttled = False
        self.throttled_periods = 0
        self.counted_period = -1
        self.used_period = 0.0
        self.used_avg = 0.0
        self.used_sample = 0.0
        self.used_window = 0.0
        self.cpu_series: list[float] = []
        # Records in the window.
        self.rts: list[float] = []
        self.heavy_flags: list[bool] = []

    def think(self, user: int, now: float) -> float:
        return now + self.draws[user].exp() * self.think_mean

    def new_request(self, user: int, now: float) -> _Request:
        heavy = self.draws[user].uni() < self.heavy_share
        return _Request(self.index, user, now, heavy)


def _waterfill(systems: list[_System]) -> None:
    """Fluid rates: min(cap, fair share) to every group with jobs, the rest shared again."""
    runnable = sorted((s for s in systems if s.jobs), key=lambda s: s.cap)
    for s in systems:
        s.rate = 0.0
    left, k = 1.0, len(runnable)
    for s in runnable:
        share = left / k
        s.rate = min(s.cap, share)
        s.binding = s.cap < share
        left -= s.rate
        k -= 1


def _check(point: ConsolidationPoint, quantum_seconds: float, period_seconds: float) -> None:
    problems = []
    if not 0.0 < quantum_seconds <= period_seconds:
        problems.append(Problem("quantum_seconds", "must be > 0 and at most the period"))
    if not 0.001 <= period_seconds <= 1.0:
        problems.append(Problem("period_seconds", "must be within 0.001 to 1 s (as CFS's)"))
    if point.measure_seconds < SAMPLE_SECONDS:
        problems.append(Problem("measure_seconds", f"must be at least {SAMPLE_SECONDS} s"))
    if point.competitor_cpu_pct > 0:
        problems.append(Problem("competitor_cpu_pct", "the simulator models no third process"))
    if problems:
        raise InputError("consolidation simulator", problems)


def simulate_point(
    point: ConsolidationPoint,
    *,
    scheduler: Scheduler,
    quantum_seconds: float = 0.005,
    period_seconds: float = 0.1,
    pick: Pick = "least_used",
    memory_seconds: float = 10.0,
    preempt: bool = True,
    costs: Costs | None = None,
    tiers: Tiers | None = None,
) -> ConsolidationMeasurement:
    """Simulate one point for ``ramp_seconds + measure_seconds`` and measure the window after
    the ramp (module docstring). ``tiers`` overrides ``RESOURCES[point.resources]``."""
    _check(point, quantum_seconds, period_seconds)
    costs = costs or Costs()
    loads = (point.const, point.inc)
    root = np.random.SeedSequence(point.seed)
    sys_seeds = root.spawn(len(SYSTEMS))
    systems: list[_System] = []
    for i, load in enumerate(loads):
        user_seeds, chain_seed = sys_seeds[i].spawn(2)
        draws = [_Draws(np.random.default_rng(s)) for s in user_seeds.spawn(load.users)]
        pools = tiers or RESOURCES[load.resources or point.resources]
        systems.append(
            _System(
                i,
                load.users,
                load.cap_pct / 100.0,
                pools,
                point,
                costs,
                draws,
                np.random.default_rng(chain_seed),
            )
        )
    ramp = point.ramp_seconds
    end = ramp + point.measure_seconds
    n_samples = round(point.measure_seconds / SAMPLE_SECONDS)
    quantum = scheduler == "quantum"
    decay = math.exp(-period_seconds / memory_seconds)

    # Think-end heap: (time, seq, system, user, generation).
    seq = 0
    thinks: list[tuple[float, int, int, int, int]] = []
    for s in systems:
        for u in range(s.users):
            t = s.think(u, 0.0)
            s.thinking[u] = t
            thinks.append((t, seq, s.index, u, 0))
            seq += 1
    heapq.heapify(thinks)

    now = 0.0
    next_period = period_seconds
    period_index = 0
    # CPU samples: boundaries at ramp + k * SAMPLE_SECONDS; the one at k = 0 starts the first.
    sample_k = 0 if ramp > 0.0 else 1
    next_sample = ramp + sample_k * SAMPLE_SECONDS
    for s in systems:
        s.quota_left = s.cap * period_seconds if quantum and s.cap < 1.0 else math.inf
    current: _System | None = None  # quantum: the group on the core
    quantum_end = math.inf
    last_rr = len(systems) - 1

    def in_window() -> bool:
        return ramp <= now < end

    def pick_next() -> None:
        nonlocal current, quantum_end, last_rr
        candidates = [s for s in systems if s.jobs and not s.throttled]
        for s in systems:
            s.rate = 0.0
        if not candidates:
            current, quantum_end = None, math.inf
            return
        order = sorted(candidates, key=lambda s: (s.index - last_rr - 1) % len(systems))
        chosen = min(order, key=lambda s: s.used_avg) if pick == "least_used" else order[0]
        current, quantum_end, last_rr = chosen, now + quantum_seconds, chosen.index
        chosen.rate = 1.0

    def fluid_rates() -> None:
        _waterfill(systems)
        if in_window():
            for s in systems:
                if s.jobs and s.binding and s.counted_period != period_index:
                    s.counted_period = period_index
                    s.throttled_periods += 1

    def start_job(s: _System, req: _Request) -> None:
        nonlocal seq
        size = costs.heavy_seconds if req.heavy else costs.light_seconds
        woke = not s.jobs
        heapq.heappush(s.jobs, (s.v + size, seq, req))
        seq += 1
        if quantum:
            if current is None:
                pick_next()
            elif (
                preempt
                and woke
                and pick == "least_used"
                and current is not s
                and not s.throttled
                and s.used_avg < current.used_avg
            ):
                pick_next()  # wake-up preemption: the less-used group takes the core now
        else:
            fluid_rates()

    def to_app(s: _System, req: _Request) -> None:
        if s.app_free > 0:
            s.app_free -= 1
            start_job(s, req)
        elif s.ctp and not req.heavy:
            s.app_light.append(req)
        else:
            s.app_heavy.append(req)

    def arrive(s: _System, user: int) -> None:
        req = s.new_request(user, now)
        if s.web_free > 0:
            s.web_free -= 1
            to_app(s, req)
        else:
            s.web_queue.append(req)

    def finish(s: _System, req: _Request) -> None:
        nonlocal seq
        if in_window():
            s.rts.append(now - req.arrived)
            s.heavy_flags.append(req.heavy)
        # The application worker goes to the next in its queue (light first with CTP).
        nxt = (
            s.app_light.popleft()
            if s.app_light
            else (s.app_heavy.popleft() if s.app_heavy else None)
        )
        if nxt is not None:
            start_job(s, nxt)
        else:
            s.app_free += 1
        if s.web_queue:
            to_app(s, s.web_queue.popleft())
        else:
            s.web_free += 1
        t = s.think(req.user, now)
        s.thinking[req.user] = t
        heapq.heappush(thinks, (t, seq, s.index, req.user, s.generation[req.user]))
        seq += 1

    def switch(s: _System) -> None:
        nonlocal seq
        m = s.mmpp
        s.high = not s.high
        s.think_mean = s.users / (m.rate_high if s.high else m.rate_low)
        s.next_switch = now + float(
            s.chain.exponential(1.0 / (m.leave_high if s.high else m.leave_low))
        )
        # Exponential thinks are memoryless: every thinking user draws its rest anew.
        for u in list(s.thinking):
            s.generation[u] += 1
            t = s.think(u, now)
            s.thinking[u] = t
            heapq.heappush(thinks, (t, seq, s.index, u, s.generation[u]))
            seq += 1

    while True:
        # The next event of each kind.
        t_think = thinks[0][0] if thinks else math.inf
        t_done, done_sys = math.inf, None
        for s in systems:
            if s.jobs and s.rate > 0.0:
                t = now + (s.jobs[0][0] - s.v) * len(s.jobs) / s.rate
                if t < t_done:
                    t_done, done_sys = t, s
        t_sched = math.inf
        if quantum and current is not None:
            t_sched = min(quantum_end, now + current.quota_left)
        t_switch = min(s.next_switch for s in systems)
        t = min(t_think, t_done, t_sched, t_switch, next_period, next_sample, end)
        # Advance every running group to t.
        dt = t - now
        if dt > 0.0:
            for s in systems:
                if s.rate > 0.0 and s.jobs:
                    s.v += dt * s.rate / len(s.jobs)
                    work = dt * s.rate
                    s.used_period += work
                    s.used_sample += work
                    if s.quota_left != math.inf:
                        s.quota_left -= work
        now = t
        if now >= end:
            for s in systems:
                if len(s.cpu_series) < n_samples:
                    s.cpu_series.append(100.0 * s.used_sample / SAMPLE_SECONDS)
            break
        if t == t_done and done_sys is not None:
            s = done_sys
            tag, _, req = heapq.heappop(s.jobs)
            s.v = max(s.v, tag)
            if not s.jobs:
                s.v = 0.0
            finish(s, req)
            if quantum:
                if current is s and not s.jobs:
                    pick_next()
            else:
                fluid_rates()
        elif quantum and t == t_sched and current is not None:
            s = current
            if s.quota_left <= 1e-12:
                s.throttled = True
                if in_window() and s.counted_period != period_index:
                    s.counted_period = period_index
                    s.throttled_periods += 1
            pick_next()
        elif t == next_sample:
            for s in systems:
                if sample_k > 0:
                    s.cpu_series.append(100.0 * s.used_sample / SAMPLE_SECONDS)
                s.used_sample = 0.0
            sample_k += 1
            next_sample = ramp + sample_k * SAMPLE_SECONDS
        elif t == next_period:
            period_index += 1
            next_period = (period_index + 1) * period_seconds
            for s in systems:
                s.used_avg = decay * s.used_avg + (1.0 - decay) * s.used_period / period_seconds
                s.used_period = 0.0
                s.throttled = False
                if quantum and s.cap < 1.0:
                    s.quota_left = s.cap * period_seconds
            if quantum and current is None:
                pick_next()
            elif not quantum:
                fluid_rates()
        elif t == t_switch:
            switch(next(s for s in systems if s.next_switch == t_switch))
        else:
            _, _, si, u, gen = heapq.heappop(thinks)
            s = systems[si]
            if gen == s.generation[u]:
                del s.thinking[u]
                arrive(s, u)

    measured = {
        name: _measure(s, point.measure_seconds) for name, s in zip(SYSTEMS, systems, strict=True)
    }
    notes = [
        f"scheduler={scheduler}",
        f"period_seconds={period_seconds:g}",
        f"light_cpu_seconds={costs.light_seconds:g}",
        f"heavy_cpu_seconds={costs.heavy_seconds:g}",
        *(
            f"{name}: web_workers={s.web_total} app_workers={s.app_total}"
            for name, s in zip(SYSTEMS, systems, strict=True)
        ),
    ]
    if quantum:
        notes += [f"quantum_seconds={quantum_seconds:g}", f"pick={pick}"]
        if pick == "least_used":
            notes.append(f"memory_seconds={memory_seconds:g}")
    return ConsolidationMeasurement(env="sim", point=point, systems=measured, notes=notes)


def _measure(s: _System, window_seconds: float) -> SystemMeasurement:
    rts = np.asarray(s.rts, dtype=np.float64)
    heavy = np.asarray(s.heavy_flags, dtype=bool)
    n = int(rts.size)
    series = s.cpu_series
    return SystemMeasurement(
        requests_total=n,
        throughput_per_second=n / window_seconds,
        mean_rt_seconds=float(rts.mean()) if n else math.nan,
        p95_rt_seconds=float(np.percentile(rts, 95)) if n else math.nan,
        light_mean_rt_seconds=float(rts[~heavy].mean()) if (~heavy).any() else None,
        heavy_mean_rt_seconds=float(rts[heavy].mean()) if heavy.any() else None,
        db_cpu_pct=float(np.mean(series)) if series else 0.0,
        throttled_periods_total=s.throttled_periods,
        cpu_pct_100ms=[round(v, 3) for v in series],
    )

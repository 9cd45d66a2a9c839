"""A constructed per-request workload for the attribution tests: one seeded schedule of two
request classes, served uncontended or beside ``workers`` CPU antagonists on the same core.

Each request has a CPU demand and an I/O wait of its own (the schedule's). Contention adds
run-queue wait (a wait behind an antagonist at each wake-up and each expired timeslice, longer
with more workers) and inflates the CPU time (cache pressure, 4 % per worker); the I/O wait is
the same in both runs up to a small jitter. The true excess of a request is therefore its extra
CPU time plus its extra run-queue wait — not its run-queue wait alone.
"""

from __future__ import annotations

import numpy as np

CLASSES = ("/static", "/php")


def schedule_records(
    seed: int, n: int, workers: int, *, run_seed: int = 0, cpu_scale: float = 1.0
) -> dict[str, np.ndarray]:
    """Records of ``n`` requests of schedule ``seed`` with ``workers`` antagonists; ``run_seed``
    draws what differs between two runs of one schedule; ``cpu_scale`` makes every request
    heavier (customer-caused latency)."""
    sched = np.random.default_rng(seed)
    php = sched.random(n) < 0.3
    demand_s = np.where(php, 2e-3, 0.3e-3) * sched.lognormal(0.0, 0.3, n) * cpu_scale
    io_s = sched.exponential(np.where(php, 1e-3, 0.4e-3))
    wakeups = 1 + sched.poisson(np.where(php, 2.0, 1.0))
    gaps_s = sched.exponential(2e-3, n)
    run = np.random.default_rng(10_000 + 97 * run_seed + workers)
    cpu_s = demand_s * (1.0 + 0.04 * workers) * run.lognormal(0.0, 0.02, n)
    expired = run.poisson(workers * cpu_s / 3e-3)
    waits = wakeups * (workers > 0) + expired
    runq_s = run.exponential(20e-6, n) + run.gamma(np.maximum(waits, 1e-9), 0.6e-3 * workers)
    runq_s = np.where(waits > 0, runq_s, run.exponential(20e-6, n))
    blocked_s = io_s * run.lognormal(0.0, 0.02, n)
    wall_s = cpu_s + runq_s + blocked_s
    start_ns = np.cumsum(np.round(gaps_s * 1e9)).astype(np.int64)
    wall_ns = np.round(wall_s * 1e9).astype(np.int64)
    return {
        "request_id": np.arange(n, dtype=np.int64),
        "request_class": np.where(php, CLASSES[1], CLASSES[0]),
        "thread_id": np.full(n, 4242, dtype=np.int64),
        "start_ns": start_ns,
        "end_ns": start_ns + wall_ns,
        "wall_ns": wall_ns,
        "cpu_ns": np.round(cpu_s * 1e9).astype(np.int64),
        "runq_wait_ns": np.round(runq_s * 1e9).astype(np.int64),
        "timeslices": (wakeups + expired).astype(np.int64),
        "vol_cs": wakeups.astype(np.int64),
        "invol_cs": expired.astype(np.int64),
        "yields": wakeups.astype(np.int64),
    }

"""A small instrumented service for the attribution experiments: worker processes, each on one
thread, serving their share of a seeded request schedule, each request inside a ``quelltoken``
token (``quell.instrument.token``), its record appended to the per-thread log under
``$QUELL_TOKEN_LOG_DIR``.

A request of class ``/static`` or ``/php`` does CPU work (a fixed number of steps of a random
walk over an 8 MiB buffer, so its CPU time depends on the cache as well as the scheduler), waits
for "I/O" (a sleep), and does the second half of its work; between requests a worker thinks
(a sleep outside the token). Request ``i`` of the schedule is served by worker ``i % workers``,
and its class, work, I/O and think time depend on the schedule's seed and ``i`` alone: two runs
of one seed serve the same requests, so request ids pair across runs.

Run as ``python -m quell.studies.attribution.service``; bounded by its request count and a
deadline.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BUFFER_BYTES = 8 << 20
STATIC_STEPS = 1_500
PHP_STEPS = 7_000


@dataclass(frozen=True)
class Schedule:
    php: np.ndarray
    steps: np.ndarray
    io_s: np.ndarray
    think_s: np.ndarray


def schedule(seed: int, n: int, cpu_scale: float = 1.0, think_s: float = 0.002) -> Schedule:
    """The seeded schedule of ``n`` requests; ``cpu_scale`` makes every request's work heavier
    (customer-caused latency)."""
    rng = np.random.default_rng(seed)
    php = rng.random(n) < 0.3
    base = np.where(php, PHP_STEPS, STATIC_STEPS)
    steps = np.maximum(1, np.round(base * rng.lognormal(0.0, 0.3, n) * cpu_scale)).astype(int)
    io_s = rng.exponential(np.where(php, 1e-3, 0.3e-3))
    return Schedule(php, steps, io_s, rng.exponential(think_s, n))


def _work(buf: bytearray, steps: int, x: int) -> int:
    size = len(buf)
    acc = 0
    for _ in range(steps):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        acc += buf[x % size]
    return acc


def serve(sched: Schedule, workers: int, index: int, deadline_s: float) -> int:
    """Serve this worker's share; returns how many requests it served."""
    from quell.instrument.token import end, start

    buf = bytearray(os.urandom(BUFFER_BYTES))
    stop = time.monotonic() + deadline_s
    served = 0
    for i in range(index, len(sched.php), workers):
        if time.monotonic() > stop:
            break
        half = int(sched.steps[i]) // 2
        tok = start(i, "/php" if sched.php[i] else "/static")
        _work(buf, half, i)
        time.sleep(float(sched.io_s[i]))
        _work(buf, int(sched.steps[i]) - half, i + 1)
        end(tok)
        served += 1
        time.sleep(float(sched.think_s[i]))
    return served


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="quell.studies.attribution.service")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--cpu-scale", type=float, default=1.0)
    p.add_argument("--deadline-s", type=float, default=60.0)
    p.add_argument("--cgroup-procs", type=Path, nargs="*", default=[])
    args = p.parse_args(argv)
    for procs in args.cgroup_procs:
        procs.write_text(str(os.getpid()))
    sched = schedule(args.seed, args.requests, args.cpu_scale)
    served = serve(sched, args.workers, args.index, args.deadline_s)
    print(served, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

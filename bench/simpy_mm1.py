"""SimPy 4 on M/M/1 (FCFS, λ = ρ, μ = 1): the peer of the simulator in ``bench_sim`` (timed in
process) and ``bench_startup`` (timed as a whole process).

``python bench/simpy_mm1.py [REQUESTS]`` (default 1,000,000) simulates that many requests at
ρ = 0.8 and prints their mean response time (theory: 1 / (μ - λ) = 5)."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import simpy


def mm1_simpy(n: int, rho: float = 0.8, seed: int = 1) -> tuple[float, float]:
    """Seconds SimPy takes to simulate n M/M/1 requests, and their mean response time."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rho, n)
    sizes = rng.exponential(1.0, n)
    env = simpy.Environment()
    server = simpy.Resource(env, capacity=1)
    total = [0.0]

    def request(k: int) -> Any:
        t = env.now
        with server.request() as req:
            yield req
            yield env.timeout(sizes[k])
        total[0] += env.now - t

    def source() -> Any:
        for k in range(n):
            yield env.timeout(gaps[k])
            env.process(request(k))

    env.process(source())
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, total[0] / n


if __name__ == "__main__":
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    _, mean_rt = mm1_simpy(requests)
    print(f"{requests} requests, mean response time {mean_rt:.3f} (theory 5)")

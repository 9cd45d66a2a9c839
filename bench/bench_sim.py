"""Simulator speed: simulated requests per wall second.

(a) M/M/1-PS at ρ = 0.8 with 1M requests on the compiled event core, against SimPy 4 on the same
M/M/1 model (λ = 0.8, μ = 1; FCFS, 100k requests) in the same run; goal ≥ 100× SimPy. Both are
timed ``REPEAT`` times, interleaved, and the medians are compared.
(b) 1,000 instances × 50 req/s × 600 s (30M requests) through ``SimEnvironment`` (schedule
built from the scenario, observations every second, no run store); goal ≥ 2M simulated req/s and
peak memory ≤ 2 GB.
(c) ``scenarios/fleet-10k.yaml`` (10,000 instances) through ``SimEnvironment`` to completion.
Compile time (numba, cached on disk after the first run) is reported apart."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench.simpy_mm1 import mm1_simpy

from quell.experiment.run import scenario_loop
from quell.policy.static import StaticPolicy
from quell.scenario import load_scenario, parse_scenario
from quell.scenario.model import Scenario
from quell.sim import EventCore, SimEnvironment

ROOT = Path(__file__).resolve().parents[1]
REPEAT = 3


def mm1_core(n: int, rho: float = 0.8, seed: int = 1) -> tuple[float, float]:
    """Seconds to simulate n M/M/1-PS requests, and their mean response time."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rho, n))
    sizes = rng.exponential(1.0, n)
    core = EventCore()
    core.add_instance(core.add_resource(1.0))
    t0 = time.perf_counter()
    rec = core.run(float(arrivals[-1]) + 1e7, arrivals, sizes)
    return time.perf_counter() - t0, float(rec.rt_s.mean())


def fleet_scenario(instances: int, rate_per_instance: float, duration_s: float) -> Scenario:
    hosts = instances // 4
    return parse_scenario(
        {
            "name": "bench-fleet",
            "seed": 1,
            "duration_s": duration_s,
            "interval_s": 1.0,
            # 4 instances per 200 Mbit/s link, 50 KB responses: each link ~40 % busy
            "hosts": [{"id": f"h{k}", "link_mbit": 200} for k in range(hosts)],
            "instances": [{"id": f"i{k}", "host": f"h{k // 4}"} for k in range(instances)],
            "files": [{"path": "/f", "size_bytes": 50_000}],
            "workload": {
                "arrival": {"process": "poisson", "rate_rps": rate_per_instance * instances},
                "requests": [{"path": "/f"}],
                "max_requests": 50_000_000,
            },
            "service": {"request_log": "off"},
        }
    )


def run_env(scenario: Scenario) -> dict[str, float]:
    t0 = time.perf_counter()
    env = SimEnvironment(scenario)
    t1 = time.perf_counter()
    scenario_loop(scenario, env, StaticPolicy()).run()
    t2 = time.perf_counter()
    n = len(env.schedule_)
    return {
        "requests": n,
        "schedule_seconds": round(t1 - t0, 2),
        "simulate_seconds": round(t2 - t1, 2),
        "requests_per_second_total": round(n / (t2 - t0)),
        "requests_per_second_simulation": round(n / (t2 - t1)),
    }


def run() -> dict[str, Any]:
    t0 = time.perf_counter()
    mm1_core(1000)  # compile (or load the on-disk cache)
    compile_s = time.perf_counter() - t0
    simpy_n = 100_000
    core_runs, simpy_runs = [], []
    for _ in range(REPEAT):
        core_runs.append(mm1_core(1_000_000))
        simpy_runs.append(mm1_simpy(simpy_n))
    core_s = float(np.median([s for s, _ in core_runs]))
    simpy_s = float(np.median([s for s, _ in simpy_runs]))
    core_mean, simpy_mean = core_runs[0][1], simpy_runs[0][1]
    core_rps = 1_000_000 / core_s
    simpy_rps = simpy_n / simpy_s
    fleet = run_env(fleet_scenario(1000, 50.0, 600.0))
    fleet10k = run_env(load_scenario(ROOT / "scenarios" / "fleet-10k.yaml"))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "compile_seconds": round(compile_s, 2),
        "mm1_ps_rho08": {
            "requests": 1_000_000,
            "seconds": round(core_s, 3),
            "seconds_each_run": [round(s, 3) for s, _ in core_runs],
            "requests_per_second": round(core_rps),
            "mean_rt": round(core_mean, 3),
            "theory_mean_rt": 5.0,
        },
        "simpy_mm1_fcfs_rho08": {
            "requests": simpy_n,
            "seconds": round(simpy_s, 3),
            "seconds_each_run": [round(s, 3) for s, _ in simpy_runs],
            "requests_per_second": round(simpy_rps),
            "mean_rt": round(simpy_mean, 3),
            "theory_mean_rt": 5.0,
        },
        "ratio_vs_simpy": round(core_rps / simpy_rps, 1),
        "ratio_goal": 100,
        "fleet_1000x50rps_600s": fleet,
        "fleet_goal_requests_per_second": 2_000_000,
        "fleet_10k_scenario": fleet10k,
        "peak_rss_mb": round(peak_mb),
        "peak_rss_goal_mb": 2048,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))

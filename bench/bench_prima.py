"""PRIMA controller decision time for 10,000 instances (goal: <= 20 ms per decision).

A synthetic bundle (a plane RTM and a hinge IM, as in tests/prima/bundles.py) and a snapshot
of 10,000 instances with random utilisations and neighbour loads; the policy decides on it 30
times (after one warm-up decision) and the median is reported. Scale-in is held off
(``scale_in_wait_intervals``) so every decision weighs all 10,000 instances: the load (about
225,000 %) is well within their capacities (about 400,000 %), so each timed decision computes
every capacity, weights all instances and waits to scale in. Peer, in the same run on the
same snapshots: the round-robin policy, which walks the same instances and emits weights but
computes no capacities; the ratio PRIMA/RR is the price of the models.

The fast path (``fast_interval_s``): after an interval's decision, ``react`` on glances of the
same 10,000 instances, each with the capacity it was served and its time busy (one in 30 behind a
neighbour that leaves 5 % of the link) and a tenth with a probe download in the glance (a 1 s
glance of a 10 s probe), timed the same way (goal: <= 2 ms per glance)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from quell.core.observation import Observation, Snapshot
from quell.policy import PolicyContext, policy_class
from quell.scenario.model import Scaling
from tests.prima import bundles as sb

N = 10_000
REPEATS = 30


def _snapshot(rng: np.random.Generator, t: float) -> Snapshot:
    u = rng.uniform(5.0, 40.0, N)
    total = u + rng.choice([0.0, 20.0, 45.0], N, p=[0.7, 0.2, 0.1])
    probe = (sb.R_ISO0 + sb.R_ISO_SLOPE * u) * (1 + np.array([sb.sf_of_total(x) for x in total]))
    return Snapshot(
        t,
        "bench",
        {
            f"i{k}": Observation(
                time_s=t,
                instance_id=f"i{k}",
                interval_s=10.0,
                util_pct=float(u[k]),
                weight=100,
                mean_rt_seconds=0.01,
                extra={"probe_rt_seconds": float(probe[k])},
            )
            for k in range(N)
        },
    )


def _time(policy_name: str, params: dict, ctx: PolicyContext) -> list[float]:
    """Decision times on REPEATS snapshots after a warm-up one. Each snapshot is built just
    before its decision and dropped after it, as in the control loop: holding them all would
    leave the cyclic GC 300,000 live observations to walk that a running controller does not
    have (that walk, not the policy, made the worst decision 147 ms)."""
    policy = policy_class(policy_name).build(params, ctx)
    rng = np.random.default_rng(11)  # the same snapshots for every policy
    policy.decide(_snapshot(rng, 0.0))
    out = []
    for k in range(1, REPEATS + 1):
        s = _snapshot(rng, 10.0 * k)
        t0 = time.perf_counter()
        policy.decide(s)
        out.append(time.perf_counter() - t0)
        del s
    return out


def _glance(rng: np.random.Generator, t: float) -> Snapshot:
    """A 1 s glance: requests, the oldest request held, the capacity served and the time busy
    (one in 30 behind a neighbour that leaves 5 % of the link, busy all the glance), and a probe
    download on a tenth."""
    u = rng.uniform(5.0, 40.0, N)
    probed = rng.random(N) < 0.1
    probe = (sb.R_ISO0 + sb.R_ISO_SLOPE * u) * (1 + rng.choice([0.0, 0.5, 4.0], N))
    behind = rng.random(N) < 1 / 30  # as many cuts as the probe's slowest third of a tenth
    busy = np.where(behind, 1.0, u / 100.0)
    served = np.where(behind, 5.0, u)
    return Snapshot(
        t,
        "bench",
        {
            f"i{k}": Observation(
                time_s=t,
                instance_id=f"i{k}",
                interval_s=1.0,
                requests=3,
                util_pct=float(u[k]),
                weight=100,
                extra={
                    "oldest_in_flight_seconds": 0.01,
                    "served_util_pct": float(served[k]),
                    "busy_seconds": float(busy[k]),
                }
                | ({"probe_rt_seconds": float(probe[k])} if probed[k] else {}),
            )
            for k in range(N)
        },
    )


def _time_react(params: dict, ctx: PolicyContext) -> list[float]:
    """``react`` times on REPEATS glances, each after the interval's decision (the rule
    armed afresh, so every glance finds cuts)."""
    policy = policy_class("prima").build(params, ctx)
    rng = np.random.default_rng(12)
    policy.decide(_snapshot(rng, 0.0))
    out = []
    for k in range(1, REPEATS + 1):
        policy.decide(_snapshot(rng, 10.0 * k))
        g = _glance(rng, 10.0 * k + 1.0)
        t0 = time.perf_counter()
        policy.react(g)
        out.append(time.perf_counter() - t0)
        del g
    return out


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        sb.write_linear_bundle(Path(tmp) / "m.json")
        ctx = PolicyContext(
            interval_s=10.0,
            target_rt_s=0.025,
            scaling=Scaling(hosts=[f"h{k}" for k in range(N + 100)], boot_s=30),
            base_dir=Path(tmp),
            initial_instances={f"i{k}": f"h{k}" for k in range(N)},
        )
        t_build = time.perf_counter()
        policy_class("prima").build({"model": "m.json"}, ctx)
        build_s = time.perf_counter() - t_build
        params = {"model": "m.json", "wait_intervals": 0, "scale_in_wait_intervals": 100}
        prima = _time("prima", params, ctx)
        rr = _time("rr", {}, ctx)
        react = _time_react({**params, "fast_interval_s": 1.0}, ctx)
    p50, r50 = statistics.median(prima), statistics.median(rr)
    f50 = statistics.median(react)
    return {
        "instances": N,
        "decisions": REPEATS,
        "prima_decision_ms_median": round(p50 * 1e3, 2),
        "prima_decision_ms_max": round(max(prima) * 1e3, 2),
        "rr_decision_ms_median": round(r50 * 1e3, 2),
        "rr_decision_ms_max": round(max(rr) * 1e3, 2),
        "ratio_prima_over_rr": round(p50 / r50, 2),
        "prima_build_ms": round(build_s * 1e3, 1),
        "goal_ms": 20.0,
        "meets_goal": p50 * 1e3 <= 20.0,
        "prima_react_ms_median": round(f50 * 1e3, 2),
        "prima_react_ms_max": round(max(react) * 1e3, 2),
        "react_goal_ms": 2.0,
        "react_meets_goal": f50 * 1e3 <= 2.0,
    }

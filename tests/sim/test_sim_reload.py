"""The simulator's graceful reload against the lab's measurement of one
(``tests/fixtures/ic2/reload-lab.json``: Apache 2.4 with the event MPM and php-fpm, Poisson
30 req/s of a PHP page, a ``ReconfigureServer`` 5 s in; the requests sent in the 10 s after it
compared with those before). The same bench replayed in the simulator, with the reload cost
``scenarios/ic2/sim-onoff.yaml`` gives (``service.apache.reload_s`` and
``reload_capacity_share``), must recover when the lab's did and cost the requests about what
the lab's reloads cost them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from quell.core.action import ReconfigureServer
from quell.scenario import load_scenario, parse_scenario
from quell.scenario.model import Scenario
from quell.sim import SimEnvironment

ROOT = Path(__file__).resolve().parents[2]
LAB = json.loads((ROOT / "tests/fixtures/ic2/reload-lab.json").read_text())
AT_S, AFTER_S, SLICE_S = 5.0, 10.0, 0.5
SEEDS = range(1, 21)


def replica(seed: int, apache_model: dict[str, Any]) -> Scenario:
    """The lab's bench (bench/bench_reload.py on the ic2-apache branch) as a scenario: one
    event-MPM instance on one core, a 4 MiB PHP page read 60,000 times, 30 req/s."""
    return parse_scenario(
        {
            "name": "reload-replica",
            "seed": seed,
            "duration_s": AT_S + AFTER_S + 7,
            "interval_s": SLICE_S,
            "hosts": [{"id": "h1", "cpus": [0]}],
            "instances": [
                {
                    "id": "web",
                    "host": "h1",
                    "server": "apache",
                    "apache": {"mpm": "event", **LAB["start_settings"]},
                }
            ],
            "files": [{"path": "/x.bin", "size_bytes": 1000}],
            "pages": [
                {
                    "path": "/p.php",
                    "working_set_bytes": 4 << 20,
                    "touches": 60000,
                    "response_bytes": 2000,
                }
            ],
            "workload": {
                "arrival": {"process": "poisson", "rate_rps": 30.0},
                "requests": [{"path": "/p.php"}],
            },
            "service": {"apache": apache_model},
        }
    )


def trial(scenario: Scenario, action: ReconfigureServer | None) -> tuple[float, float]:
    """The mean response time (ms) of the requests sent in the 10 s after the change, and when
    it recovered: the end of the last 0.5 s slice whose mean exceeds twice the p95 before."""
    env = SimEnvironment(scenario)
    recs = []
    for k in range(1, round((AT_S + AFTER_S + 6) / SLICE_S) + 1):
        env.clock.sleep_until(k * SLICE_S)
        env.observe()
        recs += env.take_requests()
        if action is not None and k * SLICE_S == AT_S:
            env.apply([action])
    env.close()
    send = np.array([r.send_s for r in recs])
    rt = np.array([r.latency_s for r in recs], dtype=float)
    p95 = np.percentile(rt[send < AT_S], 95)
    after = (send >= AT_S) & (send < AT_S + AFTER_S)
    recovered = 0.0
    for k in range(round(AFTER_S / SLICE_S)):
        sel = (send >= AT_S + k * SLICE_S) & (send < AT_S + (k + 1) * SLICE_S)
        if sel.any() and rt[sel].mean() > 2 * p95:
            recovered = (k + 1) * SLICE_S
    return 1e3 * float(rt[after].mean()), recovered


def medians(model: dict[str, Any], action: ReconfigureServer | None) -> tuple[float, float]:
    runs = [trial(replica(seed, model), action) for seed in SEEDS]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def lab_excess_ms(case: str) -> float:
    return (
        LAB["cases"][case]["after_mean_ms"] - LAB["cases"]["event: none (control)"]["after_mean_ms"]
    )


def test_the_scenarios_reload_cost_matches_the_labs_graceful_reload() -> None:
    onoff: Scenario = load_scenario(ROOT / "scenarios/ic2/sim-onoff.yaml")
    assert onoff.service is not None
    model = {
        "reload_s": onoff.service.apache.reload_s,
        "reload_capacity_share": onoff.service.apache.reload_capacity_share,
    }
    control_ms, _ = medians(model, None)
    graceful_ms, recovered_s = medians(
        model, ReconfigureServer("web", {"max_request_workers": 16}, graceful=True)
    )
    cases = [c for c in LAB["cases"] if c.startswith("event: graceful") and "php" not in c]
    lab = [lab_excess_ms(c) for c in cases]  # 73.9, 74.4, 89.6 ms
    assert min(lab) <= graceful_ms - control_ms <= max(lab)
    assert recovered_s == statistics.median(LAB["cases"][c]["recovered_s"] for c in cases)
    # online (no reload): no cost, in the lab as here
    online_ms, online_recovered_s = medians(
        model, ReconfigureServer("web", {"max_request_workers": 16}, graceful=False)
    )
    assert lab_excess_ms("event: online MaxRequestWorkers 32 -> 16") <= 0
    assert abs(online_ms - control_ms) < 1.0 and online_recovered_s == 0.0

"""The synthetic server has the shape the paper describes, and the studies over it run: the
cost ablation's rows, and the bootstrap's phases driving IC2 in the closed loop."""

from __future__ import annotations

import json

import numpy as np

from quell.core.rng import component_rng
from quell.detect.features import DEFAULT_FEATURES
from quell.detect.labels import Timeline
from quell.policy.ic2.update import Settings
from quell.studies.ic2.ablation import bootstrap_study, cost_ablation
from quell.studies.ic2.runs import BASELINE, synthetic_runner
from quell.studies.ic2.synthetic import SyntheticServer, periodic_timeline


def _lpo(settings: Settings, kind: str, seed: int = 0) -> float:
    tl = Timeline.of((0.0, 1000.0)) if kind == "cache" else Timeline()
    server = SyntheticServer(component_rng(seed, "t"), tl, BASELINE)
    server.reconfigure(settings, -100.0)
    obs = [server.observe(100.0 + 5 * k, 5.0) for k in range(100)]
    return float(np.median([o.cpu_util / o.throughput_rps for o in obs]))  # type: ignore[operator]


def test_a_cache_antagonist_raises_lpo_and_fewer_workers_soften_it() -> None:
    clean = _lpo(BASELINE, "none")
    assert abs(clean - 0.012) < 0.0005  # the model's CPU per request
    hit = _lpo(BASELINE, "cache")
    assert abs(hit / clean - 1.7) < 0.05  # cache_cpu_gain 0.7 at the baseline's workers
    fewer = _lpo(Settings(32, 5.0, 16), "cache")
    assert abs(fewer / clean - (1 + 0.7 * (0.4 + 0.6 * 0.5))) < 0.05


def test_the_same_seed_gives_the_same_run() -> None:
    tl = periodic_timeline(1200.0)
    a = [SyntheticServer(component_rng(3, "x"), tl, BASELINE).observe(5.0, 5.0) for _ in range(2)]
    assert a[0] == a[1]


def test_the_runner_runs_ic2_off_then_on() -> None:
    run = synthetic_runner(4, 1, 1200.0, DEFAULT_FEATURES)
    off = run("I", None)
    assert len(off) == 240 and off.class_counts()["I"] > 0
    assert "IC2 off" in off.source


def test_the_cost_ablation_reports_every_row() -> None:
    out = cost_ablation(seed=1, train_runs=2, test_runs=1, duration_s=1440.0)
    rows = out["rows"]
    assert isinstance(rows, list) and len(rows) == 2 * 2 * 2 * 2
    for row in rows:
        for key in ("recall", "precision", "miss_rate", "detect_latency_s", "clear_latency_s"):
            assert key in row
    json.dumps(out, allow_nan=False)


def test_the_bootstrap_study_drives_ic2_and_cuts_the_response_time_under_interference() -> None:
    out = bootstrap_study(seed=2, runs=2, test_runs=1, duration_s=1440.0)
    phases = out["phases"]
    assert [p["phase"] for p in phases] == ["I", "II", "III"]  # type: ignore[index]
    for p in phases:  # type: ignore[attr-defined]
        assert p["reconfigurations"] >= 2
        assert p["rt_change_pct"] < -3, p

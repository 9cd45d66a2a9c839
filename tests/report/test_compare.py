"""Side-by-side comparisons: per phase, each instance's mean RT over the settled window."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.report.compare import run_phases, settle_s
from quell.store.run import RequestRecord, RunStore
from tests.sim.build import build_scenario


def test_the_settled_window_and_the_worst_instance_per_phase(tmp_path: Path) -> None:
    s = build_scenario(
        n_hosts=2,
        rate_rps=10,
        duration_s=60,
        interval_s=1,
        scaling={"hosts": ["h0", "h1"], "boot_s": 5},
        probe={"kind": "network", "period_s": 2, "size_bytes": 1000},
        target={"mean_rt_s": 0.05},
        events=[{"at_s": 30, "phase": "noisy"}],
    )
    assert settle_s(s) == 2 * 1 + 5 + 2 * 2  # detect + act, boot, two probe periods
    store = RunStore.create(tmp_path / "run")
    # i0 answers in 10 ms throughout; i1 in 200 ms only in the first 11 s of each phase
    # (unsettled), then in 40 ms, except one 80 ms answer late in the noisy phase.
    rows = []
    for t in range(0, 60):
        rows.append((float(t), 0.010, "i0"))
        phase_start = 0 if t < 30 else 30
        rows.append((float(t), 0.200 if t - phase_start < 10 else 0.040, "i1"))
    rows.append((50.0, 0.080, "i1"))
    store.add_requests(
        RequestRecord(send, lat, 200, 1000, server, "") for send, lat, server in rows
    )
    store.commit()
    store.close()
    phases = {p["phase"]: p for p in run_phases(s, tmp_path / "run")["phases"]}
    base = phases[s.phases()[0][0]]
    assert base["settled_from_s"] == 11.0
    assert base["mean_rt_s"]["i1"] == pytest.approx(0.040)
    assert base["meets_target"] is True
    noisy = phases["noisy"]
    # settled from 41 s: i1's 40 ms answers sent at 41..59 plus the 80 ms one
    assert noisy["worst_mean_rt_s"] == pytest.approx((19 * 0.040 + 0.080) / 20)
    assert noisy["meets_target"] is True

"""Side-by-side comparisons: per phase, each instance's mean RT over the settled window, which
opens settle_s after its phase starts, or boot delay + 2 periods after the last instance the
policy asked for in that phase if that is before the phase ends."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from quell.core.action import AddInstance, Decision, RemoveInstance
from quell.core.observation import Observation, Snapshot
from quell.report.compare import (
    compare_table,
    comparison,
    mitigation_settle_s,
    run_phases,
    settle_s,
    steal_note,
)
from quell.store.run import RequestRecord, RunStore
from tests.sim.build import build_scenario

# Phases: base [0, 30), noisy [30, 60); settle_s = 11 s.
TWO_PHASES = build_scenario(
    n_hosts=2,
    rate_rps=10,
    duration_s=60,
    interval_s=1,
    scaling={"hosts": ["h0", "h1"], "boot_s": 5},
    probe={"kind": "network", "period_s": 2, "size_bytes": 1000},
    target={"mean_rt_s": 0.05},
    events=[{"at_s": 30, "phase": "noisy"}],
)


def test_the_settled_window_and_the_worst_instance_per_phase(tmp_path: Path) -> None:
    s = TWO_PHASES
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
    # every answered request of the window, whichever instance served it: 19 from each
    # instance sent at 41..59 (10 and 40 ms) and the 80 ms one
    assert noisy["requests"] == {"i0": 19, "i1": 20}
    assert noisy["all_mean_rt_s"] == pytest.approx((19 * 0.010 + 19 * 0.040 + 0.080) / 39)
    # of the 39 sorted, position 0.95 x 38 = 36.1 lies between two 40 ms answers
    assert noisy["all_p95_rt_s"] == pytest.approx(0.040)


def test_a_request_counts_in_the_window_it_was_sent_in(tmp_path: Path) -> None:
    # The demo's case: a drained instance's last request, sent just before the window opens
    # and answered inside it, does not decide the phase; one sent before the phase ends counts
    # with it even when answered after.
    s = TWO_PHASES  # windows open 11 s into each phase: [11, 30) and [41, 60)
    rows = [(float(t), 0.010, "i0") for t in range(60)]
    rows += [(40.93, 0.0726, "i1"), (29.9, 0.300, "i1"), (59.99, 0.020, "i0")]
    with RunStore.create(tmp_path / "run") as store:
        store.add_requests(RequestRecord(t, lat, 200, 1000, srv, "") for t, lat, srv in rows)
        store.commit()
    base, noisy = run_phases(s, tmp_path / "run")["phases"]
    assert noisy["requests"] == {"i0": 20} and noisy["mean_rt_s"] == {
        "i0": pytest.approx((19 * 0.010 + 0.020) / 20)
    }
    assert noisy["meets_target"] is True  # i1's 72.6 ms answer at 41.0026 s is not in it
    # sent at 29.9 s, answered at 30.2 s: the base phase's
    assert base["requests"] == {"i0": 19, "i1": 1} and base["worst_mean_rt_s"] == 0.300
    assert base["meets_target"] is False


# Phases: base [0, 50), noisy [50, 100). Interval 1 s, boot 10 s, probe period 2 s:
# settle_s = 2 x 1 + 10 + 2 x 2 = 16 s; a mitigation settles 10 + 2 x 2 = 14 s after it is asked.
SCENARIO = build_scenario(
    n_hosts=3,
    rate_rps=8,
    size_bytes=100_000,
    arrival="deterministic",
    name="cmp",
    duration_s=100,
    interval_s=1,
    instances=[{"id": "a", "host": "h0"}],
    events=[{"at_s": 50, "phase": "noisy"}],
    scaling={"hosts": ["h1", "h2"], "boot_s": 10, "max_instances": 3},
    probe={"kind": "network", "period_s": 2, "size_bytes": 100_000},
    target={"mean_rt_s": 0.020},
)


def _store(
    path: Path,
    adds: list[float],
    slow_until_s: float,
    steal_ratio: Callable[[float], float] | None = None,
) -> Path:
    """One request a second from a; 40 ms until `slow_until_s`, 10 ms after; with
    `steal_ratio`, an observation of a each second carrying the machine's steal then."""
    with RunStore.create(path) as store:
        for t in range(1, 101) if steal_ratio is not None else ():
            obs = Observation(float(t), "a", 1.0, steal_ratio=steal_ratio(float(t)))
            store.add_snapshot(Snapshot(float(t), "lab", {"a": obs}))
        store.add_requests(
            RequestRecord(t, 0.040 if t < slow_until_s else 0.010, 200, 100, "a")
            for t in (k + 0.5 for k in range(100))
        )
        for k, t in enumerate(adds):
            store.add_decision(t, "p", Decision((AddInstance(f"n{k}", "h1"),), "grow"))
        store.add_decision(95.0, "p", Decision((RemoveInstance("n0"),), "shrink"))
        store.commit()
    return path


def test_windows_open_after_the_phase_start_or_the_last_addition_settles(tmp_path: Path) -> None:
    assert settle_s(SCENARIO) == 16.0 and mitigation_settle_s(SCENARIO) == 14.0
    # Additions at 55 and 60 s in the noisy phase: its window opens at 60 + 14 = 74 s, not 66 s;
    # a is slow until 70 s, so the policy meets R_th once its second instance has settled.
    # The removal at 95 s takes no boot and moves nothing.
    out = run_phases(SCENARIO, _store(tmp_path / "r", [55.0, 60.0], slow_until_s=70.0))
    base, noisy = out["phases"]
    assert (base["settled_from_s"], noisy["settled_from_s"]) == (16.0, 74.0)
    assert base["worst_mean_rt_s"] == pytest.approx(0.040) and base["meets_target"] is False
    assert noisy["worst_mean_rt_s"] == pytest.approx(0.010) and noisy["meets_target"] is True
    assert out["scaling_actions"] == 3
    assert (base["scaling_actions"], noisy["scaling_actions"]) == (0, 3)  # 55, 60 and 95 s
    # Without additions the noisy window opens at 50 + 16 = 66 s and takes 4 slow seconds in.
    noisy = run_phases(SCENARIO, _store(tmp_path / "q", [], slow_until_s=70.0))["phases"][1]
    assert noisy["settled_from_s"] == 66.0
    assert noisy["worst_mean_rt_s"] == pytest.approx((4 * 0.040 + 30 * 0.010) / 34)


def test_an_addition_too_late_to_settle_in_its_phase_is_left_out(tmp_path: Path) -> None:
    # Asked at 90 s, it would settle at 104 s, after the phase: the window stays at 66 s.
    out = run_phases(SCENARIO, _store(tmp_path / "r", [90.0], slow_until_s=70.0))
    noisy = out["phases"][1]
    assert noisy["settled_from_s"] == 66.0 and noisy["meets_target"] is True
    assert noisy["worst_mean_rt_s"] == pytest.approx((4 * 0.040 + 30 * 0.010) / 34)


def test_a_scaling_action_counts_in_the_phase_of_the_interval_it_closes(tmp_path: Path) -> None:
    # Decided at 50 s, on the interval (40, 50]: the base phase's; at 50.5 s, the noisy one's.
    out = run_phases(SCENARIO, _store(tmp_path / "r", [50.0, 50.5], slow_until_s=0.0))
    assert [p["scaling_actions"] for p in out["phases"]] == [1, 2]  # and the removal at 95 s


def test_each_settled_window_carries_the_machines_steal_and_the_table_names_the_suspect(
    tmp_path: Path,
) -> None:
    # Steal 0.1 % a second until 80 s, 2 % after: the noisy window [66, 100) averages
    # (14 x 0.1 + 20 x 2.0) / 34 %; the base window [16, 50) 0.1 %.
    path = _store(tmp_path / "r", [], 70.0, lambda t: 0.001 if t <= 80 else 0.02)
    out = run_phases(SCENARIO, path)
    base, noisy = out["phases"]
    assert base["steal_pct"] == pytest.approx(0.1)
    assert noisy["steal_pct"] == pytest.approx((14 * 0.1 + 20 * 2.0) / 34)
    assert out["max_steal_pct"] == noisy["steal_pct"]
    clean = run_phases(SCENARIO, _store(tmp_path / "q", [], slow_until_s=70.0))
    assert clean["max_steal_pct"] is None and clean["phases"][0]["steal_pct"] is None

    result = {"scenario": "cmp", "target_rt_s": 0.02, "policies": {"lsf": out, "rr": clean}}
    buf = io.StringIO()
    compare_table(result, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "steal %" in text and "1.22" in text
    # the scaling actions per phase: the removal at 95 s, in the noisy phase, in both runs
    assert text.count("│     0·1 │") == 2
    older = {
        "phases": [{k: v for k, v in p.items() if k != "scaling_actions"} for p in out["phases"]]
    }
    buf = io.StringIO()  # a comparison recorded before per-phase counts: the run's total
    compare_table(result | {"policies": {"lsf": out | older}}, Console(file=buf, width=200))
    assert "0·1" not in buf.getvalue() and "│       1 │" in buf.getvalue()
    # every request: the noisy window [66, 100) holds 4 answers of 40 ms and 30 of 10 ms, and
    # the 95th percentile (position 0.95 x 33 = 31.35 of the 34 sorted) is a 40 ms one
    assert "every answered request" in text
    assert f"{(4 * 40 + 30 * 10) / 34:.1f} / 40.0" in text
    note = steal_note(result)
    assert note is not None and "lsf noisy 1.22 %" in note and "base" not in note
    assert "rr" not in note.split(":")[1]
    assert steal_note(result, bound_pct=2.0) is None


def test_what_users_felt_counts_every_request_sent_in_the_phase(tmp_path: Path) -> None:
    # base [0, 30): i0's 30 answers of 10 ms, a timeout at 5.5 s and a 503 answered in 1 ms at
    # 6.5 s: 32 requests, 2 unanswered at the 10 s timeout, both above 50 and 100 ms; p99 is
    # the 32nd (ceil(0.99 x 32)) of the sorted 32, a timeout. noisy [30, 60): i0's 30 of 10 ms,
    # i1's 200 ms answers sent at 30..39 (before its settled window opens at 41 s: what the
    # users felt counts them) and 40 ms after: 10 of 60 above both thresholds, p99 the 60th.
    s = TWO_PHASES
    rows = [RequestRecord(float(t), 0.010, 200, 1000, "i0") for t in range(60)]
    rows += [
        RequestRecord(float(t), 0.200 if t < 40 else 0.040, 200, 1000, "i1") for t in range(30, 60)
    ]
    rows += [RequestRecord(5.5, None, 0, 0, "", "timeout"), RequestRecord(6.5, 0.001, 503, 0, "i0")]
    with RunStore.create(tmp_path / "run") as store:
        store.add_requests(rows)
        store.commit()
    out = run_phases(s, tmp_path / "run")
    base, noisy = out["phases"]
    assert base["users"] == {
        "requests": 32,
        "unanswered": 2,
        "share_above_rth": 2 / 32,
        "share_above_2rth": 2 / 32,
        "p99_rt_seconds": 10.0,
    }
    assert noisy["users"] == {
        "requests": 60,
        "unanswered": 0,
        "share_above_rth": 10 / 60,
        "share_above_2rth": 10 / 60,
        "p99_rt_seconds": 0.2,
    }
    assert noisy["worst_mean_rt_s"] == pytest.approx(0.040)  # the settled window's
    result = comparison(s, [("rr", tmp_path / "run")])
    assert result["timeout_s"] == 10.0
    buf = io.StringIO()
    compare_table(result, Console(file=buf, width=80))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "unanswered at the 10 s timeout" in " ".join(text.split())
    cells = [
        [c.strip() for c in ln.split("│")[1:-1]]
        for ln in text.splitlines()
        if ln.startswith("│ rr")
    ]
    assert ["rr", "noisy", "60", "0", "16.67", "16.67", "200.0"] in cells
    assert ["rr", base["phase"], "32", "2", "6.25", "6.25", "10000.0"] in cells
    older = {
        "rr": out
        | {"phases": [{k: v for k, v in p.items() if k != "users"} for p in out["phases"]]}
    }
    buf = io.StringIO()  # a comparison recorded before: no table of them
    compare_table(result | {"policies": older}, Console(file=buf, width=80))
    assert "what users felt" not in buf.getvalue()

"""Exact per-phase numbers from a hand-built run store."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from report_run import LATENCIES_S
from rich.console import Console

from quell.core.observation import Observation, Snapshot
from quell.report.summary import summarize
from quell.report.table import phase_title, print_summary, row_cells
from quell.store.run import RunStore


def _summary(run_dir: Path) -> dict:
    with RunStore.open(run_dir) as store:
        return summarize(store)


def _inst(summary: dict, phase: str, iid: str) -> dict:
    (p,) = [p for p in summary["phases"] if p["name"] == phase]
    return p["instances"][iid]


def test_top_level_fields(run_dir: Path) -> None:
    s = _summary(run_dir)
    assert s["scenario"] == "twoweb"
    assert s["environment"] == "sim"
    assert s["rt_source"] == "requests"
    assert s["cycle_errors"] == 1
    assert s["complete"] is True
    assert s["data_end_s"] == 20.0
    assert [(p["name"], p["start_s"], p["end_s"], p["observed_s"]) for p in s["phases"]] == [
        ("baseline", 0.0, 10.0, 10.0),
        ("noisy", 10.0, 20.0, 10.0),
    ]
    assert list(s["phases"][0]["instances"]) == ["web1", "web2"]


def test_request_log_numbers_are_exact(run_dir: Path) -> None:
    s = _summary(run_dir)
    assert _inst(s, "baseline", "web1") == {
        "requests": 5,
        "errors": 1,  # the 503; the unanswered request has no server and counts for nobody
        "throughput_rps": 0.5,
        "mean_rt_ms": 40.0,
        "p95_rt_ms": 88.0,
        "cpu_util": 0.5,
        "util_pct": 25.0,
    }
    assert _inst(s, "noisy", "web1") == {
        "requests": 4,
        "errors": 0,
        "throughput_rps": 0.4,
        "mean_rt_ms": 80.0,
        "p95_rt_ms": 107.0,
        "cpu_util": 0.9,
        "util_pct": 45.0,
    }
    assert _inst(s, "baseline", "web2") == {
        "requests": 3,
        "errors": 0,
        "throughput_rps": 0.3,
        "mean_rt_ms": 15.0,
        "p95_rt_ms": 24.0,
        "cpu_util": 0.25,
        "util_pct": 12.5,
    }
    assert _inst(s, "noisy", "web2") == {
        "requests": 2,
        "errors": 0,
        "throughput_rps": 0.2,
        "mean_rt_ms": 250.0,
        "p95_rt_ms": 295.0,
        "cpu_util": 0.75,
        "util_pct": 37.5,
    }


@pytest.mark.parametrize("key", list(LATENCIES_S))
def test_percentiles_match_numpy(run_dir: Path, key: tuple[str, str]) -> None:
    iid, phase = key
    lat_ms = np.asarray(LATENCIES_S[key]) * 1e3
    m = _inst(_summary(run_dir), phase, iid)
    assert m["mean_rt_ms"] == round(float(lat_ms.mean()), 3)
    assert m["p95_rt_ms"] == round(float(np.percentile(lat_ms, 95)), 3)
    assert m["requests"] == len(lat_ms)


def test_request_on_phase_boundary_goes_to_the_phase_it_was_sent_in(run_dir: Path) -> None:
    # web1 requests were sent at 9.999 s (baseline, 100 ms) and at 10.0 s (noisy, 50 ms).
    s = _summary(run_dir)
    assert _inst(s, "baseline", "web1")["mean_rt_ms"] == 40.0  # includes the 100 ms at 9.999 s
    assert _inst(s, "noisy", "web1")["requests"] == 4  # includes the one at 10.0 s


def test_interval_fallback_without_request_log(make_run: Callable[..., Path]) -> None:
    s = _summary(make_run(requests=False))
    assert s["rt_source"] == "intervals"
    # 5 intervals x 10 requests per phase; every interval mean 20 ms / p95 40 ms in the baseline.
    assert _inst(s, "baseline", "web1") == {
        "requests": 50,
        "errors": 0,
        "throughput_rps": 5.0,
        "mean_rt_ms": 20.0,
        "p95_rt_ms": 40.0,
        "cpu_util": 0.5,
        "util_pct": 25.0,
    }
    assert _inst(s, "noisy", "web2")["mean_rt_ms"] == 80.0
    assert _inst(s, "noisy", "web2")["p95_rt_ms"] == 160.0


def test_interval_fallback_is_request_weighted_and_skips_unmeasured(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "run")
    store.set_meta(scenario="w", environment="sim", phases=[["only", 0.0, 8.0]], finished_at=1)
    rows = [
        # (end time, requests, mean s, p95 s)
        (2.0, 10, 0.010, 0.020),
        (4.0, 30, 0.030, 0.050),
        (6.0, 5, None, None),  # requests counted, response time not measured
        (8.0, 0, None, None),
    ]
    for t, n, mean, p95 in rows:
        obs = Observation(
            t, "a", 2.0, requests=n, mean_rt_seconds=mean, p95_rt_seconds=p95, errors=1
        )
        store.add_snapshot(Snapshot(t, "sim", {"a": obs}))
    store.commit()
    m = summarize(store)["phases"][0]["instances"]["a"]
    store.close()
    assert m["requests"] == 45
    assert m["errors"] == 4
    assert m["throughput_rps"] == 5.625  # 45 / 8 s
    assert m["mean_rt_ms"] == 25.0  # (10*10 + 30*30) / 40, not / 45
    assert m["p95_rt_ms"] == 42.5  # (10*20 + 30*50) / 40
    assert m["cpu_util"] is None
    assert m["util_pct"] is None


def test_incomplete_run_divides_by_the_observed_time(make_run: Callable[..., Path]) -> None:
    s = _summary(make_run(finished=False, until_s=14.0))
    assert s["complete"] is False
    assert s["data_end_s"] == 14.0
    assert [p["observed_s"] for p in s["phases"]] == [10.0, 4.0]
    noisy = _inst(s, "noisy", "web1")
    assert noisy["requests"] == 3  # sent at 10, 12, 14 s
    assert noisy["throughput_rps"] == 0.75  # 3 requests / 4 observed seconds
    assert noisy["mean_rt_ms"] == 70.0
    assert _inst(s, "baseline", "web1")["throughput_rps"] == 0.5


def test_phase_never_reached_has_no_throughput(make_run: Callable[..., Path]) -> None:
    s = _summary(make_run(finished=False, until_s=8.0))
    assert [p["observed_s"] for p in s["phases"]] == [8.0, 0.0]
    assert _inst(s, "noisy", "web1") == {
        "requests": 0,
        "errors": 0,
        "throughput_rps": None,
        "mean_rt_ms": None,
        "p95_rt_ms": None,
        "cpu_util": None,
        "util_pct": None,
    }
    assert _inst(s, "baseline", "web1")["throughput_rps"] == 0.5  # 4 requests / 8 s


def test_terminal_table_shows_the_summary_numbers(make_run: Callable[..., Path]) -> None:
    s = _summary(make_run(finished=False, until_s=14.0))
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "incomplete run: it stopped before the end; data ends at 14 s" in text
    assert "baseline  [0, 10) s" in text
    assert "noisy  [10, 20) s" in text
    line = next(ln for ln in text.splitlines() if "web1" in ln)  # first table: baseline
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells == ["web1", "5", "1", "0.5", "40.00", "88.00", "0.500", "25.0"]
    assert cells == row_cells("web1", _inst(s, "baseline", "web1"))


def test_a_large_fleet_table_shows_the_slowest_and_the_medians() -> None:
    from quell.report.table import SLOWEST, phase_rows

    insts = {
        f"i{k}": {
            "requests": 10 + k,
            "errors": 0,
            "throughput_rps": 1.0,
            "mean_rt_ms": float(k),
            "p95_rt_ms": 2.0 * k,
            "cpu_util": 0.5,
            "util_pct": 50.0,
        }
        for k in range(101)
    }
    rows = phase_rows({"instances": insts})
    assert [r[0] for r in rows[:SLOWEST]] == [f"i{k}" for k in range(100, 100 - SLOWEST, -1)]
    assert rows[-1] == ["median of 101", "60", "0", "1.0", "50.00", "100.00", "0.500", "50.0"]
    assert len(rows) == SLOWEST + 1
    small = phase_rows({"instances": dict(list(insts.items())[:5])})
    assert [r[0] for r in small] == ["i0", "i1", "i2", "i3", "i4"]


def test_each_phase_carries_the_machines_cpu_steal(tmp_path: Path) -> None:
    """Steal is host-wide: one value per interval, however many instances recorded it; a phase
    over ``STEAL_SUSPECT_PCT`` is marked in its title, and a run without steal has ``None``."""
    store = RunStore.create(tmp_path / "run")
    phases = [["quiet", 0.0, 6.0], ["stolen", 6.0, 12.0]]
    store.set_meta(scenario="w", environment="lab", phases=phases, finished_at=1)
    steal = {2.0: 0.001, 4.0: 0.002, 6.0: 0.003, 8.0: 0.010, 10.0: 0.020, 12.0: 0.0}
    for t, ratio in steal.items():
        # a second instance at 10 s only: the mean is over intervals (1.25 % over rows)
        ids = ["a", "b"] if t == 10.0 else ["a"]
        obs = {i: Observation(t, i, 2.0, steal_ratio=ratio) for i in ids}
        store.add_snapshot(Snapshot(t, "lab", obs))
    store.commit()
    s = summarize(store)
    store.close()
    quiet, stolen = s["phases"]
    assert quiet["steal_pct"] == 0.2  # intervals ending at 2, 4, 6 s: (0.1 + 0.2 + 0.3) / 3 %
    assert stolen["steal_pct"] == 1.0  # (1.0 + 2.0 + 0.0) / 3 %
    assert phase_title(quiet) == "quiet  [0, 6) s  machine CPU steal 0.20 %"
    assert phase_title(stolen).endswith("machine CPU steal 1.00 % (suspect)")


def test_a_run_without_steal_has_none_and_a_plain_title(run_dir: Path) -> None:
    phase = _summary(run_dir)["phases"][0]
    assert phase["steal_pct"] is None
    assert phase_title(phase) == "baseline  [0, 10) s"

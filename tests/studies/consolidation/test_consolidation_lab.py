"""The consolidation lab for real: two PostgreSQL clusters on one capped core behind nginx,
php-fpm and HAProxy. The quotas are what the kernel reads back; the light transaction costs
the database a tenth of the heavy one or less (pg_stat_statements); the closed-loop users keep
the interactive response-time law; bring-up interrupted, a normal close and a runner killed
with kill -9 followed by ``quell lab clean`` all leave nothing behind (processes, cgroups,
the tmpfs, the ports, the work files)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from quell.signals.cgroup import detect_layout, read_cpu_cap
from quell.studies.consolidation.lab import DB_SHARES, LB_PORTS, PERIOD_US, ConsolidationLab, _get
from quell.studies.consolidation.point import ConsolidationMeasurement, ConsolidationPoint
from quell.studies.consolidation.postgres import reset_statements, statement_stats
from quell.workload.population import response_time_law_rps
from tests.studies.consolidation.consolidation_leftovers import leftovers

pytestmark = pytest.mark.lab

COMMENTS = 100_000
"""A tenth of the full data: loads in seconds; the heavy scan reads all 100 000 titles still."""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsolidationLab]:
    logs = tmp_path_factory.mktemp("consolidation-logs")
    with ConsolidationLab(comments_total=COMMENTS, log_dir=logs) as lab:
        yield lab
    assert not any(leftovers(lab.tag.value).values())


def point(users: int, **kw: object) -> ConsolidationPoint:
    base: dict[str, object] = {
        "const": {"users": users, "cap_pct": 100},
        "inc": {"users": users, "cap_pct": 100},
        "think_time_seconds": 0.5,
        "heavy_share": 0.1,
        "ramp_seconds": 2,
        "measure_seconds": 8,
        "seed": 3,
    }
    return ConsolidationPoint.model_validate(base | kw)


def test_quotas_as_written(lab: ConsolidationLab) -> None:
    layout = detect_layout()
    assert layout.cpu is not None
    for caps, want in (((50, 70), (50_000, 70_000)), ((100, 60), (-1, 60_000))):
        p = point(1, const={"users": 1, "cap_pct": caps[0]}, inc={"users": 1, "cap_pct": caps[1]})
        assert lab.set_caps(p) == {"const": want[0], "inc": want[1]}
        for system, quota in zip(("const", "inc"), want, strict=True):
            d = layout.cpu / lab.groups[system].name
            assert int((d / "cpu.cfs_quota_us").read_text()) == quota
            assert int((d / "cpu.cfs_period_us").read_text()) == PERIOD_US
            assert int((d / "cpu.shares").read_text()) == DB_SHARES
            cap = read_cpu_cap(layout, lab.groups[system].name)
            assert cap == (None if quota == -1 else quota / PERIOD_US)
            cpuset = layout.cpuset
            assert cpuset is not None
            assert (cpuset / lab.groups[system].name / "cpuset.cpus").read_text().strip() == "1"


def test_postgres_runs_in_its_groups(lab: ConsolidationLab) -> None:
    """Every process of each cluster (postmaster, auxiliaries, backends) is in its groups."""
    for system, proc in lab.pg_procs.items():
        pids = set(lab.groups[system].pids())
        assert proc.pid in pids
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert children and {int(c) for c in children} <= pids


def test_light_and_heavy_cost_the_database_as_designed(lab: ConsolidationLab) -> None:
    """Through the whole chain (HAProxy, nginx, php-fpm, pdo_pgsql): pg_stat_statements counts
    each transaction once, and the heavy one costs at least 10x the light one."""
    lab.ensure_front("conservative", ctp=False)
    lab.set_caps(point(1))
    cluster = lab.clusters["inc"]
    reset_statements(cluster)
    for _ in range(40):
        _get(LB_PORTS["inc"], "/light")
    for _ in range(8):
        _get(LB_PORTS["inc"], "/heavy")
    stats = {
        ("heavy" if "ILIKE" in s.query else "light"): s
        for s in statement_stats(cluster)
        if "ILIKE" in s.query or "BETWEEN" in s.query
    }
    assert stats["light"].calls_total == 40
    assert stats["heavy"].calls_total == 8
    assert stats["heavy"].mean_exec_seconds >= 10 * stats["light"].mean_exec_seconds
    assert stats["light"].mean_exec_seconds < 0.01


def test_closed_loop_keeps_the_response_time_law(lab: ConsolidationLab, tmp_path: Path) -> None:
    """X = N / (R + Z) on each system, R measured; the measurement file says the same."""
    p = point(12)
    m = lab.measure(p, tmp_path)
    assert (
        ConsolidationMeasurement.from_json(json.loads((tmp_path / "measurement.json").read_text()))
        == m
    )
    for system in ("const", "inc"):
        s = m.systems[system]
        law = response_time_law_rps(12, s.mean_rt_seconds, p.think_time_seconds)
        assert s.throughput_per_second == pytest.approx(law, rel=0.15)
        assert s.light_mean_rt_seconds is not None and s.heavy_mean_rt_seconds is not None
        assert s.heavy_mean_rt_seconds > s.light_mean_rt_seconds
        # 80 samples at 0.1 s; their mean is the window's CPU (the same counter)
        assert 75 <= len(s.cpu_pct_100ms) <= 81
        assert sum(s.cpu_pct_100ms) / len(s.cpu_pct_100ms) == pytest.approx(s.db_cpu_pct, abs=3)
        assert 0 < s.db_cpu_pct < 100
    extra = json.loads((tmp_path / "lab.json").read_text())
    assert extra["errors"] == {"const": 0, "inc": 0}


@pytest.mark.parametrize("idle", [False, True])
def test_a_competitor_takes_the_core_by_its_weight_and_stops_with_the_point(
    lab: ConsolidationLab, tmp_path: Path, idle: bool
) -> None:
    """A spinner beside a tier that wants the whole core: at the tiers' shares the two split it
    (CFS gives equal weights equal time); at the lowest weight the tier keeps nearly all of it.
    The spinner's CPU is counted apart, not as other work on CPU 1, and it is gone after."""
    layout = detect_layout()
    assert layout.cpu is not None
    hog = point(
        0,
        const={"users": 6, "cap_pct": 100},
        inc={"users": 0, "cap_pct": 100},
        think_time_seconds=0.001,
        heavy_share=1.0,
        competitor_cpu_pct=100,
        competitor_idle=idle,
    )
    m = lab.measure(hog, tmp_path)
    extra = json.loads((tmp_path / "lab.json").read_text())
    tier, spinner = m.systems["const"].db_cpu_pct, extra["competitor_cpu_pct"]
    assert tier + spinner == pytest.approx(100.0, abs=8)
    if idle:
        assert spinner < 5.0 and tier > 90.0
    else:
        assert tier == pytest.approx(50.0, abs=10) and spinner == pytest.approx(50.0, abs=10)
    assert extra["cpu1_other_pct"] < 5.0
    group = lab.groups["competitor"]
    assert int((layout.cpu / group.name / "cpu.shares").read_text()) == (2 if idle else DB_SHARES)
    assert group.pids() == []

"""The probe client's schedule, bounds, targets file and log, without the lab (no root)."""

from __future__ import annotations

import asyncio
import io
import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from quell.core.rng import component_rng
from quell.lab.prober import (
    RNG_NAME,
    ProbeRecord,
    ProbeSchedule,
    TargetsFile,
    format_record,
    main,
    max_downloads,
    parse_record,
    parse_targets,
    probe_tail,
    run_prober,
    write_targets,
)

STEP_S = 0.01


def schedule(period_s: float = 1.0, duration_s: float = 10.0, seed: int = 7) -> ProbeSchedule:
    return ProbeSchedule(period_s, duration_s, component_rng(seed, RNG_NAME))


def simulate(
    sched: ProbeSchedule,
    targets_at: dict[int, list[str]],
    download_s: Callable[[str], float],
    steps: int,
) -> list[tuple[str, float]]:
    """Drive the schedule as the prober does, on a fake clock in steps of STEP_S; returns the
    (instance, start time) of every download. ``targets_at``: step -> the target list from then."""
    inflight: dict[str, float] = {}
    starts: list[tuple[str, float]] = []
    for n in range(steps):
        t = n * STEP_S
        for iid, end in list(inflight.items()):
            if end <= t:
                sched.finished(iid, end)
                del inflight[iid]
        if n in targets_at:
            sched.sync(targets_at[n], t)
        for iid in sched.due(t):
            starts.append((iid, t))
            inflight[iid] = t + download_s(iid)
    return starts


def test_phases_are_seeded_staggered_and_within_one_period() -> None:
    a = schedule(period_s=10.0)
    a.sync(["i1", "i2", "i3"], 0.0)
    phases = [a.phase_of(i) for i in ("i1", "i2", "i3")]
    assert all(0.0 <= p < 10.0 for p in phases)
    assert len(set(phases)) == 3
    again = schedule(period_s=10.0)
    again.sync(["i1", "i2", "i3"], 0.0)
    assert [again.phase_of(i) for i in ("i1", "i2", "i3")] == phases
    other = schedule(period_s=10.0, seed=8)
    other.sync(["i1", "i2", "i3"], 0.0)
    assert [other.phase_of(i) for i in ("i1", "i2", "i3")] != phases


def test_one_download_per_period_on_a_fixed_grid_and_none_after_the_end() -> None:
    sched = schedule(period_s=1.0, duration_s=10.0)
    starts = simulate(sched, {0: ["a", "b"]}, lambda iid: 0.08, steps=1200)
    for iid in ("a", "b"):
        times = [t for i, t in starts if i == iid]
        phase = sched.phase_of(iid)
        # slot k starts at phase + k (to the fake clock's step)
        assert len(times) == math.ceil(10.0 - phase) == sched.count_of(iid)
        for k, t in enumerate(times):
            assert phase + k <= t < phase + k + STEP_S + 1e-9
        assert times[-1] < 10.0


def test_a_download_that_overruns_skips_the_slots_it_missed() -> None:
    sched = schedule(period_s=1.0, duration_s=10.0)
    starts = simulate(sched, {0: ["slow"]}, lambda iid: 2.5, steps=1500)
    times = [t for _, t in starts]
    phase = sched.phase_of("slow")
    # never two at once: each starts on the first slot after the previous one ended
    assert [round(t - phase) for t in times] == list(range(0, 10, 3))[: len(times)]
    assert all(b - a >= 2.5 for a, b in itertools.pairwise(times))


def test_targets_come_and_go_and_a_returning_one_keeps_its_grid_and_budget() -> None:
    sched = schedule(period_s=1.0, duration_s=10.0)
    starts = simulate(
        sched,
        {0: ["a"], 300: ["a", "late"], 500: ["late"], 700: ["a", "late"]},
        lambda i: 0.05,
        1200,
    )
    a = [t for i, t in starts if i == "a"]
    late = [t for i, t in starts if i == "late"]
    assert not [t for t in a if 5.0 + STEP_S < t < 7.0]  # not probed while absent
    assert min(late) >= 3.0 and min(late) < 4.0  # first seen at 3 s, phase < 1 period
    assert 3.0 + sched.phase_of("late") <= min(late)
    phase = sched.phase_of("a")
    assert all(abs((t - phase) - round(t - phase)) < STEP_S + 1e-9 for t in a)


@pytest.mark.parametrize(
    ("period_s", "duration_s", "download_s"),
    [(1.0, 10.0, 0.01), (0.3, 2.0, 0.29), (3.0, 2.0, 0.01), (0.7, 5.5, 1.9), (2.0, 9.99, 0.0)],
)
def test_never_more_than_the_bound(period_s: float, duration_s: float, download_s: float) -> None:
    sched = schedule(period_s=period_s, duration_s=duration_s)
    steps = int(duration_s / STEP_S) + 300
    starts = simulate(
        sched, {0: ["a", "b", "c"], 50: ["a", "b", "c", "d"]}, lambda i: download_s, steps
    )
    bound = max_downloads(duration_s, period_s)
    for iid in ("a", "b", "c", "d"):
        n = sum(1 for i, _ in starts if i == iid)
        assert n <= bound
        if duration_s >= period_s + 0.5:  # a whole period after the last one appeared
            assert n >= 1
        assert n <= math.ceil(duration_s / period_s)  # the grid alone already keeps to this
    assert all(t < duration_s for _, t in starts)


def test_targets_outside_the_lab_range_are_refused(tmp_path: Path) -> None:
    text = (
        '{"a": "10.77.1.1:8081", "web": "93.184.216.34:80", "b": "10.77.1.2:0",'
        ' "c": "nonsense", "d": "10.77.2.7:8081"}'
    )
    targets, problems = parse_targets(text)
    assert targets == {"a": ("10.77.1.1", 8081), "d": ("10.77.2.7", 8081)}
    assert len(problems) == 3 and any("93.184.216.34" in p for p in problems)
    assert parse_targets("[1, 2]") == ({}, ["not a JSON object"])
    path = tmp_path / "targets.json"
    write_targets(path, {"a": ("10.77.1.1", 8081)})
    log = io.StringIO()
    reader = TargetsFile(path, log)
    assert reader.changed() == {"a": ("10.77.1.1", 8081)}
    assert reader.changed() is None  # unchanged file: nothing to do
    write_targets(path, {"a": ("10.77.1.1", 8081), "x": ("8.8.8.8", 53)})
    assert reader.changed() == {"a": ("10.77.1.1", 8081)}
    assert "8.8.8.8" in log.getvalue()
    assert not (tmp_path / "targets.json.tmp").exists()


def test_records_round_trip_and_the_tail_reads_complete_lines_only(tmp_path: Path) -> None:
    r = ProbeRecord(12.5, "i3", 0.078123, True)
    assert parse_record(format_record(r)) == r
    assert format_record(ProbeRecord(1.0, "a", 10.0, False)) == "1.000000,a,10.000000,0\n"
    assert parse_record("garbage") is None and parse_record("x,a,1,1") is None
    path = tmp_path / "probes.csv"
    tail = probe_tail(path)
    assert tail.read() == []
    path.write_text(format_record(r) + "3.0,b,0.1")
    assert tail.read() == [r]
    with open(path, "a") as f:
        f.write("5,0\n")
    assert tail.read() == [ProbeRecord(3.0, "b", 0.15, False)]


def test_the_process_probes_every_target_live_and_stops_by_itself(tmp_path: Path) -> None:
    """The real asyncio loop with a fake download: targets added while it runs, failures
    logged as ok=0, every line complete, nothing after the duration."""
    targets = tmp_path / "targets.json"
    write_targets(targets, {"a": ("10.77.1.1", 8081), "b": ("10.77.1.2", 8081)})
    calls: list[tuple[str, int]] = []

    async def download(addr: str, port: int) -> bool:
        calls.append((addr, port))
        await asyncio.sleep(0.01)
        if addr == "10.77.1.2":
            raise ConnectionRefusedError
        return True

    async def scenario(out: io.StringIO, start_at: float) -> None:
        async def add_later() -> None:
            await asyncio.sleep(start_at - time.monotonic() + 0.3)
            write_targets(targets, {"a": ("10.77.1.1", 8081), "c": ("10.77.1.3", 8081)})

        task = asyncio.create_task(add_later())
        await run_prober(schedule(0.1, 0.8), TargetsFile(targets), download, out, start_at, 0.5)
        await task

    out = io.StringIO()
    start_at = time.monotonic() + 0.05
    asyncio.run(scenario(out, start_at))
    assert time.monotonic() - start_at < 0.8 + 0.5
    records = [parse_record(line) for line in out.getvalue().splitlines()]
    assert all(r is not None for r in records)
    by = {i: [r for r in records if r is not None and r.instance_id == i] for i in "abc"}
    assert 6 <= len(by["a"]) <= max_downloads(0.8, 0.1) and all(r.ok for r in by["a"])
    assert by["b"] and not any(r.ok for r in by["b"])
    assert all(r.time_s < 0.3 + 0.05 for r in by["b"])  # dropped from the targets at 0.3 s
    assert by["c"] and all(r.time_s >= 0.3 for r in by["c"])
    assert all(0.0 <= r.time_s < 0.8 for rs in by.values() for r in rs)
    assert {addr for addr, _ in calls} <= {"10.77.1.1", "10.77.1.2", "10.77.1.3"}


def test_bad_arguments_exit_2_without_a_traceback(tmp_path: Path) -> None:
    argv = ["--targets", str(tmp_path / "t.json"), "--out", str(tmp_path / "o.csv")]
    argv += ["--start-at", "0", "--duration", "1", "--timeout", "1", "--seed", "1"]
    assert main([*argv, "--period", "0", "--size", "10"]) == 2
    assert not (tmp_path / "o.csv").exists()

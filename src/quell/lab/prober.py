"""The interference probe's client (PRIMA Section III-B1): downloads each instance's probe file
once per period and logs how long it took.

Every instance carries a second small lighttpd in its own network namespace and cgroup that
serves one file of random bytes. This process runs in the client namespace
(``python -m quell.lab.prober``), like the load generator; the download's bytes leave the
instance's host through its shaped uplink, so they queue behind whatever the neighbours send, and
the download time rises with the competition for the link.

Schedule: an instance first seen at time b (relative to the run's clock origin) gets a phase
φ drawn once from the seeded stream ``lab/probe``; its downloads are due at b + φ + k·period.
One download per instance at a time: a download that overruns its next slot skips it.
Bounded: nothing starts at or after ``duration``, an instance never gets more than
``ceil(duration / period) + 1`` downloads, each has a timeout, and the process exits by
``start + duration + timeout + 1`` whatever happens.

Targets come from a small JSON file ``{instance_id: "addr:port"}`` that the environment
rewrites atomically when instances are added or removed; only addresses of the lab's own
private range are probed. Each finished download appends one CSV line
``time_s,instance_id,seconds,ok`` (``time_s`` = when it started, run clock), flushed at once.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from quell.core.rng import component_rng
from quell.lab.connection import Target
from quell.lab.loadgen import fetch
from quell.lab.request_log import LineTail

RNG_NAME = "lab/probe"
PROBE_PATH = "/probe.bin"
CSV_FIELDS = ("time_s", "instance_id", "seconds", "ok")
ALLOWED_NETWORK = ipaddress.ip_network("10.77.0.0/16")
"""The lab's namespace addresses (see ``quell.lab.network``); nothing else is ever probed."""
POLL_TARGETS_S = 0.1


def max_downloads(duration_s: float, period_s: float) -> int:
    """The most downloads one instance can get in a run."""
    return math.ceil(duration_s / period_s) + 1


@dataclass
class _Slot:
    base_s: float
    phase_s: float
    next_s: float
    k: int = 0
    count: int = 0
    active: bool = True
    in_flight: bool = False


@dataclass
class ProbeSchedule:
    """When each instance's next download is due. Pure: times are passed in."""

    period_s: float
    duration_s: float
    rng: np.random.Generator
    slots: dict[str, _Slot] = field(default_factory=dict)

    @property
    def cap(self) -> int:
        return max_downloads(self.duration_s, self.period_s)

    def phase_of(self, instance_id: str) -> float:
        return self.slots[instance_id].phase_s

    def count_of(self, instance_id: str) -> int:
        return self.slots[instance_id].count

    def _move(self, slot: _Slot, not_before_s: float, min_k: int) -> None:
        """Next slot: the first grid time at or after ``not_before_s``, index at least min_k."""
        x = (not_before_s - slot.base_s - slot.phase_s) / self.period_s
        slot.k = max(min_k, math.ceil(x))
        slot.next_s = slot.base_s + slot.phase_s + slot.k * self.period_s

    def sync(self, instance_ids: Iterable[str], now_s: float) -> None:
        """Make the set of probed instances ``instance_ids``; new ones get a phase now."""
        wanted = list(dict.fromkeys(instance_ids))
        for iid, old in self.slots.items():
            if iid not in wanted:
                old.active = False
        for iid in wanted:
            slot = self.slots.get(iid)
            if slot is None:
                phase = float(self.rng.uniform(0.0, self.period_s))
                self.slots[iid] = _Slot(now_s, phase, now_s + phase)
            elif not slot.active:
                slot.active = True
                if not slot.in_flight:
                    self._move(slot, now_s, slot.k)

    def due(self, now_s: float) -> list[str]:
        """Instances whose download starts now; they are marked in flight and counted."""
        out = []
        for iid, slot in self.slots.items():
            if (
                slot.active
                and not slot.in_flight
                and slot.next_s <= now_s < self.duration_s
                and slot.count < self.cap
            ):
                slot.in_flight = True
                slot.count += 1
                out.append(iid)
        return out

    def finished(self, instance_id: str, end_s: float) -> None:
        slot = self.slots[instance_id]
        slot.in_flight = False
        self._move(slot, end_s, slot.k + 1)  # slots missed while it ran are skipped

    def next_due_s(self) -> float:
        """When the next download is due (``inf`` if none will be)."""
        times = [
            s.next_s
            for s in self.slots.values()
            if s.active and not s.in_flight and s.count < self.cap
        ]
        t = min(times, default=math.inf)
        return t if t < self.duration_s else math.inf


# -- targets file ---------------------------------------------------------------------------


def write_targets(path: Path, targets: dict[str, tuple[str, int]]) -> None:
    """Replace the targets file atomically: the prober never reads half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({iid: f"{addr}:{port}" for iid, (addr, port) in targets.items()}))
    os.replace(tmp, path)


def parse_targets(text: str) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """(targets, problems): entries outside the lab's own range or malformed are left out."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return {}, [f"not JSON: {exc}"]
    if not isinstance(raw, dict):
        return {}, ["not a JSON object"]
    out: dict[str, tuple[str, int]] = {}
    problems = []
    for iid, where in raw.items():
        addr, _, port = str(where).rpartition(":")
        try:
            ip = ipaddress.ip_address(addr)
            port_no = int(port)
        except ValueError:
            problems.append(f"{iid}: {where!r} is not addr:port")
            continue
        if ip not in ALLOWED_NETWORK or not 1 <= port_no <= 65535:
            problems.append(f"{iid}: {where} is outside {ALLOWED_NETWORK}")
            continue
        out[str(iid)] = (addr, port_no)
    return out, problems


class TargetsFile:
    """Re-reads the targets file when it was replaced since the last look."""

    def __init__(self, path: Path, log: TextIO = sys.stderr) -> None:
        self.path = path
        self.log = log
        self._seen: tuple[int, int] | None = None

    def changed(self) -> dict[str, tuple[str, int]] | None:
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_mtime_ns)
            if key == self._seen:
                return None
            text = self.path.read_text()
        except OSError:
            return None
        self._seen = key
        targets, problems = parse_targets(text)
        for p in problems:
            print(f"quell-prober: ignoring target {p}", file=self.log, flush=True)
        return targets


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    time_s: float
    """When the download started, seconds on the run's clock."""
    instance_id: str
    seconds: float
    ok: bool

    @property
    def end_s(self) -> float:
        return self.time_s + self.seconds


def format_record(r: ProbeRecord) -> str:
    return f"{r.time_s:.6f},{r.instance_id},{r.seconds:.6f},{int(r.ok)}\n"


def parse_record(line: str) -> ProbeRecord | None:
    parts = line.rstrip("\n").split(",")
    if len(parts) != len(CSV_FIELDS):
        return None
    try:
        return ProbeRecord(float(parts[0]), parts[1], float(parts[2]), parts[3] == "1")
    except ValueError:
        return None


def probe_tail(path: Path) -> LineTail[ProbeRecord]:
    """Reads the probe records appended since the last call."""
    return LineTail(path, parse_record)


# -- the process ----------------------------------------------------------------------------

Download = Callable[[str, int], Awaitable[bool]]
"""Fetch the probe file from (addr, port); True if it came back whole."""


def http_download(path: str, size_bytes: int, timeout_s: float) -> Download:
    async def download(addr: str, port: int) -> bool:
        status, nbytes, _, _ = await fetch(Target(addr, port, timeout_s), path)
        return status == 200 and nbytes == size_bytes

    return download


async def run_prober(
    schedule: ProbeSchedule,
    targets: TargetsFile,
    download: Download,
    out: TextIO,
    start_at: float,
    timeout_s: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Probe until the schedule's duration; ``start_at`` is the run clock's origin."""
    hard_stop = start_at + schedule.duration_s + timeout_s + 1.0
    addrs: dict[str, tuple[str, int]] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def one(iid: str, addr: str, port: int) -> None:
        t0 = monotonic()
        try:
            ok = await asyncio.wait_for(download(addr, port), timeout_s)
        except (
            TimeoutError,
            OSError,
            ValueError,
            IndexError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            ok = False
        t1 = monotonic()
        out.write(format_record(ProbeRecord(t0 - start_at, iid, t1 - t0, ok)))
        out.flush()
        schedule.finished(iid, t1 - start_at)

    if (wait := start_at - monotonic()) > 0:
        await asyncio.sleep(wait)
    while (now_s := monotonic() - start_at) < schedule.duration_s:
        new = targets.changed()
        if new is not None:
            addrs = new
            schedule.sync(addrs, now_s)
        for iid in schedule.due(now_s):
            addr, port = addrs[iid]
            task = asyncio.create_task(one(iid, addr, port))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        sleep_s = min(schedule.next_due_s(), schedule.duration_s) - now_s
        await asyncio.sleep(min(max(sleep_s, 0.001), POLL_TARGETS_S))
    if tasks:
        await asyncio.wait(set(tasks), timeout=max(0.0, hard_stop - monotonic()))
    for task in list(tasks):
        task.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="quell-prober")
    ap.add_argument("--targets", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start-at", type=float, required=True, help="CLOCK_MONOTONIC seconds")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--period", type=float, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--size", type=int, required=True, help="probe file size in bytes")
    ap.add_argument("--path", default=PROBE_PATH)
    args = ap.parse_args(argv)
    if args.period <= 0 or args.duration <= 0 or args.timeout <= 0 or args.size <= 0:
        print("quell-prober: period, duration, timeout and size must be > 0", file=sys.stderr)
        return 2
    schedule = ProbeSchedule(args.period, args.duration, component_rng(args.seed, RNG_NAME))
    with open(args.out, "a") as out:
        asyncio.run(
            run_prober(
                schedule,
                TargetsFile(args.targets),
                http_download(args.path, args.size, args.timeout),
                out,
                args.start_at,
                args.timeout,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

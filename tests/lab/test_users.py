"""Closed-loop users against a real HTTP/1.1 server on loopback (no root, no lab): kept-alive
connections reused and reopened when the server closes them, one per request without
keep-alive, each user's requests and think times as drawn, and the bounds."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from quell.lab.connection import Target
from quell.lab.request_log import UserRequest, parse_line, parse_user_line, record_tail
from quell.lab.users import UserTally, read_population, run_users, write_population
from quell.workload.population import Population
from tests.lab.httpd import TinyServer, server_thread
from tests.workload.build import population as users_of

ROOT = Path(__file__).resolve().parents[2]


def population(**over: Any) -> Population:
    """Five users on paths that name their answer's size, for about a second."""
    small = {"users": 5, "think_time_s": 0.02, "ramp_s": 0.1, "duration_s": 1.0}
    mix = {"paths": ("/100", "/2000", "/30000"), "weights": (3.0, 2.0, 1.0)}
    return users_of(**(small | mix | {"max_requests": 100_000, "seed": 11} | over))


def run(
    pop: Population,
    server: TinyServer,
    timeout_s: float = 2.0,
    hard_stop_after_s: float | None = None,
) -> tuple[list[UserRequest], UserTally, float]:
    """Run the users against ``server``; their log lines, tally and the seconds it took."""

    async def go() -> tuple[UserTally, float]:
        port = await server.start()
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.02
        hard = start + (hard_stop_after_s or pop.duration_s + timeout_s + 2.0)
        tally = await run_users(pop, Target("127.0.0.1", port, timeout_s), start, out, hard)
        took = loop.time() - start
        await server.stop()
        return tally, took

    out = io.StringIO()
    tally, took = asyncio.run(go())
    lines = out.getvalue().splitlines()
    parsed = [parse_user_line(line) for line in lines]
    assert all(p is not None for p in parsed), lines
    return [p for p in parsed if p is not None], tally, took


def kinds(reqs: list[UserRequest]) -> Counter[str]:
    return Counter(r.conn for r in reqs)


def test_a_user_keeps_its_connection_while_the_server_keeps_it_open() -> None:
    server = TinyServer(idle_s=30.0)
    reqs, tally, _ = run(population(duration_s=0.6), server)
    assert len(reqs) > 50
    assert kinds(reqs) == {"new": 5, "reused": len(reqs) - 5}
    assert server.accepted == 5 and tally.reconnects == 0
    assert all(r.record.status == 200 and r.record.server == "s1" for r in reqs)
    assert {r.record.bytes for r in reqs} == {100, 2000, 30000}
    assert tally.requests == len(reqs) == server.requests and tally.errors == 0


def test_connections_the_server_closed_while_users_thought_are_reopened() -> None:
    # the server drops a connection idle for 50 ms; users think Exp(100 ms): P(think > 50 ms)
    # is 0.61, so most requests need a new connection, and every one is counted
    server = TinyServer(idle_s=0.05)
    reqs, tally, _ = run(population(think_time_s=0.1, duration_s=1.2), server)
    k = kinds(reqs)
    assert k["new"] == 5
    assert k["reopened"] + k["retried"] == tally.reconnects
    assert 0.3 * len(reqs) < tally.reconnects < 0.9 * len(reqs), k
    assert server.accepted == k["new"] + tally.reconnects
    assert tally.errors == 0 and all(r.record.status == 200 for r in reqs)


def test_without_keep_alive_every_request_has_its_own_connection() -> None:
    server = TinyServer()
    reqs, tally, _ = run(population(keepalive=False, duration_s=0.5), server)
    assert kinds(reqs) == {"new": len(reqs)}
    assert server.accepted == server.close_requested == len(reqs) and tally.reconnects == 0


def test_each_user_asks_for_what_it_drew_and_thinks_after_the_whole_answer() -> None:
    pop = population(think_time_s=0.05, duration_s=1.2, ramp_s=0.4)
    server = TinyServer(delay_s=0.01)
    reqs, _, _ = run(pop, server)
    size = {p: int(p[1:]) for p in pop.paths}
    errors = []
    for user in range(pop.users):
        mine = [r.record for r in reqs if r.user == user]
        draws = pop.draws(user)
        drawn = [draws.next() for _ in mine]
        assert [r.bytes for r in mine] == [size[pop.paths[p]] for p, _ in drawn]
        # from an answer's end to the next send: the think time drawn, never less
        for r, nxt, (_, think) in zip(mine, mine[1:], drawn, strict=False):
            assert r.latency_s is not None and r.latency_s >= 0.01
            gap = nxt.send_s - (r.send_s + r.latency_s)
            assert gap >= think - 1e-3
            errors.append(gap - think)
    assert len(errors) > 50 and sorted(errors)[len(errors) // 2] < 0.005
    starts = sorted(min(r.record.send_s for r in reqs if r.user == u) for u in range(pop.users))
    # evenly over the 0.4 s ramp: 0, 0.08, ... 0.32
    assert starts == pytest.approx([0.0, 0.08, 0.16, 0.24, 0.32], abs=0.02)


def test_no_request_after_the_duration_and_the_run_ends_by_itself() -> None:
    pop = population(think_time_s=0.05, duration_s=0.6)
    reqs, _, took = run(pop, TinyServer(delay_s=0.02))
    assert max(r.record.send_s for r in reqs) < 0.6
    assert took < 0.6 + 0.02 + 0.1  # the last answer, and the users that stop at once


def test_never_more_than_max_requests() -> None:
    server = TinyServer()
    reqs, tally, _ = run(population(think_time_s=0.0, max_requests=37, duration_s=5.0), server)
    assert len(reqs) == tally.requests == server.requests == 37


def test_unanswered_requests_time_out_and_the_hard_stop_cuts_the_rest() -> None:
    reqs, tally, took = run(population(duration_s=0.4), TinyServer(answer=False), timeout_s=0.2)
    assert reqs and all(r.record.error == "timeout" and r.record.latency_s is None for r in reqs)
    assert tally.errors == len(reqs)
    assert all(r.conn in ("new", "reopened") for r in reqs)  # a timed-out connection is dropped
    assert took < 0.4 + 0.2 + 0.1
    reqs, _, took = run(
        population(duration_s=5.0), TinyServer(answer=False), timeout_s=10.0, hard_stop_after_s=0.3
    )
    assert reqs == [] and 0.3 <= took < 0.5


def test_the_generator_runs_users_from_their_file_and_reports_on_exit(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    write_population(users, population())
    assert read_population(users, 1.0) == population()
    out = tmp_path / "requests.csv"
    server = TinyServer()
    with server_thread(server) as port:
        start_at = time.monotonic() + 1.0  # after the interpreter's start
        proc = subprocess.run(
            [sys.executable, "-m", "quell.lab.loadgen", "--users", str(users), "--out", str(out),
             "--port", str(port), "--start-at", repr(start_at), "--duration", "1.0",
             "--timeout", "2"],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["mode"] == "closed" and report["users"] == 5
    assert report["reconnects"] == 0 and report["errors"] == 0
    assert report["conn"] == {"new": 5, "reused": report["requests"] - 5}
    assert 0.9 < report["stopped_s"] < 1.2 and report["run_cpu_s"] > 0
    records = record_tail(out).read()  # the interval reader takes the closed-loop lines too
    assert len(records) == report["requests"] == server.requests
    lines = out.read_text().splitlines()
    assert [parse_line(line) for line in lines] == records

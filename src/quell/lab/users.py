"""Closed-loop users over real connections: the load generator's second mode
(``python -m quell.lab.loadgen --users FILE``).

Each user of the ``Population`` starts at its point of the ramp, then loops: take a ticket
(none at or after the run's duration, at most ``max_requests`` in all), send a request for the
path it drew, wait for the whole answer (at most the timeout), log it, think the time it drew,
repeat. With keep-alive a user keeps one HTTP/1.1 connection and opens a new one only when the
last was closed (by the peer while it thought, by an answer that did not keep it alive, after
an error), or when the peer closes it just as a request goes out (sent once more on a new
connection, as browsers do); each request's log line says which (``request_log.ConnKind``).
Without keep-alive every request has its own connection. A user whose think would end at or
after the duration stops at once, so the process exits by itself about one response time
after the duration; ``hard_stop`` cuts whatever is left."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from quell.lab.balancer import SERVER_HEADER
from quell.lab.connection import Answer, BadAnswerError, ClosedBeforeAnswerError, Connection, Target
from quell.lab.request_log import RECONNECT_KINDS, ConnKind, format_record
from quell.workload.population import Population, RequestBudget, ThinkModulation

_FILE_FIELDS = (
    "users",
    "think_time_s",
    "ramp_s",
    "keepalive",
    "paths",
    "weights",
    "max_requests",
    "seed",
)


def write_population(path: Path, pop: Population) -> None:
    """The users for the generator to run; the run's duration goes on its command line."""
    data: dict[str, object] = {name: getattr(pop, name) for name in _FILE_FIELDS}
    if pop.think_modulation is not None:
        data["think_modulation"] = pop.think_modulation.as_dict()
    path.write_text(json.dumps(data))


def read_population(path: Path, duration_s: float) -> Population:
    data = json.loads(path.read_text())
    modulation = data.get("think_modulation")
    return Population(
        users=int(data["users"]),
        think_time_s=float(data["think_time_s"]),
        ramp_s=float(data["ramp_s"]),
        keepalive=bool(data["keepalive"]),
        paths=tuple(str(p) for p in data["paths"]),
        weights=tuple(float(w) for w in data["weights"]),
        duration_s=duration_s,
        max_requests=int(data["max_requests"]),
        seed=int(data["seed"]),
        think_modulation=ThinkModulation.from_dict(modulation) if modulation else None,
    )


@dataclass
class UserTally:
    """What the users did: requests, failed ones, and how each got its connection."""

    requests: int = 0
    errors: int = 0
    conn: Counter[str] = field(default_factory=Counter)

    @property
    def reconnects(self) -> int:
        return sum(self.conn[k] for k in RECONNECT_KINDS)

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "conn": dict(self.conn),
            "reconnects": self.reconnects,
        }


@dataclass
class _Exchange:
    """One request's outcome, and the connection to keep for the next (None: none)."""

    conn: Connection | None
    kind: ConnKind
    answer: Answer | None
    error: str


async def _exchange(
    conn: Connection | None,
    first: bool,
    path: str,
    target: Target,
    keepalive: bool,
    deadline: float,
) -> _Exchange:
    if not keepalive:
        kind: ConnKind = "new"
    elif conn is not None and conn.open:
        kind = "reused"
    else:
        kind = "new" if first else "reopened"
    try:
        async with asyncio.timeout_at(deadline):
            if conn is None or kind != "reused":
                conn = await Connection.connect(target.host, target.port, SERVER_HEADER)
            try:
                answer = await conn.request(path, keepalive)
            except ClosedBeforeAnswerError:
                if kind != "reused":
                    raise
                kind = "retried"  # the peer's idle timeout crossed the request
                conn = await Connection.connect(target.host, target.port, SERVER_HEADER)
                answer = await conn.request(path, keepalive)
    except TimeoutError:
        if conn is not None:
            conn.abort()
        return _Exchange(None, kind, None, "timeout")
    except (OSError, BadAnswerError) as exc:
        if conn is not None:
            conn.abort()
        return _Exchange(None, kind, None, type(exc).__name__)
    return _Exchange(conn if conn.open else None, kind, answer, "")


async def run_users(
    pop: Population, target: Target, start_at: float, out: TextIO, hard_stop: float
) -> UserTally:
    """Run ``pop`` against ``target`` from ``start_at`` (the event loop's clock, monotonic)
    until every user has stopped or ``hard_stop``; one line per request to ``out``."""
    loop = asyncio.get_running_loop()
    budget = RequestBudget(pop.max_requests, pop.duration_s)
    tally = UserTally()
    tasks: set[asyncio.Task[None]] = set()

    async def user(k: int) -> None:
        draws = pop.draws(k)
        conn: Connection | None = None
        first = True
        try:
            while budget.take(loop.time() - start_at):
                path_index, think_s = draws.next()
                t0 = loop.time()
                ex = await _exchange(
                    conn, first, pop.paths[path_index], target, pop.keepalive, t0 + target.timeout_s
                )
                t1 = loop.time()
                first = False
                conn = ex.conn
                tally.requests += 1
                tally.conn[ex.kind] += 1
                if ex.answer is None:
                    tally.errors += 1
                    line = format_record(t0 - start_at, None, 0, 0, "", ex.error)
                else:
                    a = ex.answer
                    line = format_record(
                        t0 - start_at, t1 - t0, a.status, a.body_bytes, a.server, ""
                    )
                out.write(f"{line},{k},{ex.kind}\n")
                wake_s = pop.think_end_s(t1 - start_at, think_s)
                if not budget.wakes_in_time(wake_s):
                    break
                if wake_s > t1 - start_at:
                    await asyncio.sleep(wake_s - (t1 - start_at))
        finally:
            if conn is not None:
                conn.close()

    async def starter() -> None:
        for k in range(pop.users):
            delay = start_at + pop.start_s(k) - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not budget.wakes_in_time(loop.time() - start_at):
                return
            task = asyncio.create_task(user(k))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.1)
            out.flush()

    flush_task = asyncio.create_task(flusher())
    start_task = asyncio.create_task(starter())
    await asyncio.wait({start_task}, timeout=max(0.0, hard_stop - loop.time()))
    if tasks:
        await asyncio.wait(set(tasks), timeout=max(0.0, hard_stop - loop.time()))
    left = [start_task, *tasks]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)  # their connections close
    flush_task.cancel()
    out.flush()
    return tally

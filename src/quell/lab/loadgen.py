"""The lab's load generator, in two modes. It runs as its own process inside the client
namespace (``python -m quell.lab.loadgen``) and appends one CSV line per request to its output
file (``quell.lab.request_log``), flushed several times a second, so the runner can read
results as they come.

* **Open loop** (``--schedule``): replays a precomputed request schedule exactly, firing every
  request at its scheduled time on its own connection whatever happened to earlier ones.
  Bounded: at most the schedule's requests, never more than ``--max-inflight`` at once.
* **Closed loop** (``--users``): a population of users, each waiting for its answer and
  thinking before its next request, on kept-alive connections (``quell.lab.users``). Bounded:
  no request at or after the duration, at most ``max_requests`` in all.

Either way it exits by ``start + duration + timeout + 2`` seconds whatever happens, and prints
one JSON line on exit: what it sent and the CPU time it used."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from quell.lab.balancer import SERVER_HEADER
from quell.lab.connection import Target
from quell.lab.request_log import format_record
from quell.lab.users import read_population, run_users


def write_schedule(
    path: Path, times_s: np.ndarray, path_index: np.ndarray, paths: list[str]
) -> None:
    np.savez(path, times_s=times_s, path_index=path_index, paths=np.array(json.dumps(paths)))


_HEAD_LIMIT = 64 * 1024


async def fetch(target: Target, path: str, request_id: int = -1) -> tuple[int, int, str, str]:
    """One request on its own connection: (status, body bytes, server, error). A
    ``request_id`` >= 0 (the request's index in the schedule) goes out as ``X-Request-Id``, so
    an instrumented server's records name the request."""
    rid = f"X-Request-Id: {request_id}\r\n" if request_id >= 0 else ""
    reader, writer = await asyncio.open_connection(target.host, target.port, limit=_HEAD_LIMIT)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {target.host}\r\nAccept-Encoding: gzip\r\n"
            f"User-Agent: quell-loadgen\r\n{rid}Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        server = ""
        key = SERVER_HEADER.lower() + ":"
        for h in lines[1:]:
            if h.lower().startswith(key):
                server = h.split(":", 1)[1].strip()
        nbytes = 0
        while chunk := await reader.read(1 << 16):
            nbytes += len(chunk)
        return status, nbytes, server, ""
    finally:
        writer.close()


async def replay(
    times_s: np.ndarray,
    path_index: np.ndarray,
    paths: list[str],
    target: Target,
    start_at: float,
    out: TextIO,
    max_inflight: int,
    hard_stop: float,
) -> int:
    """Replay the schedule; returns the number of requests logged."""
    inflight = 0
    logged = 0

    def record(
        send_s: float, lat: float | None, status: int, nbytes: int, server: str, err: str
    ) -> None:
        nonlocal logged
        logged += 1
        out.write(format_record(send_s, lat, status, nbytes, server, err) + "\n")

    async def one(path: str, request_id: int) -> None:
        nonlocal inflight
        t0 = time.monotonic()
        try:
            status, nbytes, server, err = await asyncio.wait_for(
                fetch(target, path, request_id), target.timeout_s
            )
            record(t0 - start_at, time.monotonic() - t0, status, nbytes, server, err)
        except TimeoutError:
            record(t0 - start_at, None, 0, 0, "", "timeout")
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
            IndexError,
        ) as exc:
            record(t0 - start_at, None, 0, 0, "", type(exc).__name__)
        finally:
            inflight -= 1

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.1)
            out.flush()

    flush_task = asyncio.create_task(flusher())
    tasks: set[asyncio.Task[None]] = set()
    for i, (t, k) in enumerate(zip(times_s.tolist(), path_index.tolist(), strict=True)):
        now = time.monotonic()
        if now >= hard_stop:
            break
        delay = start_at + t - now
        if delay > 0:
            await asyncio.sleep(delay)
        if inflight >= max_inflight:
            record(time.monotonic() - start_at, None, 0, 0, "", "client_overload")
            continue
        inflight += 1
        task = asyncio.create_task(one(paths[k], i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(set(tasks), timeout=max(0.0, hard_stop - time.monotonic()))
    for task in list(tasks):
        task.cancel()
    flush_task.cancel()
    out.flush()
    return logged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="quell-loadgen")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--schedule", type=Path, help="open loop: the schedule to replay (.npz)")
    mode.add_argument("--users", type=Path, help="closed loop: the users to run (.json)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--start-at", type=float, required=True, help="CLOCK_MONOTONIC seconds")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--max-inflight", type=int, default=4000)
    args = ap.parse_args(argv)
    target = Target(args.host, args.port, args.timeout)
    hard_stop = args.start_at + args.duration + args.timeout + 2.0
    report: dict[str, object]
    cpu_before_s = time.process_time()
    with open(args.out, "a", buffering=1 << 16) as out:
        if args.users is not None:
            pop = read_population(args.users, args.duration)
            tally = asyncio.run(run_users(pop, target, args.start_at, out, hard_stop))
            report = {"mode": "closed", "users": pop.users, **tally.as_dict()}
        else:
            data = np.load(args.schedule)
            paths = json.loads(str(data["paths"]))
            logged = asyncio.run(
                replay(
                    data["times_s"],
                    data["path_index"],
                    paths,
                    target,
                    args.start_at,
                    out,
                    args.max_inflight,
                    hard_stop,
                )
            )
            report = {"mode": "open", "requests": logged}
    run_cpu_s = time.process_time() - cpu_before_s
    report |= {
        "stopped_s": round(time.monotonic() - args.start_at, 3),
        "run_cpu_s": round(run_cpu_s, 3),
        "cpu_s": round(time.process_time(), 3),
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

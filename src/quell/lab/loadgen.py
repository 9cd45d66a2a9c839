"""The built-in open-loop load generator: replays a precomputed request schedule exactly.

It runs as its own process inside the client namespace (``python -m quell.lab.loadgen``), fires
every request at its scheduled time whatever happened to earlier ones, and appends one CSV line
per request (send time, latency, status, bytes, answering instance, error) to its output file,
flushed several times a second, so the runner can read results as they come. Bounded: it sends
at most the schedule's requests, never more than ``--max-inflight`` at once, and exits by
``start + duration + timeout + 2`` seconds whatever happens."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TextIO, TypeVar

import numpy as np

from quell.lab.balancer import SERVER_HEADER
from quell.store.run import RequestRecord

T = TypeVar("T")

CSV_FIELDS = ("send_s", "latency_s", "status", "bytes", "server", "error")


def write_schedule(
    path: Path, times_s: np.ndarray, path_index: np.ndarray, paths: list[str]
) -> None:
    np.savez(path, times_s=times_s, path_index=path_index, paths=np.array(json.dumps(paths)))


def parse_line(line: str) -> RequestRecord | None:
    parts = line.rstrip("\n").split(",")
    if len(parts) != len(CSV_FIELDS):
        return None
    send, lat, status, nbytes, server, error = parts
    try:
        return RequestRecord(
            float(send), float(lat) if lat else None, int(status), int(nbytes), server, error
        )
    except ValueError:
        return None


class LineTail(Generic[T]):
    """Reads the complete lines appended to a growing CSV file since the last call, parsed
    by ``parse`` (lines it rejects with None are skipped)."""

    def __init__(self, path: Path, parse: Callable[[str], T | None]) -> None:
        self.path = path
        self.parse = parse
        self._offset = 0
        self._partial = ""

    def read(self) -> list[T]:
        try:
            with open(self.path) as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return []
        data = self._partial + data
        lines = data.split("\n")
        self._partial = lines.pop()
        return [r for r in map(self.parse, lines) if r is not None]


def record_tail(path: Path) -> LineTail[RequestRecord]:
    """Reads the request records the generator appended since the last call."""
    return LineTail(path, parse_line)


@dataclass
class Target:
    host: str
    port: int
    timeout_s: float


_HEAD_LIMIT = 64 * 1024


async def fetch(target: Target, path: str) -> tuple[int, int, str, str]:
    """One request on its own connection: (status, body bytes, server, error)."""
    reader, writer = await asyncio.open_connection(target.host, target.port, limit=_HEAD_LIMIT)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {target.host}\r\nAccept-Encoding: gzip\r\n"
            "User-Agent: quell-loadgen\r\nConnection: close\r\n\r\n".encode()
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
) -> None:
    inflight = 0

    def record(
        send_s: float, lat: float | None, status: int, nbytes: int, server: str, err: str
    ) -> None:
        lat_text = f"{lat:.6f}" if lat is not None else ""
        out.write(f"{send_s:.6f},{lat_text},{status},{nbytes},{server},{err}\n")

    async def one(path: str) -> None:
        nonlocal inflight
        t0 = time.monotonic()
        try:
            status, nbytes, server, err = await asyncio.wait_for(
                fetch(target, path), target.timeout_s
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
    for t, k in zip(times_s.tolist(), path_index.tolist(), strict=True):
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
        task = asyncio.create_task(one(paths[k]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(set(tasks), timeout=max(0.0, hard_stop - time.monotonic()))
    for task in list(tasks):
        task.cancel()
    flush_task.cancel()
    out.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="quell-loadgen")
    ap.add_argument("--schedule", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--start-at", type=float, required=True, help="CLOCK_MONOTONIC seconds")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--max-inflight", type=int, default=4000)
    args = ap.parse_args(argv)
    data = np.load(args.schedule)
    paths = json.loads(str(data["paths"]))
    target = Target(args.host, args.port, args.timeout)
    hard_stop = args.start_at + args.duration + args.timeout + 2.0
    with open(args.out, "a", buffering=1 << 16) as out:
        asyncio.run(
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ASGI middleware on a tiny ASGI app driven in-process: each request's token counts its
own steps only, even when two requests interleave on one event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quell.instrument import token as qt
from quell.instrument.asgi import Message, Scope, TokenMiddleware, request_id
from tests.instrument.conftest import in_thread, spin_cpu

MS = 1_000_000


def scope(path: str, headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"") -> Scope:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": headers or [],
        "query_string": query,
    }


async def app(scope: Scope, receive: Any, send: Any) -> None:
    """Spins ``cpu`` ms per step for ``steps`` steps, sleeping ``sleep`` ms between them."""
    q = dict(kv.split("=") for kv in scope["query_string"].decode().split("&") if kv)
    cpu, steps, sleep = float(q.get("cpu", 0)), int(q.get("steps", 1)), float(q.get("sleep", 0))
    await receive()
    for i in range(steps):
        spin_cpu(cpu / 1000)
        if i < steps - 1:
            await asyncio.sleep(sleep / 1000)
    if scope["path"] == "/boom":
        raise RuntimeError("boom")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def serve(lib: qt.TokenLibrary, scopes: list[Scope]) -> tuple[list[Any], list[qt.Reading], int]:
    """Run the requests concurrently on one event loop in a fresh thread; the readings in the
    order the requests ended and the thread's CPU time over the whole."""
    readings: list[qt.Reading] = []
    mw = TokenMiddleware(app, library=lib, on_end=lambda s, r: readings.append(r))

    async def one(sc: Scope) -> list[Message]:
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(m: Message) -> None:
            sent.append(m)

        await mw(sc, receive, send)
        return sent

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(one(s) for s in scopes), return_exceptions=True))

    def run() -> tuple[list[Any], list[qt.Reading], int]:
        before = lib.snapshot()
        out = asyncio.run(main())
        return out, readings, lib.snapshot().cpu_ns - before.cpu_ns

    return in_thread(run)


def test_interleaved_requests_each_count_their_own_steps(lib: qt.TokenLibrary) -> None:
    a = scope("/a", [(b"X-Request-Id", b"11")], b"cpu=20&steps=3&sleep=5")
    b = scope("/b", query=b"rid=12&cpu=30&steps=2&sleep=5")
    out, readings, thread_cpu = serve(lib, [a, b])
    assert all(isinstance(o, list) and o[0]["status"] == 200 for o in out)
    by_id = {r.request_id: r for r in readings}
    ra, rb = by_id[11], by_id[12]
    assert (ra.request_class, rb.request_class) == ("/a", "/b")
    assert 60 * MS <= ra.cpu_ns <= 66 * MS  # 3 x 20 ms, not B's 60 ms
    assert 60 * MS <= rb.cpu_ns <= 66 * MS
    assert ra.yields >= 3 and rb.yields >= 2  # one per step at least
    # the two requests ran interleaved: each one's wall holds the other's CPU
    assert ra.wall_ns >= 100 * MS and rb.wall_ns >= 80 * MS
    assert ra.cpu_ns + rb.cpu_ns <= thread_cpu


def test_an_app_error_ends_the_token_and_propagates(lib: qt.TokenLibrary) -> None:
    out, readings, _ = serve(lib, [scope("/boom", query=b"cpu=5")])
    assert isinstance(out[0], RuntimeError)
    assert len(readings) == 1 and readings[0].state == "ended"
    assert readings[0].cpu_ns >= 5 * MS


def test_other_scopes_pass_through(lib: qt.TokenLibrary) -> None:
    seen: list[str] = []

    async def lifespan_app(scope: Scope, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    mw = TokenMiddleware(lifespan_app, library=lib, on_end=lambda s, r: seen.append("token"))
    in_thread(lambda: asyncio.run(mw({"type": "lifespan"}, None, None)))  # type: ignore[arg-type]
    assert seen == ["lifespan"]


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        ([(b"x-request-id", b"5")], b"rid=6", 5),
        ([(b"X-REQUEST-ID", b"7")], b"", 7),
        ([], b"a=1&rid=8", 8),
        ([(b"x-request-id", b"zz")], b"rid=9", 9),
        ([], b"rid=x", -1),
        ([], b"", -1),
    ],
)
def test_the_request_id(headers: list[tuple[bytes, bytes]], query: bytes, expected: int) -> None:
    assert request_id(scope("/", headers, query)) == expected

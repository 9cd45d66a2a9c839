"""A tiny HTTP/1.1 server on loopback for the load generator's tests (no root, no lab): it
answers ``GET /<n>`` with n bytes, names itself in ``X-Quell-Server``, keeps connections alive
and closes one that stays idle for ``idle_s``, as lighttpd and nginx do."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class TinyServer:
    idle_s: float = 30.0
    delay_s: float = 0.0
    """Wait before each answer."""
    answer: bool = True
    """False: read requests and never answer."""
    name: str = "s1"
    accepted: int = 0
    requests: int = 0
    close_requested: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_s)
                except (TimeoutError, asyncio.IncompleteReadError):
                    break
                self.requests += 1
                if not self.answer:
                    await asyncio.sleep(3600)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                path = head.split(b" ", 2)[1].decode()
                size = int(path.lstrip("/") or 0)
                close = b"connection: close" in head.lower()
                self.close_requested += close
                writer.write(
                    f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nX-Quell-Server: {self.name}\r\n"
                    f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n".encode()
                    + b"x" * size
                )
                await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@contextlib.contextmanager
def server_thread(server: TinyServer) -> Iterator[int]:
    """Run ``server`` on its own event loop in a thread; yields its port."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield server.port
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()

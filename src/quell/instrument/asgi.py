"""An ASGI middleware that keeps a quelltoken per HTTP request.

Many requests share one event-loop thread, so the token must count only the request's own
steps: the middleware drives the app's coroutine itself and resumes the token around each step
(each ``send`` into the coroutine, up to its next suspension) and yields it while the coroutine
is suspended, so CPU time, run-queue wait and switches land on the request that ran, and time
spent awaiting (I/O, other requests' steps) is wall time only. The request id is the
``X-Request-Id`` header, else a ``rid=`` query parameter, else -1; the class is the path.
Work the app hands to other threads (``run_in_executor``) is not counted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from quell.instrument.token import Reading, TokenLibrary, default_library

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
OnEnd = Callable[[Scope, Reading], None]


def request_id(scope: Scope, header: bytes = b"x-request-id") -> int:
    """The request's id: the header (case-insensitive), else ``rid=`` in the query, else -1."""
    for name, value in scope.get("headers", ()):
        if name.lower() == header:
            try:
                return int(value)
            except ValueError:
                break
    query = scope.get("query_string", b"")
    for key, value in parse_qsl(query.decode("latin-1")):
        if key == "rid":
            try:
                return int(value)
            except ValueError:
                return -1
    return -1


class _Stepped:
    """Awaiting it runs ``coro`` with the token running during each step and yielded between
    them. The token is running when it starts and yielded when it finishes."""

    __slots__ = ("coro", "lib", "tok")

    def __init__(self, coro: Coroutine[Any, Any, Any], lib: TokenLibrary, tok: int) -> None:
        self.coro = coro
        self.lib = lib
        self.tok = tok

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, lib, tok = self.coro, self.lib, self.tok
        value: Any = None
        error: BaseException | None = None
        first = True
        while True:
            if not first:
                lib.resume(tok)
            first = False
            try:
                suspended = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                lib.yield_(tok)
                return stop.value
            except BaseException:
                lib.yield_(tok)
                raise
            lib.yield_(tok)
            try:
                value, error = (yield suspended), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation or error thrown into the task
                value, error = None, exc


class TokenMiddleware:
    """``app = TokenMiddleware(app)``: a token per HTTP request (other scopes pass through).
    ``on_end(scope, reading)`` is called with what each request's token saw; with
    ``$QUELL_TOKEN_LOG_DIR`` set the library also writes each record to the thread's log."""

    def __init__(
        self,
        app: App,
        library: TokenLibrary | None = None,
        on_end: OnEnd | None = None,
        header: str = "x-request-id",
    ) -> None:
        self.app = app
        self.library = library
        self.on_end = on_end
        self.header = header.lower().encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        lib = self.library if self.library is not None else default_library()
        tok = lib.start(request_id(scope, self.header), str(scope.get("path", "")))
        try:
            coro = self.app(scope, receive, send)
            if not isinstance(coro, Coroutine):  # an awaitable that is not a coroutine
                lib.yield_(tok)
                await coro
            else:
                await _Stepped(coro, lib, tok)
        finally:
            lib.end(tok)
            if self.on_end is not None:
                self.on_end(scope, lib.read(tok))

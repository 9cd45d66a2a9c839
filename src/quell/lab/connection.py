"""One HTTP/1.1 client connection that can be kept alive: requests go one at a time, each answer
is read to its end by its framing (Content-Length, chunked, or until the peer closes), and the
connection knows when the peer has closed it, so the caller can reconnect instead of sending
into a dead socket.

The parser (``ResponseParser``) is pure, fed bytes as they come; ``Connection`` is an asyncio
protocol around it (no stream objects in between: a closed loop of thousands of requests per
second spends its CPU here)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

HEAD_LIMIT_BYTES = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


@dataclass(frozen=True)
class Target:
    """Where the load generator sends its requests, and how long it waits for each answer."""

    host: str
    port: int
    timeout_s: float


class ClosedBeforeAnswerError(ConnectionError):
    """The peer closed the connection before the first byte of the answer: on a kept-alive
    connection, the peer's idle timeout crossed the request (safe to send again)."""


class IncompleteAnswerError(ConnectionError):
    """The peer closed the connection part-way through an answer."""

    def __init__(self, received_bytes: int) -> None:
        self.received_bytes = received_bytes
        super().__init__(f"closed after {received_bytes} bytes of the answer")


class BadAnswerError(ValueError):
    """The answer is not HTTP/1.x as this client reads it."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete answer: its status, its body's length (as sent: compressed if compressed,
    without chunk framing), the value of the header naming who answered, and whether the
    connection may carry another request."""

    status: int
    body_bytes: int
    server: str
    keep_alive: bool


def _head_fields(head: bytes, server_header: bytes) -> tuple[int, int | None, bool, bool, str]:
    """(status, content length or None, chunked, keep-alive, server) of a response head."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise BadAnswerError(f"bad status line {lines[0][:80]!r}")
    status = int(parts[1])
    keep_alive = parts[0] == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    server = ""
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip().lower()
        if key == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise BadAnswerError(f"bad Content-Length {value[:40]!r}") from None
        elif key == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif key == b"connection":
            tokens = value.lower()
            if b"close" in tokens:
                keep_alive = False
            elif b"keep-alive" in tokens:
                keep_alive = True
        elif key == server_header:
            server = value.strip().decode("latin-1")
    return status, length, chunked, keep_alive, server


class ResponseParser:
    """Reads one response at a time from the bytes of a connection. ``feed`` returns the
    ``Answer`` once the response is complete (bytes past it are an error: requests are not
    pipelined); ``eof`` says what the peer's close means for the response under way."""

    def __init__(self, server_header: str) -> None:
        self._server_header = server_header.lower().encode()
        self.reset()

    def reset(self) -> None:
        """Expect a new response."""
        self._buf = b""
        # head | length | chunk-size | chunk-data | chunk-end | trailer | eof | done
        self._state = "head"
        self._remaining = 0
        self._body = 0
        self._received = 0
        self._fields: tuple[int, str, bool] = (0, "", False)

    @property
    def started(self) -> bool:
        """Whether any byte of the response has arrived."""
        return self._received > 0

    def _answer(self) -> Answer:
        status, server, keep_alive = self._fields
        self._state = "done"
        return Answer(status, self._body, server, keep_alive)

    def feed(self, data: bytes) -> Answer | None:
        """Take the next bytes; the answer once it is complete, else None."""
        self._received += len(data)
        if self._state == "done":
            raise BadAnswerError("bytes after a complete answer")
        if self._state == "length" and not self._buf and len(data) < self._remaining:
            # the common case: part of a body of known length; count it and go on
            self._remaining -= len(data)
            self._body += len(data)
            return None
        buf = self._buf + data if self._buf else data
        self._buf = b""
        n = len(buf)
        pos = 0  # where the unread bytes start (the buffer is not sliced as it is read)
        while True:
            state = self._state
            if state == "chunk-data" or state == "length":
                take = min(n - pos, self._remaining)
                self._remaining -= take
                self._body += take
                pos += take
                if self._remaining:
                    return None
                if state == "length":
                    if pos < n:
                        raise BadAnswerError("bytes after a complete answer")
                    return self._answer()
                self._state = "chunk-end"
            elif state == "chunk-size" or state == "trailer":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    self._buf = buf[pos:]
                    return None
                line = buf[pos:end]
                pos = end + 2
                if state == "trailer":
                    if not line:
                        if pos < n:
                            raise BadAnswerError("bytes after a complete answer")
                        return self._answer()
                    continue
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise BadAnswerError(f"bad chunk size {size_text[:20]!r}") from None
                self._state = "chunk-data" if size else "trailer"
                self._remaining = size
            elif state == "chunk-end":
                if n - pos < 2:
                    self._buf = buf[pos:]
                    return None
                if buf[pos : pos + 2] != b"\r\n":
                    raise BadAnswerError("chunk not followed by CRLF")
                pos += 2
                self._state = "chunk-size"
            elif state == "head":
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > HEAD_LIMIT_BYTES:
                        raise BadAnswerError(f"response head longer than {HEAD_LIMIT_BYTES} bytes")
                    self._buf = buf[pos:]
                    return None
                status, length, chunked, keep_alive, server = _head_fields(
                    buf[pos:end], self._server_header
                )
                pos = end + 4
                if 100 <= status < 200:
                    continue  # an interim answer: the real one follows
                self._fields = (status, server, keep_alive)
                if status in _NO_BODY_STATUS:
                    self._state = "length"
                    self._remaining = 0
                elif chunked:
                    self._state = "chunk-size"
                elif length is not None:
                    self._state = "length"
                    self._remaining = length
                else:
                    self._state = "eof"
                    self._fields = (status, server, False)
            else:  # eof: the body runs until the peer closes
                self._body += n - pos
                return None

    def eof(self) -> Answer:
        """The peer closed: the answer, if the close ends it; else the error it is."""
        if self._state == "eof":
            return self._answer()
        if not self.started:
            raise ClosedBeforeAnswerError("closed before the answer")
        raise IncompleteAnswerError(self._received)


class Connection(asyncio.Protocol):
    """An HTTP/1.1 client connection. ``request`` sends one GET and waits for its answer;
    ``open`` is False once the peer has closed or the connection failed."""

    def __init__(self, host: str, server_header: str) -> None:
        self._host = host
        self._parser = ResponseParser(server_header)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._requests: dict[tuple[str, bool], bytes] = {}
        self.open = False

    @classmethod
    async def connect(cls, host: str, port: int, server_header: str) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: cls(host, server_header), host, port)
        return conn

    def _request_bytes(self, path: str, keep_alive: bool) -> bytes:
        key = (path, keep_alive)
        data = self._requests.get(key)
        if data is None:
            close = "" if keep_alive else "Connection: close\r\n"
            data = (
                f"GET {path} HTTP/1.1\r\nHost: {self._host}\r\nAccept-Encoding: gzip\r\n"
                f"User-Agent: quell-loadgen\r\n{close}\r\n"
            ).encode()
            self._requests[key] = data
        return data

    async def request(self, path: str, keep_alive: bool = True) -> Answer:
        """Send ``GET path`` and wait for the whole answer. Raises ``ClosedBeforeAnswerError``,
        ``IncompleteAnswerError``, ``BadAnswerError`` or ``OSError``; after any of them, or an answer
        that does not keep the connection alive, the connection is closed."""
        if not self.open or self._transport is None:
            raise ClosedBeforeAnswerError("the connection was closed before the request")
        self._parser.reset()
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._transport.write(self._request_bytes(path, keep_alive))
        try:
            answer = await waiter
        except BaseException:  # an error, or the caller's timeout cancelled the wait
            self.abort()
            raise
        finally:
            self._waiter = None
        if not (answer.keep_alive and keep_alive):
            self.close()
        return answer

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close without waiting for anything to be sent (a timed-out request)."""
        self.open = False
        if self._transport is not None:
            self._transport.abort()

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        try:
            answer = self._parser.feed(data)
        except BadAnswerError as exc:
            waiter.set_exception(exc)
            self.abort()
            return
        if answer is not None:
            waiter.set_result(answer)

    def eof_received(self) -> bool:
        self.open = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            try:
                waiter.set_result(self._parser.eof())
            except ConnectionError as exc:
                waiter.set_exception(exc)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if exc is None:
            self.eof_received()
        elif not self._parser.started:  # e.g. reset by a peer that had just timed us out
            waiter.set_exception(ClosedBeforeAnswerError(f"{type(exc).__name__}: {exc}"))
        else:
            waiter.set_exception(exc)

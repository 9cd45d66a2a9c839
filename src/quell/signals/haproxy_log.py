"""HAProxy's per-request log, received on a unix datagram socket: who answered, with what status,
in how long. The stats socket only gives HAProxy's average over the last 1024 requests; the log
gives every request, so an interval's mean and percentiles are exact (to HAProxy's millisecond).

HAProxy is told ``log unix@<socket> len 1024 format raw local0 info`` and
``log-format "quell %s %ST %Ta"``: one datagram per request, ``quell <server> <status> <ms>``
(``%Ta``: active time, from the request received to the response's last byte sent). A line in
syslog form (``<134>... haproxy[1]: quell ...``) is read too. A datagram that does not parse is
counted and skipped. A request HAProxy logs with ``%Ta`` -1 ended before it had an answer (the
client gave up, or the connection broke): it is kept, with no active time."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError

REQUEST_LOG_FORMAT = "quell %s %ST %Ta"
"""The ``log-format`` quell reads."""
LOG_DIRECTIVE = "log unix@{socket} len 1024 format raw local0 info"
"""The ``global`` line that sends the log to quell's socket."""
_MARK = "quell "
MAX_DATAGRAMS = 200_000
"""The most requests held between two ``drain`` calls (a bound on memory)."""


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    server: str
    """The server that answered (``<NOSRV>`` when none did)."""
    status: int
    active_s: float | None
    """From the request received to the response's last byte; ``None``: it ended before an
    answer."""


def parse_log_line(text: str) -> LoggedRequest | None:
    """One datagram's request, or None if it is not a quell log line."""
    at = text.find(_MARK)
    if at < 0:
        return None
    parts = text[at + len(_MARK) :].split()
    if len(parts) < 3:
        return None
    try:
        status, ms = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    if ms < 0:  # HAProxy logs -1 for a request that ended before it had an answer
        return LoggedRequest(parts[0], status, None)
    return LoggedRequest(parts[0], status, ms / 1000.0)


class RequestLogSocket:
    """A unix datagram socket HAProxy logs to; ``drain`` returns what arrived since the last.

    A thread of its own receives as datagrams arrive: the kernel queues only
    ``net.unix.max_dgram_qlen`` (10 by default) datagrams on a unix socket, and HAProxy drops
    what does not fit (measured: 11 of 60 requests logged when read once every 3 s)."""

    def __init__(self, path: Path, rcvbuf_bytes: int = 4 << 20) -> None:
        self.path = Path(path)
        self.skipped = 0
        self._lock = threading.Lock()
        self._records: list[LoggedRequest] = []
        self._error: str | None = None
        with contextlib.suppress(FileNotFoundError):
            if self.path.is_socket():
                self.path.unlink()
        self._sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
            self._sock.bind(str(self.path))
            os.chmod(self.path, 0o660)
        except OSError as exc:
            self._sock.close()
            self._sock = None
            raise ComponentError("haproxy log", f"cannot bind {self.path}: {exc}") from exc
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(
            target=self._receive, args=(self._sock,), name="quell-haproxy-log", daemon=True
        )
        self._thread.start()

    def _receive(self, sock: socket.socket) -> None:
        while self._sock is sock:
            try:
                data = sock.recv(2048)
            except TimeoutError:
                continue
            except OSError as exc:
                if self._sock is sock:
                    with self._lock:
                        self._error = str(exc)
                return
            rec = parse_log_line(data.decode(errors="replace"))
            with self._lock:
                if rec is None:
                    self.skipped += 1
                elif len(self._records) < MAX_DATAGRAMS:
                    self._records.append(rec)
                else:
                    self.skipped += 1

    def drain(self) -> list[LoggedRequest]:
        with self._lock:
            if self._sock is None:
                raise ComponentError("haproxy log", f"socket {self.path} is closed")
            if self._error is not None:
                raise ComponentError("haproxy log", f"{self.path}: {self._error}")
            out, self._records = self._records, []
        return out

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            self._thread.join(timeout=1.0)
            sock.close()
            with contextlib.suppress(OSError):
                self.path.unlink()

"""HAProxy's per-request log, received on a unix datagram socket: who answered, with what status,
in how long. The stats socket only gives HAProxy's average over the last 1024 requests; the log
gives every request, so an interval's mean and percentiles are exact (to HAProxy's millisecond).

HAProxy is told ``log unix@<socket> len 1024 format raw local0 info`` and
``log-format "quell %s %ST %Ta"``: one datagram per request, ``quell <server> <status> <ms>``
(``%Ta``: active time, from the request received to the response's last byte sent). A line in
syslog form (``<134>... haproxy[1]: quell ...``) is read too. A datagram that does not parse is
counted and skipped."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError

REQUEST_LOG_FORMAT = "quell %s %ST %Ta"
"""The ``log-format`` quell reads."""
LOG_DIRECTIVE = "log unix@{socket} len 1024 format raw local0 info"
"""The ``global`` line that sends the log to quell's socket."""
_MARK = "quell "
MAX_DATAGRAMS = 200_000
"""The most datagrams one ``drain`` reads (a bound on one call's work)."""


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    server: str
    """The server that answered (``<NOSRV>`` when none did)."""
    status: int
    active_s: float


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
        return None
    return LoggedRequest(parts[0], status, ms / 1000.0)


class RequestLogSocket:
    """A unix datagram socket HAProxy logs to; ``drain`` returns what arrived since the last."""

    def __init__(self, path: Path, rcvbuf_bytes: int = 4 << 20) -> None:
        self.path = Path(path)
        self.skipped = 0
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
        self._sock.setblocking(False)

    def drain(self) -> list[LoggedRequest]:
        if self._sock is None:
            raise ComponentError("haproxy log", f"socket {self.path} is closed")
        out: list[LoggedRequest] = []
        for _ in range(MAX_DATAGRAMS):
            try:
                data = self._sock.recv(2048)
            except BlockingIOError:
                break
            except OSError as exc:
                raise ComponentError("haproxy log", f"{self.path}: {exc}") from exc
            rec = parse_log_line(data.decode(errors="replace"))
            if rec is None:
                self.skipped += 1
            else:
                out.append(rec)
        return out

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                self.path.unlink()

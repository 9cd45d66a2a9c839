"""The load generator's per-request log (``requests.csv``): one line per request, appended as
requests finish, read back as it grows.

Open loop writes ``send_s,latency_s,status,bytes,server,error``; closed-loop users add two
columns, ``user`` (0-based) and ``conn``: how the request got its connection (``CONN_KINDS``).
``parse_line`` reads both forms into the same ``RequestRecord``; ``parse_user_line`` reads the
closed-loop columns too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar, get_args

from quell.store.run import RequestRecord

T = TypeVar("T")

CSV_FIELDS = ("send_s", "latency_s", "status", "bytes", "server", "error")
USER_FIELDS = (*CSV_FIELDS, "user", "conn")

ConnKind = Literal["new", "reused", "reopened", "retried"]
"""How a request got its connection: ``new`` (the user's first request, or every request
without keep-alive), ``reused`` (the user's kept-alive connection), ``reopened`` (a new one
because the last was closed: by the peer while the user thought, by an answer that did not
keep it alive, or after an error), ``retried`` (sent on the kept-alive connection, which the
peer closed before answering; sent again on a new one). Reconnects are ``reopened`` plus
``retried``."""
CONN_KINDS: tuple[ConnKind, ...] = get_args(ConnKind)
RECONNECT_KINDS: tuple[ConnKind, ...] = ("reopened", "retried")
_CONN_KIND: dict[str, ConnKind] = {k: k for k in CONN_KINDS}


def format_record(
    send_s: float, latency_s: float | None, status: int, nbytes: int, server: str, error: str
) -> str:
    """The open-loop line of one request, without its newline."""
    lat = f"{latency_s:.6f}" if latency_s is not None else ""
    return f"{send_s:.6f},{lat},{status},{nbytes},{server},{error}"


def _record(parts: list[str]) -> RequestRecord | None:
    send, lat, status, nbytes, server, error = parts[:6]
    try:
        return RequestRecord(
            float(send), float(lat) if lat else None, int(status), int(nbytes), server, error
        )
    except ValueError:
        return None


def parse_line(line: str) -> RequestRecord | None:
    """The request of one line of either form; None for anything else (a partial line)."""
    parts = line.rstrip("\n").split(",")
    if len(parts) not in (len(CSV_FIELDS), len(USER_FIELDS)):
        return None
    return _record(parts)


@dataclass(frozen=True, slots=True)
class UserRequest:
    """A closed-loop line: the request, which user sent it and how it got its connection."""

    record: RequestRecord
    user: int
    conn: ConnKind


def parse_user_line(line: str) -> UserRequest | None:
    """A closed-loop line; None for an open-loop one or anything else."""
    parts = line.rstrip("\n").split(",")
    if len(parts) != len(USER_FIELDS):
        return None
    record = _record(parts)
    conn = _CONN_KIND.get(parts[7])
    if record is None or conn is None or not parts[6].isdigit():
        return None
    return UserRequest(record, int(parts[6]), conn)


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

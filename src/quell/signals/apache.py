"""What a running Apache httpd and its php-fpm pool say about themselves.

* ``server-status?auto`` (mod_status): the parent's configuration generation (one more after
  every restart) and the worker threads of the serving generation, busy and idle, beside those
  of an old generation still finishing its requests ("graceful"). With every child of the
  generation started, busy + idle is the MaxRequestWorkers Apache really uses.
* ``apache2 -t`` and its error log: the MaxRequestWorkers Apache lowers a configuration's
  value to (it warns and lowers, it does not refuse: AH00316/AH00318 with the worker MPM and
  AH00513/AH00515 with event when it starts or is tested, AH00319 when a restart exceeds
  ServerLimit; a value that is not a multiple of ThreadsPerChild is lowered silently at a
  restart, only ``-t`` says so).
* A php-fpm master's children (``/proc/<pid>/task/<pid>/children``): its pool's processes.

The HTTP requests go over a socket the caller opens (in the server's network namespace)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError

MAX_REPLY_BYTES = 1 << 20
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})")
_LOWERED = re.compile(
    r"AH\d{5}: (?:WARNING: )?MaxRequestWorkers of \d+ .*?decreasing to (?:nearest multiple )?(\d+)"
)


@dataclass(frozen=True, slots=True)
class ApacheStatus:
    """One reading of ``server-status?auto``."""

    config_generation: int
    busy_workers: int
    idle_workers: int
    graceful_workers: int

    @property
    def workers(self) -> int:
        """Threads of the serving generation: busy and idle."""
        return self.busy_workers + self.idle_workers


def parse_server_status(text: str) -> ApacheStatus:
    """``server-status?auto`` text; every field needed must be there."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    keys = ("ParentServerConfigGeneration", "BusyWorkers", "IdleWorkers", "GracefulWorkers")
    missing = [k for k in keys if k not in values]
    if missing:
        raise ComponentError("apache", f"server-status lacks {', '.join(missing)}: {text[:200]!r}")
    try:
        generation, busy, idle, graceful = (int(values[k]) for k in keys)
    except ValueError as exc:
        raise ComponentError("apache", f"server-status: {exc}") from None
    return ApacheStatus(generation, busy, idle, graceful)


def parse_lowered_workers(text: str) -> int | None:
    """The MaxRequestWorkers Apache says it lowers the configured value to, in ``apache2 -t``'s
    output or its log (the last warning wins: one may follow the other); None when it lowers
    nothing."""
    found = _LOWERED.findall(text)
    return int(found[-1]) if found else None


def http_get(sock: socket.socket, addr: str, port: int, path: str, timeout_s: float) -> str:
    """GET ``path`` over ``sock`` (connected here, closed after); the body of a 200 answer."""
    sock.settimeout(timeout_s)
    chunks: list[bytes] = []
    try:
        with sock:
            sock.connect((addr, port))
            request = f"GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            sock.sendall(request.encode())
            received = 0
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                received += len(chunk)
                if received > MAX_REPLY_BYTES:
                    raise ComponentError("apache", f"{path}: reply over {MAX_REPLY_BYTES} bytes")
    except OSError as exc:
        raise ComponentError("apache", f"GET http://{addr}:{port}{path}: {exc}") from None
    reply = b"".join(chunks)
    head, _, body = reply.partition(b"\r\n\r\n")
    status = _STATUS_LINE.match(head)
    if status is None or status.group(1) != b"200":
        first = head.split(b"\r\n", 1)[0].decode(errors="replace")
        raise ComponentError("apache", f"GET http://{addr}:{port}{path}: {first or 'no answer'}")
    return body.decode(errors="replace")


def read_children(pid: int, proc_root: Path = Path("/proc")) -> list[int]:
    """The child processes of ``pid`` (its main thread's); empty when it has none or is gone."""
    try:
        text = (proc_root / str(pid) / "task" / str(pid) / "children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def read_title(pid: int, proc_root: Path = Path("/proc")) -> str:
    """The process's command line as ``ps`` shows it (its first argument, which servers such
    as php-fpm set to a title); empty when it is gone."""
    try:
        raw = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def process_running(pid: int, proc_root: Path = Path("/proc")) -> bool:
    """``pid`` exists and has not exited (a zombie waiting for its parent has)."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] not in ("Z", "X")

"""Drive a running HAProxy through its admin stats socket (runtime API, HAProxy 2.6)."""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from pathlib import Path
from typing import Literal

from quell.errors import ComponentError, InputError, Problem
from quell.signals.haproxy import ServerStat, parse_show_stat

MAX_WEIGHT = 256
MAX_REPLY_BYTES = 64 * 1024 * 1024
# HAProxy proxy and server names: letters, digits, '-', '_', '.', ':'.
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
_WEIGHT_REPLY = re.compile(r"(\d+) \(initial \d+\)")
# `set server ... addr` answers with what changed instead of an empty line.
_ADDR_OK_PREFIXES = ("IP changed from", "no need to change the addr")


class HAProxyRuntime:
    """One command per connection over the AF_UNIX stats socket; HAProxy replies, then closes."""

    def __init__(self, socket_path: Path, timeout_s: float = 2.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"HAProxyRuntime({str(self.socket_path)!r}, timeout_s={self.timeout_s})"

    def command(self, cmd: str) -> str:
        """Send one command and return the whole reply text."""
        if "\n" in cmd or "\r" in cmd:
            raise InputError("haproxy command", [Problem("cmd", "must be a single line")])
        deadline = time.monotonic() + self.timeout_s
        chunks: list[bytes] = []
        received = 0
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(str(self.socket_path))
                sock.sendall(cmd.encode() + b"\n")
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError("reply not complete")
                    sock.settimeout(remaining)
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    received += len(chunk)
                    if received > MAX_REPLY_BYTES:
                        raise ComponentError(
                            "haproxy", f"{cmd!r}: reply larger than {MAX_REPLY_BYTES} bytes"
                        )
        except (TimeoutError, OSError) as exc:
            raise ComponentError(
                "haproxy", f"stats socket {self.socket_path}: {cmd!r}: {exc}"
            ) from exc
        return b"".join(chunks).decode(errors="replace")

    def _expect(self, cmd: str, *success: str, prefixes: tuple[str, ...] = ()) -> str:
        reply = self.command(cmd)
        text = reply.strip()
        if text in success or (prefixes and text.startswith(prefixes)):
            return reply
        raise ComponentError("haproxy", f"{cmd!r}: {text}")

    def show_stat(self) -> list[ServerStat]:
        """Server rows only (``show stat -1 4 -1``)."""
        return parse_show_stat(self.command("show stat -1 4 -1"))

    def set_weight(self, backend: str, server: str, weight: int) -> None:
        target = _target("set_weight", backend, server, weight=weight)
        self._expect(f"set server {target} weight {weight}", "")

    def get_weight(self, backend: str, server: str) -> int:
        """Current (effective) weight."""
        cmd = f"get weight {_target('get_weight', backend, server)}"
        text = self.command(cmd).strip()
        match = _WEIGHT_REPLY.fullmatch(text)
        if match is None:
            raise ComponentError("haproxy", f"{cmd!r}: {text}")
        return int(match.group(1))

    def set_maxconn(self, backend: str, server: str, maxconn: int) -> None:
        """Per-server connection limit (0 = unlimited)."""
        problems = [] if maxconn >= 0 else [Problem("maxconn", f"{maxconn} must be >= 0")]
        target = _target("set_maxconn", backend, server, problems=problems)
        self._expect(f"set maxconn server {target} {maxconn}", "")

    def set_state(
        self, backend: str, server: str, state: Literal["ready", "drain", "maint"]
    ) -> None:
        problems = (
            []
            if state in ("ready", "drain", "maint")
            else [Problem("state", f"{state!r} is not one of ready, drain, maint")]
        )
        target = _target("set_state", backend, server, problems=problems)
        self._expect(f"set server {target} state {state}", "")

    def set_addr(self, backend: str, server: str, addr: str, port: int) -> None:
        target = _target("set_addr", backend, server, problems=_addr_problems(addr, port))
        self._expect(f"set server {target} addr {addr} port {port}", prefixes=_ADDR_OK_PREFIXES)

    def add_server(
        self,
        backend: str,
        server: str,
        addr: str,
        port: int,
        weight: int,
        maxconn: int | None = None,
    ) -> None:
        """Register a dynamic server. It starts in maint: call ``set_state(..., "ready")``."""
        problems = _addr_problems(addr, port)
        if maxconn is not None and maxconn < 0:
            problems.append(Problem("maxconn", f"{maxconn} must be >= 0"))
        target = _target("add_server", backend, server, weight=weight, problems=problems)
        # HAProxy takes the port after the last colon, which also works for IPv6 literals.
        cmd = f"add server {target} {addr}:{port} weight {weight}"
        if maxconn is not None:
            cmd += f" maxconn {maxconn}"
        self._expect(cmd, "New server registered.")

    def del_server(self, backend: str, server: str) -> None:
        """Put the server in maint, then delete it (HAProxy refuses to delete a live server)."""
        target = _target("del_server", backend, server)
        self._expect(f"set server {target} state maint", "")
        self._expect(f"del server {target}", "Server deleted.")


def _addr_problems(addr: str, port: int) -> list[Problem]:
    problems: list[Problem] = []
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        problems.append(Problem("addr", f"{addr!r} is not an IP address"))
    if not 1 <= port <= 65535:
        problems.append(Problem("port", f"{port} is not in 1..65535"))
    return problems


def _target(
    source: str,
    backend: str,
    server: str,
    *,
    weight: int | None = None,
    problems: list[Problem] | None = None,
) -> str:
    """``backend/server`` after validating every argument; InputError lists all problems."""
    found = list(problems or [])
    for location, name in (("backend", backend), ("server", server)):
        if not _NAME.fullmatch(name):
            found.append(Problem(location, f"{name!r} is not a valid HAProxy name"))
    if weight is not None and not 0 <= weight <= MAX_WEIGHT:
        found.append(Problem("weight", f"{weight} is not in 0..{MAX_WEIGHT}"))
    if found:
        raise InputError(source, found)
    return f"{backend}/{server}"

"""Counters of another network namespace, read without a subprocess.

A lab host's shaped uplink lives in a namespace that holds no process, so ``/proc/<pid>/net``
cannot reach it and ``tc -s qdisc`` would cost a fork and exec (about 2.5 ms here) per host per
interval. Instead a throwaway thread enters the namespace once (``setns``), opens
``/proc/thread-self/net/dev`` and leaves; the descriptor stays bound to that namespace, and each
``pread`` at offset 0 returns fresh counters (about 6 µs). The uplink's transmit counter is
exactly what left through its tbf qdisc: the veth counts a packet when the qdisc hands it over,
Ethernet header included, as tbf's rate does (verified equal to tbf's ``Sent`` bytes).

Also here: which TCP ports listen in a namespace (``/proc/<pid>/net/tcp``), so the lab can tell
a server that is serving from one that has only been started.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from quell.errors import ComponentError
from quell.signals.procfs import NetDevCounters, parse_net_dev

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
_TCP_LISTEN = "0A"
T = TypeVar("T")


def _in_netns(netns_file: Path, make: Callable[[], T], what: str) -> T:
    """``make()`` run by a short-lived thread that has entered the network namespace
    ``netns_file`` (e.g. /run/netns/NAME or /proc/PID/ns/net); the caller's own threads never
    change namespace. What ``make`` returns (a descriptor, a socket) stays bound to it."""
    result: dict[str, T | str] = {}

    def enter_and_make() -> None:
        try:
            ns_fd = os.open(netns_file, os.O_RDONLY)
        except OSError as exc:
            result["error"] = f"cannot open {netns_file}: {exc.strerror}"
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(ns_fd, CLONE_NEWNET) != 0:
                result["error"] = f"setns {netns_file}: {os.strerror(ctypes.get_errno())}"
                return
            result["made"] = make()
        except OSError as exc:
            result["error"] = f"{what} in {netns_file}: {exc.strerror}"
        finally:
            os.close(ns_fd)

    thread = threading.Thread(target=enter_and_make, name="quell-netns")
    thread.start()
    thread.join()
    if "made" not in result:
        raise ComponentError("netns", str(result.get("error", f"{what}: nothing made")))
    return result["made"]  # type: ignore[return-value]


def open_in_netns(netns_file: Path, path: str = "/proc/thread-self/net/dev") -> int:
    """Open ``path`` from inside the network namespace ``netns_file``; returns a read-only
    descriptor the caller closes."""
    return _in_netns(netns_file, lambda: os.open(path, os.O_RDONLY), f"cannot open {path}")


def socket_in_netns(netns_file: Path) -> socket.socket:
    """A TCP/IPv4 socket of the network namespace ``netns_file``: it connects to the addresses
    that namespace reaches, wherever the caller runs. The caller closes it."""
    return _in_netns(
        netns_file, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), "socket"
    )


class NetDevReader:
    """``net/dev`` of one namespace through a descriptor opened by ``open_in_netns`` (or any
    descriptor whose content is ``net/dev`` text, such as a recorded file in tests)."""

    def __init__(self, fd: int, max_bytes: int = 1 << 16) -> None:
        self.fd: int | None = fd
        self.max_bytes = max_bytes

    def read(self) -> dict[str, NetDevCounters]:
        if self.fd is None:
            raise ComponentError("netns", "net/dev reader is closed")
        try:
            data = os.pread(self.fd, self.max_bytes, 0)
        except OSError as exc:
            raise ComponentError("netns", f"cannot read net/dev: {exc.strerror}") from exc
        return parse_net_dev(data.decode("ascii", errors="replace"))

    def tx_bytes(self, interface: str) -> int | None:
        """Bytes sent by ``interface`` since it was created; None if it does not exist."""
        dev = self.read().get(interface)
        return dev.tx_bytes if dev is not None else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def parse_tcp_listeners(text: str) -> set[tuple[str, int]]:
    """(IPv4 address, port) of every socket in LISTEN state in ``/proc/<pid>/net/tcp`` text.

    The kernel prints the address as the 32-bit value in host byte order (little-endian here):
    ``0101A8C0:0050`` is 192.168.1.1 port 80."""
    out: set[tuple[str, int]] = set()
    for raw in text.splitlines()[1:]:
        fields = raw.split()
        if len(fields) < 4 or fields[3] != _TCP_LISTEN:
            continue
        addr_hex, sep, port_hex = fields[1].partition(":")
        try:
            if not sep or len(addr_hex) != 8:
                raise ValueError("not ADDR:PORT")
            addr = str(ipaddress.IPv4Address(int(addr_hex, 16).to_bytes(4, "little")))
            out.add((addr, int(port_hex, 16)))
        except ValueError as exc:
            raise ComponentError("procfs", f"net/tcp line {raw!r}: {exc}") from exc
    return out


def tcp_listeners(pid: int, proc_root: Path = Path("/proc")) -> set[tuple[str, int]]:
    """Listening IPv4 TCP sockets in the network namespace of ``pid``; empty if it has exited."""
    try:
        text = (proc_root / str(pid) / "net" / "tcp").read_text()
    except OSError:
        return set()
    return parse_tcp_listeners(text)

"""Counters of another network namespace: the uplink's transmit bytes and a namespace's
listening sockets, from files recorded in a lab run on the target machine (host h1 with one
instance at 10.77.1.1; lighttpd on port 80 and its probe server on 8081)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from quell.errors import ComponentError
from quell.signals.netns import (
    NetDevReader,
    open_in_netns,
    parse_tcp_listeners,
    socket_in_netns,
    tcp_listeners,
)
from quell.signals.procfs import NetDevCounters, parse_net_dev

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "netns"


def test_uplink_transmit_bytes_of_a_recorded_host_namespace() -> None:
    reader = NetDevReader(os.open(FIXTURES / "host_net_dev", os.O_RDONLY))
    try:
        assert reader.tx_bytes("uplink") == 1905147
        assert reader.read()["uplink"] == NetDevCounters(55519, 801, 1905147, 773)
        assert reader.read()["p0"] == NetDevCounters(1917894, 200, 56167, 809)
        assert reader.tx_bytes("nothere") is None
        assert reader.tx_bytes("uplink") == 1905147  # pread from offset 0 every time
    finally:
        reader.close()
    reader.close()  # twice is fine
    with pytest.raises(ComponentError, match="closed"):
        reader.read()


def test_listening_sockets_of_a_recorded_instance_namespace() -> None:
    text = (FIXTURES / "instance_net_tcp").read_text()
    # two listeners; the established connections (state 01, 06) are not listeners
    assert parse_tcp_listeners(text) == {("10.77.1.1", 8081), ("10.77.1.1", 80)}


def test_a_malformed_tcp_line_is_a_component_error() -> None:
    head = "  sl  local_address rem_address   st\n"
    with pytest.raises(ComponentError, match="net/tcp line"):
        parse_tcp_listeners(head + "   0: 01014D0A1F91 00000000:0000 0A\n")
    assert parse_tcp_listeners(head) == set()


def test_an_exited_process_has_no_listeners(tmp_path: Path) -> None:
    assert tcp_listeners(999_999_999, proc_root=tmp_path) == set()


def test_a_missing_namespace_is_a_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="cannot open"):
        open_in_netns(tmp_path / "no-such-netns")


@pytest.mark.skipif(os.geteuid() != 0, reason="setns needs CAP_SYS_ADMIN")
def test_opening_in_our_own_namespace_reads_what_proc_self_reads() -> None:
    fd = open_in_netns(Path(f"/proc/{os.getpid()}/ns/net"))
    reader = NetDevReader(fd)
    try:
        ours = parse_net_dev(Path("/proc/self/net/dev").read_text())
        assert set(reader.read()) == set(ours) and "lo" in ours
    finally:
        reader.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="setns needs CAP_SYS_ADMIN")
def test_a_socket_made_in_a_namespace_connects_to_what_that_namespace_reaches() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sock = socket_in_netns(Path(f"/proc/{os.getpid()}/ns/net"))
        with sock:
            sock.connect(listener.getsockname())
            accepted, _ = listener.accept()
            accepted.close()


def test_a_socket_in_a_missing_namespace_is_a_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="cannot open"):
        socket_in_netns(tmp_path / "no-such-netns")

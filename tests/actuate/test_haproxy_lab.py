"""HAProxyRuntime against a real HAProxy on 127.0.0.1 (marker ``lab``: needs root and haproxy)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quell.actuate import HAProxyRuntime
from quell.errors import ComponentError


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[HAProxyRuntime]:
    sock = tmp_path / "admin.sock"
    cfg = tmp_path / "haproxy.cfg"
    # The servers point at closed loopback ports: no health checks, so they show "no check".
    cfg.write_text(
        f"""global
    stats socket {sock} mode 600 level admin
    maxconn 100
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend fe_web
    bind 127.0.0.1:{_free_port()}
    default_backend be_web
backend be_web
    balance roundrobin
    server s1 127.0.0.1:{_free_port()} weight 100 maxconn 50
    server s2 127.0.0.1:{_free_port()} weight 100
"""
    )
    proc = subprocess.Popen(
        ["haproxy", "-db", "-f", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):  # up to 5 s for the socket to appear
            if sock.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        if not sock.exists():
            pytest.fail(f"haproxy did not create {sock} (exit code {proc.poll()})")
        yield HAProxyRuntime(sock)
    finally:
        proc.kill()
        proc.wait(timeout=5)


@pytest.mark.lab
def test_real_haproxy_round_trips(haproxy: HAProxyRuntime) -> None:
    rt = haproxy
    assert rt.get_weight("be_web", "s1") == 100
    rt.set_weight("be_web", "s1", 37)
    assert rt.get_weight("be_web", "s1") == 37

    rt.set_maxconn("be_web", "s2", 20)
    rt.set_state("be_web", "s1", "drain")
    by_name = {s.server: s for s in rt.show_stat()}
    assert by_name["s1"].status == "DRAIN"
    assert by_name["s2"].slim == 20
    rt.set_state("be_web", "s1", "ready")
    assert {s.server: s.status for s in rt.show_stat()}["s1"] == "no check"

    rt.add_server("be_web", "dyn1", "127.0.0.1", _free_port(), weight=42, maxconn=3)
    assert {s.server: s.status for s in rt.show_stat()}["dyn1"] == "MAINT"
    rt.set_state("be_web", "dyn1", "ready")
    by_name = {s.server: s for s in rt.show_stat()}
    assert (by_name["dyn1"].status, by_name["dyn1"].weight, by_name["dyn1"].slim) == (
        "no check",
        42,
        3,
    )
    rt.set_addr("be_web", "dyn1", "127.0.0.2", 9)
    rt.del_server("be_web", "dyn1")
    assert [s.server for s in rt.show_stat()] == ["s1", "s2"]

    with pytest.raises(ComponentError, match="No such server"):
        rt.set_state("be_web", "dyn1", "ready")
    with pytest.raises(ComponentError, match="No such server"):
        rt.get_weight("be_web", "dyn1")

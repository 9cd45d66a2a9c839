"""HAProxy's config: open-loop runs get the one they always had; closed-loop users on kept-alive
connections get their idle connections kept and a server connection each (HAProxy itself checks
that both are valid, where it is installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from quell.lab.balancer import BackendServer, haproxy_config
from quell.scenario.model import LoadBalancer

SERVERS = [
    BackendServer("i1", "10.77.1.1", 80, 100, None),
    BackendServer("i2", "10.77.1.2", 80, 50, 20),
]
USER_LINES = (
    "    timeout client 600s",
    "    timeout http-keep-alive 600s",
    "    timeout http-request 10000ms",
    "    http-reuse never",
    "    option prefer-last-server",
)


def config(users: int = 0, http_reuse: str = "safe", one_per_conn: bool = False) -> str:
    lb = LoadBalancer.model_validate({"http_reuse": http_reuse})
    return haproxy_config(
        lb,
        SERVERS,
        Path("/run/x.sock"),
        10.0,
        kept_alive_users=users,
        one_request_per_server_connection=one_per_conn,
    )


def section(cfg: str, name: str) -> list[str]:
    lines = cfg.splitlines()
    start = lines.index(name)
    end = next((k for k in range(start + 1, len(lines)) if not lines[k].startswith(" ")), None)
    return lines[start + 1 : end]


def test_open_loop_runs_keep_their_config() -> None:
    cfg = config()
    assert not any(line in cfg.splitlines() for line in USER_LINES)
    assert cfg.count("maxconn 8000") == 2
    assert "    timeout client 10000ms" in section(cfg, "defaults")


def test_kept_alive_users_keep_their_connections_and_get_a_server_connection_each() -> None:
    cfg = config(users=200)
    assert section(cfg, "frontend fe")[2:5] == list(USER_LINES[:3])
    assert section(cfg, "backend be")[1:3] == list(USER_LINES[3:])
    assert cfg.count("maxconn 8000") == 2
    assert config(users=10_000).count("maxconn 11000") == 2


def test_open_loop_server_connections_close_with_the_client_s_when_asked() -> None:
    cfg = config(http_reuse="never")
    assert section(cfg, "backend be")[1] == "    http-reuse never"
    assert sorted(cfg.splitlines()) == sorted([*config().splitlines(), "    http-reuse never"])
    assert config(users=200, http_reuse="never") == config(users=200)  # users always have it


def test_instrumented_servers_get_one_request_per_server_connection() -> None:
    """An instrumented server counts a request per connection: HAProxy closes the server side
    after each answer and never reuses it, for open-loop and kept-alive users alike."""
    for users, reuse in ((0, "safe"), (0, "never"), (200, "safe")):
        back = section(config(users, reuse, one_per_conn=True), "backend be")
        assert back[1:3] == ["    http-reuse never", "    option http-server-close"]
        assert back.count("    http-reuse never") == 1


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
@pytest.mark.parametrize(
    ("users", "http_reuse", "one_per_conn"),
    [(0, "safe", False), (0, "never", False), (200, "safe", False), (200, "safe", True)],
)
def test_haproxy_accepts_the_config(
    tmp_path: Path, users: int, http_reuse: str, one_per_conn: bool
) -> None:
    path = tmp_path / "haproxy.cfg"
    path.write_text(config(users, http_reuse, one_per_conn))
    check = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

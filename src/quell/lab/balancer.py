"""HAProxy in front of the instances: its config, and waiting until every server is up.

Run-time changes (weights, maxconn, drain, add/remove) go through the runtime API socket
(``quell.actuate.haproxy.HAProxyRuntime``). Each response carries ``X-Quell-Server`` naming the
instance that answered, so the client side can attribute every request.

What is kept alive where. HAProxy 2.6 runs in its default keep-alive mode: it keeps both sides
of a connection idle between requests, and the two sides independently (a server closing its
side does not close the client's). Open-loop requests say ``Connection: close``: the client
side closes after each answer, the server side does not unless the scenario's
``load_balancer.http_reuse`` is ``never`` (HAProxy's default, ``safe``, keeps up to its
estimate of the connections recently needed idle, and one-request clients never use them
again; see ``quell.scenario.model.LoadBalancer``). For closed-loop users on kept-alive connections the config gives each
user one server connection of its own, as if the user were connected to the server directly:
``http-reuse never`` (a server connection serves only the client connection that opened it)
and ``option prefer-last-server`` (a user's next request goes to the server its connection is
open to, while it is open). The server's keep-alive timeout then decides when that connection
closes (HAProxy opens a new one on the user's next request), and the client side stays open for
``USER_IDLE_TIMEOUT_S`` of idle time, longer than any server keep-alive a scenario can set."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from quell.actuate.haproxy import HAProxyRuntime
from quell.errors import ComponentError
from quell.scenario.model import LoadBalancer
from quell.signals.haproxy_log import LOG_DIRECTIVE, REQUEST_LOG_FORMAT

BACKEND = "be"
FRONTEND_ADDR = "127.0.0.1"
FRONTEND_PORT = 8080
SERVER_HEADER = "X-Quell-Server"
MAXCONN = 8000
USER_IDLE_TIMEOUT_S = 600
"""How long HAProxy keeps a closed-loop user's idle connection (``timeout http-keep-alive``; the
frontend's ``timeout client`` with it, since the smaller of the two applies)."""


@dataclass(frozen=True)
class BackendServer:
    name: str
    addr: str
    port: int
    weight: int
    maxconn: int | None
    disabled: bool = False
    """A pre-provisioned slot: declared, in maintenance until ``set server ... state ready``."""


def server_line(s: BackendServer) -> str:
    maxconn = f" maxconn {s.maxconn}" if s.maxconn is not None else ""
    disabled = " disabled" if s.disabled else ""
    return (
        f"    server {s.name} {s.addr}:{s.port} weight {s.weight}{maxconn}"
        f" check inter 1s rise 1 fall 3{disabled}"
    )


def haproxy_config(
    lb: LoadBalancer,
    servers: Sequence[BackendServer],
    socket_path: Path,
    timeout_s: float,
    kept_alive_users: int = 0,
    log_socket: Path | None = None,
    one_request_per_server_connection: bool = False,
) -> str:
    """The config; ``kept_alive_users`` > 0: that many closed-loop users hold a connection each
    (room for them, their idle connections kept, a server connection of their own);
    ``log_socket``: every request logged there (a unix datagram socket, ``REQUEST_LOG_FORMAT``);
    ``one_request_per_server_connection``: HAProxy closes the server side after each answer
    and never reuses it (instrumented servers count a request per connection)."""
    t = f"{max(1, round(timeout_s * 1000))}ms"
    maxconn = max(MAXCONN, kept_alive_users + 1000) if kept_alive_users else MAXCONN
    users_front: list[str] = []
    users_back: list[str] = []
    if kept_alive_users:
        users_front = [
            f"    timeout client {USER_IDLE_TIMEOUT_S}s",
            f"    timeout http-keep-alive {USER_IDLE_TIMEOUT_S}s",
            f"    timeout http-request {t}",
        ]
        users_back = ["    http-reuse never", "    option prefer-last-server"]
    elif lb.http_reuse == "never":
        users_back = ["    http-reuse never"]
    if one_request_per_server_connection:
        users_back = [
            "    http-reuse never",
            "    option http-server-close",
            *(line for line in users_back if "http-reuse" not in line),
        ]
    log_global = ["    " + LOG_DIRECTIVE.format(socket=log_socket)] if log_socket else []
    log_defaults = (
        ["    log global", f'    log-format "{REQUEST_LOG_FORMAT}"'] if log_socket else []
    )
    lines = [
        "global",
        f"    stats socket {socket_path} mode 600 level admin",
        "    stats timeout 30s",
        f"    maxconn {maxconn}",
        "    nbthread 1",
        *log_global,
        "defaults",
        "    mode http",
        *log_defaults,
        "    timeout connect 2s",
        f"    timeout client {t}",
        f"    timeout server {t}",
        f"    timeout queue {t}",
        "frontend fe",
        f"    bind {FRONTEND_ADDR}:{FRONTEND_PORT}",
        f"    maxconn {maxconn}",
        *users_front,
        f"    default_backend {BACKEND}",
        f"backend {BACKEND}",
        f"    balance {lb.algorithm}",
        *users_back,
        f"    http-response set-header {SERVER_HEADER} %[srv_name]",
        *(server_line(s) for s in servers),
    ]
    return "\n".join(lines) + "\n"


def wait_until_up(runtime: HAProxyRuntime, names: Sequence[str], timeout_s: float = 15.0) -> None:
    """Block until HAProxy's health checks see every named server UP."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, str] = {}
    while time.monotonic() < deadline:
        try:
            status = {s.server: s.status for s in runtime.show_stat() if s.backend == BACKEND}
        except ComponentError:
            status = {}
        if status and all(status.get(n, "").startswith("UP") for n in names):
            return
        time.sleep(0.1)
    down = {n: status.get(n, "absent") for n in names if not status.get(n, "").startswith("UP")}
    raise ComponentError("haproxy", f"servers not up after {timeout_s:g} s: {down}")


def wait_for_socket(path: Path, alive: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return
        if not alive():
            raise ComponentError("haproxy", "exited during start")
        time.sleep(0.05)
    raise ComponentError("haproxy", f"admin socket {path} did not appear in {timeout_s:g} s")

"""Stand-ins for the parts of a live deployment in unit tests: a Prometheus HTTP server on
loopback serving query answers recorded from the real Prometheus (tests/fixtures/live), and
HAProxy's runtime API over an in-memory backend."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

from quell.actuate.haproxy import HAProxyRuntime
from quell.errors import ComponentError
from quell.live.config import LiveConfig, parse_config
from quell.signals.haproxy import ServerStat

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "live" / "prometheus-queries.json"
Mode = Literal["ok", "nan", "stale", "empty", "down"]


class FakePrometheus:
    """Answers ``/api/v1/query`` with the recorded answer to the same expression, altered by
    ``mode``: every value NaN, every sample 600 s old, or no samples at all."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = json.loads(RECORDED.read_text())
        self.mode: Mode = "ok"
        self.queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                expr = parse_qs(body)["query"][0]
                fake.queries.append(expr)
                if fake.mode == "down":
                    self.send_response(503)
                    self.send_header("Content-Length", "11")
                    self.end_headers()
                    self.wfile.write(b"unavailable")
                    return
                doc = fake.answer(expr)
                data = json.dumps(doc).encode()
                self.send_response(200 if doc["status"] == "success" else 400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, expr: str) -> dict[str, Any]:
        doc = self.answers.get(expr)
        if doc is None:
            return {"status": "error", "errorType": "bad_data", "error": f"unknown {expr!r}"}
        doc = copy.deepcopy(doc)
        result = doc["data"]["result"]
        if self.mode == "empty":
            doc["data"]["result"] = []
        elif self.mode == "nan":
            for r in result:
                r["value"][1] = "NaN"
        elif self.mode == "stale" and expr.startswith("time() - timestamp"):
            for r in result:
                r["value"][1] = "600"
        return doc

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def fake_prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    try:
        yield fake
    finally:
        fake.stop()


def _stat(server: str, weight: int, state: str, slim: int | None) -> ServerStat:
    status = {"ready": "UP", "drain": "DRAIN", "maint": "MAINT"}[state]
    return ServerStat(
        "be", server, status, weight, 0, 0, 0, slim, 0, 0, 0, 0, 0, 0, 0, None, None, None, 0
    )


class FakeRuntime(HAProxyRuntime):
    """HAProxy's runtime API over an in-memory backend ``be``; ``gone`` makes every call fail
    as a removed socket does."""

    def __init__(self, servers: dict[str, str]) -> None:
        super().__init__(Path("/nonexistent/haproxy.sock"))
        self.weights = {s: 100 for s in servers}
        self.states = dict(servers)
        self.maxconn: dict[str, int | None] = {s: None for s in servers}
        self.gone = False
        self.calls: list[str] = []

    def _check(self, server: str | None = None) -> None:
        if self.gone:
            raise ComponentError("haproxy", "stats socket: [Errno 2] No such file or directory")
        if server is not None and server not in self.weights:
            raise ComponentError("haproxy", f"No such server {server}")

    def show_stat(self) -> list[ServerStat]:
        self._check()
        return [_stat(s, w, self.states[s], self.maxconn[s]) for s, w in self.weights.items()]

    def set_weight(self, backend: str, server: str, weight: int) -> None:
        self._check(server)
        self.calls.append(f"weight {server} {weight}")
        self.weights[server] = weight

    def set_maxconn(self, backend: str, server: str, maxconn: int) -> None:
        self._check(server)
        self.calls.append(f"maxconn {server} {maxconn}")
        self.maxconn[server] = maxconn or None

    def set_state(self, backend: str, server: str, state: Any) -> None:
        self._check(server)
        self.calls.append(f"state {server} {state}")
        self.states[server] = state

    def command(self, cmd: str) -> str:
        self._check()
        self.calls.append(cmd)
        return ""


class FakeLog:
    """HAProxy's request log as the environment reads it: what ``pending`` holds, once."""

    def __init__(self) -> None:
        self.pending: list[Any] = []

    def drain(self) -> list[Any]:
        out, self.pending = self.pending, []
        return out

    def close(self) -> None:
        pass


def live_config(url: str, **more: Any) -> LiveConfig:
    """A controller's config over a Prometheus at ``url``: instances ``a`` (host h1) and
    ``b`` (h2) serving, a slot ``h2s1`` on h2, round robin, a 1 s probe; ``more`` replaces
    top-level keys."""
    doc: dict[str, Any] = {
        "interval_s": 1.0,
        "prometheus": {"url": url, "scrape_interval_s": 0.5},
        "haproxy": {"socket": "/x/haproxy.sock", "backend": "be", "log_socket": "/x/log.sock"},
        "instances": [
            {"id": "a", "host": "h1"},
            {"id": "b", "host": "h2"},
            {"id": "h2s1", "host": "h2", "slot": True},
        ],
        "policy": {"name": "rr"},
        "probe_period_s": 1.0,
        "host_link_mbit": {"h1": 100.0, "h2": 100.0},
        "scaling": {"min_instances": 1, "max_instances": 3},
        **more,
    }
    return parse_config(LiveConfig, doc, "<test>")

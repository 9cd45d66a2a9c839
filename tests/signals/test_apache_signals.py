"""What Apache and php-fpm say about themselves, read from outputs recorded on the target machine
(Apache 2.4.71, worker MPM, ServerLimit 4, ThreadsPerChild 8): server-status, ``apache2 -t``,
the error log around a graceful restart; and a php-fpm master's children from a procfs tree."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from quell.errors import ComponentError
from quell.signals.apache import (
    ApacheStatus,
    http_get,
    parse_lowered_workers,
    parse_server_status,
    process_running,
    read_children,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "apache"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_server_status_gives_the_generation_and_the_threads_of_the_serving_one() -> None:
    first = parse_server_status(fixture("server-status-auto.txt"))
    assert first == ApacheStatus(
        config_generation=1, busy_workers=1, idle_workers=15, graceful_workers=0
    )
    assert first.workers == 16
    after = parse_server_status(fixture("server-status-after-graceful.txt"))
    assert after.config_generation == 2


def test_a_server_status_without_the_counts_names_what_it_lacks() -> None:
    text = "ServerVersion: Apache/2.4.71\nBusyWorkers: 1\n"
    with pytest.raises(ComponentError, match="IdleWorkers") as caught:
        parse_server_status(text)
    assert "ParentServerConfigGeneration" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "lowered"),
    [
        ("config-test-not-a-multiple.txt", 16),  # 20 is not a multiple of 8
        ("config-test-over-server-limit.txt", 32),  # 64 needs 8 servers of 4
        ("error-log-graceful-over-server-limit.txt", 32),  # the same, logged at the restart
        ("config-test-refused.txt", None),
    ],
)
def test_what_apache_says_it_lowers_max_request_workers_to(name: str, lowered: int | None) -> None:
    assert parse_lowered_workers(fixture(name)) == lowered


def test_nothing_lowered_in_a_clean_config_test() -> None:
    assert parse_lowered_workers("Syntax OK\n") is None


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/ok" else 503
        body = f"path {self.path}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[int]:
    httpd = HTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_a_get_returns_the_body_of_a_200_and_names_anything_else(server: int) -> None:
    assert http_get(socket.socket(), "127.0.0.1", server, "/ok", 2.0) == "path /ok"
    with pytest.raises(ComponentError, match="503"):
        http_get(socket.socket(), "127.0.0.1", server, "/down", 2.0)


def test_a_get_nobody_answers_is_a_component_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(ComponentError, match=r"GET http://127\.0\.0\.1"):
            http_get(socket.socket(), "127.0.0.1", port, "/x", 1.0)


def proc_tree(root: Path, pid: int, state: str, children: list[int]) -> None:
    task = root / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    (root / str(pid) / "stat").write_text(f"{pid} (php-fpm: master) {state} 1 {pid} {pid}\n")
    (task / "children").write_text("".join(f"{c} " for c in children))


def test_a_master_s_children_and_whether_it_runs(tmp_path: Path) -> None:
    proc_tree(tmp_path, 40, "S", [41, 42, 43])
    proc_tree(tmp_path, 50, "Z", [])
    assert read_children(40, tmp_path) == [41, 42, 43]
    assert read_children(50, tmp_path) == []
    assert read_children(60, tmp_path) == []  # gone
    assert process_running(40, tmp_path)
    assert not process_running(50, tmp_path)  # a zombie has exited
    assert not process_running(60, tmp_path)

"""HAProxyRuntime against a fake stats socket: exact command strings and error mapping."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from quell.actuate import HAProxyRuntime
from quell.errors import ComponentError, InputError

FIXTURE_CSV = (
    Path(__file__).resolve().parent.parent / "fixtures" / "haproxy" / "show_stat.csv"
).read_text()


class FakeStatsSocket:
    """Answers each connection with the next scripted reply, then closes, like HAProxy."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.replies: list[str] = []
        self.commands: list[str] = []
        self.hang = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2.0)
                data = b""
                while not data.endswith(b"\n") and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.commands.append(data.decode())
                if self.hang:
                    self._stop.wait(1.0)
                    continue
                reply = self.replies.pop(0) if self.replies else "\n"
                conn.sendall(reply.encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeStatsSocket]:
    server = FakeStatsSocket(tmp_path / "admin.sock")
    try:
        yield server
    finally:
        server.close()


def _rt(fake: FakeStatsSocket) -> HAProxyRuntime:
    return HAProxyRuntime(fake.path, timeout_s=0.5)


def test_set_commands_exact_strings(fake: FakeStatsSocket) -> None:
    rt = _rt(fake)
    rt.set_weight("be_web", "s1", 75)
    rt.set_weight("be_web", "s2", 0)
    rt.set_maxconn("be_web", "s1", 20)
    rt.set_state("be_web", "s1", "drain")
    rt.set_state("be_web", "s1", "ready")
    assert fake.commands == [
        "set server be_web/s1 weight 75\n",
        "set server be_web/s2 weight 0\n",
        "set maxconn server be_web/s1 20\n",
        "set server be_web/s1 state drain\n",
        "set server be_web/s1 state ready\n",
    ]


def test_get_weight_parses_reply(fake: FakeStatsSocket) -> None:
    fake.replies = ["75 (initial 100)\n\n"]
    assert _rt(fake).get_weight("be_web", "s1") == 75
    assert fake.commands == ["get weight be_web/s1\n"]


def test_get_weight_error_reply(fake: FakeStatsSocket) -> None:
    fake.replies = ["No such server.\n\n"]
    with pytest.raises(ComponentError) as info:
        _rt(fake).get_weight("be_web", "nope")
    assert info.value.component == "haproxy"
    assert info.value.detail == "'get weight be_web/nope': No such server."


def test_set_addr_accepts_change_report(fake: FakeStatsSocket) -> None:
    fake.replies = [
        "no need to change the addr, port changed from '9' to '8083' by 'stats socket command'\n\n",
        "IP changed from '127.0.0.1' to '127.0.0.2', no need to change the port by 'stats socket command'\n\n",
        "Invalid addr\n\n",
    ]
    rt = _rt(fake)
    rt.set_addr("be_web", "spare1", "127.0.0.1", 8083)
    rt.set_addr("be_web", "spare1", "127.0.0.2", 8083)
    with pytest.raises(ComponentError, match="Invalid addr"):
        rt.set_addr("be_web", "spare1", "127.0.0.3", 8083)
    assert fake.commands[0] == "set server be_web/spare1 addr 127.0.0.1 port 8083\n"


def test_add_and_del_server(fake: FakeStatsSocket) -> None:
    fake.replies = [
        "New server registered.\n\n",
        "New server registered.\n\n",
        "\n",
        "Server deleted.\n",
    ]
    rt = _rt(fake)
    rt.add_server("be_web", "dyn1", "127.0.0.1", 8084, weight=100, maxconn=1)
    rt.add_server("be_web", "dyn2", "127.0.0.1", 8085, weight=100)
    rt.del_server("be_web", "dyn1")
    assert fake.commands == [
        "add server be_web/dyn1 127.0.0.1:8084 weight 100 maxconn 1\n",
        "add server be_web/dyn2 127.0.0.1:8085 weight 100\n",
        "set server be_web/dyn1 state maint\n",
        "del server be_web/dyn1\n",
    ]


def test_del_refused_maps_to_component_error(fake: FakeStatsSocket) -> None:
    fake.replies = ["\n", "Only servers in maintenance mode can be deleted.\n"]
    with pytest.raises(ComponentError) as info:
        _rt(fake).del_server("be_web", "s2")
    assert info.value.detail == (
        "'del server be_web/s2': Only servers in maintenance mode can be deleted."
    )


def test_add_refused_maps_to_component_error(fake: FakeStatsSocket) -> None:
    fake.replies = ["Backend must use a dynamic load balancing to support dynamic servers.\n\n"]
    with pytest.raises(ComponentError, match="dynamic load balancing"):
        _rt(fake).add_server("be_static", "t2", "127.0.0.1", 8086, weight=10)


def test_error_text_for_set_command(fake: FakeStatsSocket) -> None:
    fake.replies = ["Permission denied\n\n"]
    with pytest.raises(ComponentError) as info:
        _rt(fake).set_weight("be_web", "s1", 10)
    assert info.value.detail == "'set server be_web/s1 weight 10': Permission denied"


def test_show_stat(fake: FakeStatsSocket) -> None:
    fake.replies = [FIXTURE_CSV]
    stats = _rt(fake).show_stat()
    assert fake.commands == ["show stat -1 4 -1\n"]
    assert [(s.server, s.weight, s.stot) for s in stats] == [("s1", 100, 8), ("s2", 50, 16)]


def test_command_returns_raw_reply(fake: FakeStatsSocket) -> None:
    fake.replies = ["Name: HAProxy\nVersion: 2.6.12\n"]
    assert _rt(fake).command("show info") == "Name: HAProxy\nVersion: 2.6.12\n"


def test_invalid_arguments_send_nothing(fake: FakeStatsSocket) -> None:
    rt = _rt(fake)
    with pytest.raises(InputError) as info:
        rt.set_weight("be_web", "s1", 257)
    assert [p.location for p in info.value.problems] == ["weight"]
    with pytest.raises(InputError):
        rt.set_weight("be_web", "s1", -1)
    with pytest.raises(InputError) as info:
        rt.set_state("be web", "s1; shutdown sessions", "ready")
    assert [p.location for p in info.value.problems] == ["backend", "server"]
    with pytest.raises(InputError):
        rt.add_server("be_web", "d", "example.com", 0, weight=1)
    with pytest.raises(InputError):
        rt.set_maxconn("be_web", "s1", -5)
    with pytest.raises(InputError):
        rt.command("show info\nshutdown frontend fe_web")
    assert fake.commands == []


def test_missing_socket_names_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.sock"
    with pytest.raises(ComponentError) as info:
        HAProxyRuntime(path).set_weight("be_web", "s1", 1)
    assert str(path) in info.value.detail


def test_refused_socket_names_path(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # bound but never listening: connect is refused
    with pytest.raises(ComponentError) as info:
        HAProxyRuntime(path).command("show info")
    assert str(path) in info.value.detail


def test_timeout_names_path(fake: FakeStatsSocket) -> None:
    fake.hang = True
    with pytest.raises(ComponentError) as info:
        HAProxyRuntime(fake.path, timeout_s=0.2).command("show info")
    assert str(fake.path) in info.value.detail

"""Apache + php-fpm as a lab instance, on real components: brought up in the instance's namespace
and cgroup on its CPUs, serving static files and PHP pages behind HAProxy, torn down leaving
nothing; and ``ReconfigureServer`` on it: graceful changes read back as Apache and php-fpm
report them, a MaxRequestWorkers Apache would lower refused (and, asked of the actuator
directly, read back as what Apache lowered it to), a refused configuration and a php-fpm that
does not come back rolled back with the service still answering, MaxRequestWorkers online as
HAProxy's maxconn and php-fpm's pool online by its reload alone. The bring-up runs the event MPM, the reconfigurations the worker MPM (a
thread per connection, kept-alive ones included)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quell.actuate.apache import ApacheConfig, ServerSettings
from quell.core.action import ReconfigureServer
from quell.core.observation import SERVER_SETTING_KEYS, THROTTLED_KEY, Observation
from quell.errors import ActionError
from quell.lab.apache import ApacheInstance, wanted
from quell.lab.balancer import BACKEND
from quell.lab.environment import LabEnvironment
from quell.scenario import parse_scenario
from quell.signals.apache import read_children
from quell.signals.cgroup import detect_layout
from tests.lab.leftovers import leftovers

pytestmark = pytest.mark.lab

MRW, KAT, PHP = (SERVER_SETTING_KEYS[k] for k in SERVER_SETTING_KEYS)
PAGE_BYTES = 3000
PAGE_CHUNKED = len(b"bb8\r\n") + PAGE_BYTES + len(b"\r\n0\r\n\r\n")
"""Apache sends what php-fpm answers chunked (it drops the length), and the load generator
counts the body as it comes: one chunk of 0xbb8 bytes and the last, empty one."""


def scenario(mpm: str) -> dict[str, Any]:
    return {
        "name": f"apache-{mpm}",
        "duration_s": 120,
        "hosts": [{"id": "h1", "cpus": [0]}],
        "instances": [
            {
                "id": "web",
                "host": "h1",
                "server": "apache",
                "apache": {
                    "mpm": mpm,
                    "threads_per_child": 4,
                    "server_limit": 6,
                    "max_request_workers": 12,
                    "keepalive_timeout_s": 5,
                    "php_max_children": 3,
                },
            }
        ],
        "load_balancer": {"http_reuse": "never"},
        "files": [{"path": "/x.bin", "size_bytes": 5000}],
        "pages": [
            {
                "path": "/app/p.php",
                "working_set_bytes": 1 << 20,
                "touches": 20000,
                "response_bytes": PAGE_BYTES,
            }
        ],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": 12},
            "requests": [{"path": "/x.bin"}, {"path": "/app/p.php"}],
            "timeout_s": 3,
            "cpus": [1],
        },
    }


def lab(tmp_path: Path, mpm: str) -> LabEnvironment:
    return LabEnvironment(
        parse_scenario(scenario(mpm)), tmp_path, tmp_path / "run", detect_layout()
    )


def step(env: LabEnvironment, seconds: float = 1.0) -> Observation:
    env.clock.sleep_until(env.clock.now() + seconds)
    return env.observe().instances["web"]


def answered(env: LabEnvironment, seconds: int) -> tuple[int, int, set[int]]:
    """Requests sent over the next ``seconds`` answered well and badly (by send time: one sent
    before, during a change, is not counted), and the body sizes of the good."""
    start = env.clock.now()
    env.take_requests()
    step(env, seconds + 0.5)  # the last of them answered too
    sent = [r for r in env.take_requests() if start <= r.send_s < start + seconds]
    good = [r for r in sent if r.status == 200 and not r.error]
    return len(good), len(sent) - len(good), {r.bytes for r in good}


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_apache_and_php_fpm_come_up_in_the_instance_s_place_and_leave_nothing(
    tmp_path: Path,
) -> None:
    env = lab(tmp_path, "event")
    try:
        env.start()
        ok, bad, sizes = answered(env, 3)
        assert ok >= 20 and bad == 0, (ok, bad)
        assert sizes == {5000, PAGE_CHUNKED}  # static files and the PHP page
        inst = env.instances["web"]
        apache = inst.apache
        assert apache is not None
        master = apache.procs["php-fpm"].pid
        pool = read_children(master)
        assert len(pool) == 3
        in_group = set(inst.group.pids())
        workers = read_children(inst.server.pid)
        assert len(workers) == 3  # 12 threads in children of 4
        for pid in [inst.server.pid, *workers, master, *pool]:
            assert pid in in_group, pid
            assert status_of(pid)["Cpus_allowed_list"] == "0", pid
        conf = apache.paths.httpd_conf
        assert conf.is_relative_to(env.testbed.work)
        assert "/etc/apache2" not in conf.read_text()
        obs = step(env)
        assert (obs.extra[MRW], obs.extra[KAT], obs.extra[PHP]) == (12.0, 5.0, 3.0)
        assert obs.extra[THROTTLED_KEY] == 0.0  # measured; no cap, so never throttled
    finally:
        env.close()
    assert leftovers(env.tag.value) == {"netns": [], "cgroups": [], "processes": [], "files": []}
    logs = env.run_dir / "logs"
    assert "resuming normal operations" in (logs / "server-web.log").read_text()
    assert "ready to handle connections" in (logs / "php-fpm-web.log").read_text()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabEnvironment]:
    """One worker-MPM lab for the reconfiguration tests, one after the other."""
    env = lab(tmp_path_factory.mktemp("apache"), "worker")
    try:
        env.start()
        step(env)
        yield env
    finally:
        env.close()
    assert leftovers(env.tag.value) == {"netns": [], "cgroups": [], "processes": [], "files": []}


def apache_of(env: LabEnvironment) -> ApacheInstance:
    apache = env.instances["web"].apache
    assert apache is not None
    return apache


def test_max_request_workers_after_a_graceful_reload_is_what_apache_runs(
    shared: LabEnvironment,
) -> None:
    apache = apache_of(shared)
    before = apache.server.status().config_generation
    shared.apply([ReconfigureServer("web", {"max_request_workers": 8, "keepalive_timeout_s": 2})])
    obs = step(shared)
    assert (obs.extra[MRW], obs.extra[KAT], obs.extra[PHP]) == (8.0, 2.0, 3.0)
    seen = apache.server.wait_for_workers(8)  # server-status: 8 threads of a new generation
    assert seen.config_generation > before
    assert "MaxRequestWorkers 8\n" in apache.paths.httpd_conf.read_text()
    shared.apply([ReconfigureServer("web", {"max_request_workers": 12, "keepalive_timeout_s": 5})])
    assert apache.server.wait_for_workers(12).workers == 12
    assert step(shared).extra[MRW] == 12.0


def test_a_max_request_workers_apache_would_lower_is_refused_or_read_back_as_what_it_uses(
    shared: LabEnvironment,
) -> None:
    apache = apache_of(shared)
    conf = apache.paths.httpd_conf.read_text()
    with pytest.raises(ActionError) as caught:
        shared.apply([ReconfigureServer("web", {"max_request_workers": 10})])
    assert "must be a multiple of threads_per_child (4)" in caught.value.failed[0][1]
    assert apache.paths.httpd_conf.read_text() == conf
    assert step(shared).extra[MRW] == 12.0
    # Asked of the actuator directly, 10 threads in children of 4: Apache runs 8 and says so
    # only in ``apache2 -t`` (its log at the restart is silent about it).
    odd = apache.settings.model_copy(update={"max_request_workers": 10})
    got = apache.server.reconfigure(apache.render(odd), ServerSettings(10, 5, 3))
    assert got.max_request_workers == 8
    assert "MaxRequestWorkers 10\n" in apache.paths.httpd_conf.read_text()
    assert apache.server.wait_for_workers(8).workers == 8  # server-status agrees
    assert step(shared).extra[MRW] == 8.0
    apache.server.reconfigure(apache.render(apache.settings), wanted(apache.settings))
    assert apache.server.wait_for_workers(12).workers == 12


def test_php_fpm_s_children_after_a_reload_are_its_new_pool(shared: LabEnvironment) -> None:
    apache = apache_of(shared)
    master = apache.procs["php-fpm"].pid
    old = set(read_children(master))
    shared.apply([ReconfigureServer("web", {"php_max_children": 5})])
    pool = set(read_children(master))
    assert len(pool) == 5 and not pool & old
    assert pool <= set(shared.instances["web"].group.pids())
    for pid in pool:
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"php-fpm: pool www")
    assert step(shared).extra[PHP] == 5.0
    shared.apply([ReconfigureServer("web", {"php_max_children": 3})])
    assert len(read_children(master)) == 3


def test_a_configuration_apache_refuses_is_not_applied_and_names_its_message(
    shared: LabEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    apache = apache_of(shared)
    render = apache.render
    monkeypatch.setattr(
        apache,
        "render",
        lambda s: dataclasses.replace(render(s), httpd=render(s).httpd + "NoSuchDirective on\n"),
    )
    before = apache.paths.httpd_conf.read_text()
    with pytest.raises(ActionError) as caught:
        shared.apply([ReconfigureServer("web", {"max_request_workers": 8})])
    why = caught.value.failed[0][1]
    assert "Invalid command 'NoSuchDirective'" in why
    assert apache.paths.httpd_conf.read_text() == before
    ok, bad, _ = answered(shared, 2)
    assert ok > 0 and bad == 0
    assert step(shared).extra[MRW] == 12.0


def test_a_php_fpm_that_does_not_come_back_is_rolled_back_and_the_pages_answer(
    shared: LabEnvironment, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    apache = apache_of(shared)
    render = apache.render

    def unreachable_socket(s: Any) -> ApacheConfig:
        good = render(s)
        broken = good.php_fpm.replace("/run/php-fpm.sock", "/missing/php-fpm.sock")
        return dataclasses.replace(good, php_fpm=broken)  # php-fpm -t accepts it

    monkeypatch.setattr(apache, "render", unreachable_socket)
    first = apache.procs["php-fpm"]
    with (
        caplog.at_level(logging.WARNING, "quell.actuate.apache"),
        pytest.raises(ActionError) as caught,
    ):
        shared.apply([ReconfigureServer("web", {"php_max_children": 4})])
    why = caught.value.failed[0][1]
    assert "rolled back to the last configuration that worked" in why
    logged = [r.getMessage() for r in caplog.records if r.name == "quell.actuate.apache"]
    assert logged[0].startswith("reconfiguration failed (php-fpm: ")
    assert logged[-1].startswith("rolled back to ServerSettings(max_request_workers=12, ")
    assert not first.alive()  # it died on its reload...
    again = apache.procs["php-fpm"]
    assert again.alive() and len(read_children(again.pid)) == 3  # ...and runs again as before
    assert again in shared.instances["web"].processes
    ok, bad, sizes = answered(shared, 2)
    assert ok > 0 and bad == 0 and PAGE_CHUNKED in sizes
    assert len(apache.fetch("/app/p.php")) == PAGE_BYTES
    assert step(shared).extra[PHP] == 3.0


def test_online_max_request_workers_is_haproxy_s_maxconn_and_php_children_a_php_fpm_reload(
    shared: LabEnvironment,
) -> None:
    apache = apache_of(shared)
    conf = apache.paths.httpd_conf.read_text()
    shared.apply([ReconfigureServer("web", {"max_request_workers": 5}, graceful=False)])
    obs = step(shared)
    assert obs.extra[MRW] == 5.0 and obs.extra["lb_maxconn"] == 5.0
    rt = shared.runtime
    assert rt is not None
    slim = {s.server: s.slim for s in rt.show_stat() if s.backend == BACKEND}
    assert slim["web"] == 5
    assert apache.paths.httpd_conf.read_text() == conf  # Apache itself untouched
    # php-fpm's pool online: php-fpm reloads, Apache (its parent and children) does not restart
    parent = apache.procs["apache"].pid
    children = set(read_children(parent))
    master = apache.procs["php-fpm"].pid
    shared.apply(
        [ReconfigureServer("web", {"max_request_workers": 8, "php_max_children": 4}, False)]
    )
    assert len(read_children(master)) == 4
    assert set(read_children(parent)) == children and apache.procs["apache"].pid == parent
    assert apache.paths.httpd_conf.read_text() == conf
    obs = step(shared)
    assert (obs.extra[MRW], obs.extra[PHP], obs.extra["lb_maxconn"]) == (8.0, 4.0, 8.0)
    shared.apply([ReconfigureServer("web", {"php_max_children": 3}, graceful=False)])
    assert len(read_children(master)) == 3
    for settings, why in [
        ({"keepalive_timeout_s": 9}, "cannot change online"),
        ({"max_request_workers": 13}, "online it can only go as high as the 12 Apache runs"),
    ]:
        with pytest.raises(ActionError) as caught:
            shared.apply([ReconfigureServer("web", settings, graceful=False)])
        assert why in caught.value.failed[0][1]
    shared.apply([ReconfigureServer("web", {"max_request_workers": 12})])  # graceful lifts it
    obs = step(shared)
    assert obs.extra[MRW] == 12.0 and "lb_maxconn" not in obs.extra

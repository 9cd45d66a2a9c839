"""An apache instance's configurations, pages and settings, without a lab: what is rendered,
that Apache and php-fpm accept it (their own ``-t``), that a page answers what it says, and
that every setting a ``ReconfigureServer`` cannot have is named at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from quell.actuate.apache import OnlineChange, online_change
from quell.errors import InputError
from quell.lab.apache import (
    ApachePaths,
    httpd_config,
    keepalive_directive,
    page_source,
    php_fpm_argv,
    php_fpm_config,
    preload_file,
    settings_after,
    working_set_file,
    write_pages,
)
from quell.scenario.model import ApacheSettings, PhpPage

SETTINGS = ApacheSettings(
    mpm="worker",
    threads_per_child=8,
    server_limit=6,
    max_request_workers=24,
    keepalive_timeout_s=2.5,
    php_max_children=5,
)
PAGE = PhpPage(path="/app/p.php", working_set_bytes=4096, touches=1000, response_bytes=1234)


def paths(tmp_path: Path) -> ApachePaths:
    return ApachePaths(tmp_path / "i-web", tmp_path / "logs" / "server-web.log")


def directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if name and name[0].isupper():
            out[name] = value
    return out


def test_apache_s_pool_is_fixed_at_max_request_workers_and_pre_sized_by_server_limit(
    tmp_path: Path,
) -> None:
    text = httpd_config(paths(tmp_path), SETTINGS, "10.77.1.1", 80, tmp_path / "www")
    d = directives(text)
    assert d["Listen"] == "10.77.1.1:80"
    assert d["ServerLimit"] == "6" and d["ThreadLimit"] == "8" and d["ThreadsPerChild"] == "8"
    assert d["MaxRequestWorkers"] == "24"
    assert d["StartServers"] == "3"  # every child at once
    assert d["MinSpareThreads"] == "24"  # and again after a graceful restart
    assert d["MaxSpareThreads"] == "32"  # never one stopped for being idle
    assert d["KeepAliveTimeout"] == "2500ms"
    assert "LoadModule mpm_worker_module /usr/lib/apache2/modules/mod_mpm_worker.so\n" in text
    assert d["PidFile"] == f'"{tmp_path}/i-web/run/httpd.pid"'
    assert d["ErrorLog"] == '"/proc/self/fd/2"'  # the supervisor's log


def test_keep_alive_in_whole_seconds_or_milliseconds() -> None:
    assert keepalive_directive(5) == "KeepAliveTimeout 5"
    assert keepalive_directive(5.0) == "KeepAliveTimeout 5"
    assert keepalive_directive(0.25) == "KeepAliveTimeout 250ms"


def test_php_fpm_s_pool_is_static_and_a_reload_lets_busy_children_finish(tmp_path: Path) -> None:
    text = php_fpm_config(paths(tmp_path), SETTINGS, 10, 200 << 20)
    assert "pm = static\n" in text and "pm.max_children = 5\n" in text
    assert "process_control_timeout = 10s\n" in text
    assert "daemonize = no\n" in text
    assert f"listen = {tmp_path}/i-web/run/php-fpm.sock\n" in text
    argv = php_fpm_argv(paths(tmp_path), [PAGE])
    assert "opcache.memory_consumption=65" in argv and "opcache.validate_timestamps=0" in argv
    assert not [a for a in argv if a.startswith("opcache.preload")]
    argv = php_fpm_argv(paths(tmp_path), [PAGE], tmp_path / "ws" / "preload.php")
    assert argv[-4:] == [
        "-d",
        f"opcache.preload={tmp_path}/ws/preload.php",
        "-d",
        "opcache.preload_user=www-data",
    ]


@pytest.mark.skipif(shutil.which("apache2") is None, reason="apache2 is not installed")
@pytest.mark.parametrize("mpm", ["worker", "event"])
def test_apache_accepts_the_configuration_it_is_given(tmp_path: Path, mpm: str) -> None:
    p = paths(tmp_path)
    (tmp_path / "www").mkdir()
    p.run.mkdir(parents=True)
    settings = SETTINGS.model_copy(update={"mpm": mpm})
    p.httpd_conf.write_text(httpd_config(p, settings, "127.0.0.1", 80, tmp_path / "www"))
    done = subprocess.run(
        ["apache2", "-t", "-f", str(p.httpd_conf)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "Syntax OK"  # nothing lowered, nothing warned


@pytest.mark.skipif(shutil.which("php-fpm8.2") is None, reason="php-fpm8.2 is not installed")
def test_php_fpm_accepts_the_configuration_it_is_given(tmp_path: Path) -> None:
    p = paths(tmp_path)
    p.run.mkdir(parents=True)
    p.php_fpm_conf.write_text(php_fpm_config(p, SETTINGS, 10, 200 << 20))
    done = subprocess.run(
        ["php-fpm8.2", "-t", "-y", str(p.php_fpm_conf)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


@pytest.mark.skipif(shutil.which("php") is None, reason="the PHP command line is not installed")
def test_a_page_reads_its_working_set_and_answers_its_response_bytes(tmp_path: Path) -> None:
    write_pages(tmp_path / "www", tmp_path / "ws", [PAGE], seed=3)
    ws = working_set_file(tmp_path / "ws", 0)
    literal = ws.read_bytes()
    assert literal.startswith(b"<?php return '") and literal.endswith(b"';\n")
    assert len(literal) - len(b"<?php return '';\n") == PAGE.working_set_bytes
    assert set(literal[14:-3]) <= set(b"abcdefghijklmnopqrstuvwxyz")
    page = tmp_path / "www" / "app" / "p.php"
    assert page.read_text() == page_source(PAGE, ws)
    done = subprocess.run(["php", str(page)], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"x" * PAGE.response_bytes


@pytest.mark.skipif(shutil.which("php") is None, reason="the PHP command line is not installed")
def test_the_preload_script_puts_every_working_set_in_opcache(tmp_path: Path) -> None:
    pages = [PAGE, PAGE.model_copy(update={"path": "/app/q.php", "working_set_bytes": 4096})]
    write_pages(tmp_path / "www", tmp_path / "ws", pages, seed=3)
    sets = [str(working_set_file(tmp_path / "ws", k)) for k in range(2)]
    show = tmp_path / "show.php"
    show.write_text(
        "<?php echo json_encode(opcache_get_status(false)['preload_statistics']['scripts']);"
    )
    argv = ["php", "-d", "opcache.enable_cli=1", "-d", "opcache.memory_consumption=64"]
    argv += ["-d", f"opcache.preload={preload_file(tmp_path / 'ws')}"]
    if os.geteuid() == 0:  # as root PHP wants a user to preload as (the lab: the pool's)
        argv += ["-d", "opcache.preload_user=root"]
    done = subprocess.run([*argv, str(show)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)) == sorted([*sets, str(preload_file(tmp_path / "ws"))])
    page = tmp_path / "www" / "app" / "p.php"
    done = subprocess.run([*argv, str(page)], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"x" * PAGE.response_bytes


def problems(caught: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in caught.value.problems]


def test_a_graceful_change_is_checked_against_everything_an_instance_allows() -> None:
    after = settings_after(SETTINGS, {"max_request_workers": 40, "keepalive_timeout_s": 10})
    assert (after.max_request_workers, after.keepalive_timeout_s) == (40, 10.0)
    assert after.server_limit == 6 and after.php_max_children == 5
    with pytest.raises(InputError) as caught:
        settings_after(SETTINGS, {"max_children": 4, "php_max_children": 2.5})
    assert problems(caught) == [
        "settings.max_children: apache instances have no such setting "
        "(max_request_workers, keepalive_timeout_s, php_max_children)",
        "settings.php_max_children: 2.5 is not a whole number",
    ]
    with pytest.raises(InputError) as caught:
        settings_after(SETTINGS, {"max_request_workers": 52})
    assert problems(caught) == [
        "settings: Value error, max_request_workers (52) must be a multiple of threads_per_child "
        "(8); max_request_workers (52) must be at most server_limit × threads_per_child (48)"
    ]
    with pytest.raises(InputError) as caught:
        settings_after(SETTINGS, {"php_max_children": 1000})
    assert problems(caught) == ["settings.php_max_children: 1000 is over the lab's 512"]


def test_online_workers_go_to_the_balancer_and_php_children_to_a_php_fpm_reload() -> None:
    assert online_change({"max_request_workers": 13}, ceiling=24) == OnlineChange(13, {})
    assert online_change({"php_max_children": 64}, ceiling=24) == OnlineChange(
        None, {"php_max_children": 64}
    )
    assert online_change({"max_request_workers": 24, "php_max_children": 4}, ceiling=24) == (
        OnlineChange(24, {"php_max_children": 4})
    )
    with pytest.raises(InputError) as caught:
        online_change(
            {"max_request_workers": 30, "keepalive_timeout_s": 9, "php_max_children": 8.5},
            ceiling=24,
        )
    assert problems(caught) == [
        "settings.php_max_children: 8.5 is not a whole number",
        "graceful: keepalive_timeout_s cannot change online: Apache reads KeepAliveTimeout only "
        "when it restarts its children; send it with graceful=True",
        "settings.max_request_workers: 30 is not in 1..24: online it can only go as high as "
        "the 24 Apache runs (raise that with graceful=True)",
    ]
    with pytest.raises(InputError, match="nothing to change online"):
        online_change({}, ceiling=24)

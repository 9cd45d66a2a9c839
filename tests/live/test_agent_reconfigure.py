"""The agent's Apache + php-fpm section, without servers: the settings in force exported from
the files exactly, every request that may not change them refused with nothing written, and
files that do not hold each setting once refused when the agent starts. (The reconfiguration
itself, on real servers: tests/lab/test_live_apache_lab.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from quell.errors import InputError
from quell.lab.apache import ApachePaths, httpd_config, php_fpm_config
from quell.live.agent import Agent
from quell.live.config import AgentConfig, agent_problems, parse_config
from tests.lab.test_apache_config import SETTINGS
from tests.live.agents import TOKEN, cgroup_tree


def config(tmp_path: Path, allow: list[str], **apache: Any) -> AgentConfig:
    p = ApachePaths(tmp_path / "i-a", tmp_path / "server-a.log")
    p.base.mkdir(exist_ok=True)
    p.httpd_conf.write_text(httpd_config(p, SETTINGS, "127.0.0.1", 80, tmp_path / "www"))
    p.php_fpm_conf.write_text(php_fpm_config(p, SETTINGS, 10, 200 << 20))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    section = {
        "httpd_conf": str(p.httpd_conf),
        "php_fpm_conf": str(p.php_fpm_conf),
        "httpd_pid_file": str(p.run / "httpd.pid"),
        "php_fpm_pid_file": str(p.run / "php-fpm.pid"),
        "error_log": str(p.error_log),
        **apache,
    }
    return parse_config(
        AgentConfig,
        {
            "host": "h1",
            "listen": {"port": 1},
            "token_file": str(token),
            "allow": allow,
            "instances": [{"id": "a", "cgroup": "svc", "apache": section}],
        },
        "<test>",
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Agent, str, AgentConfig]]:
    (tmp_path / "cg").mkdir()
    cfg = config(tmp_path, ["reconfigure"])
    agent = Agent(
        cfg.model_copy(update={"listen": cfg.listen.model_copy(update={"port": 0})}),
        cgroup_tree(tmp_path / "cg"),
    )
    agent.start()
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    try:
        yield agent, f"http://127.0.0.1:{agent.port}", cfg
    finally:
        agent.stop()


def test_the_settings_in_force_are_exported(served: tuple[Agent, str, AgentConfig]) -> None:
    _, url, _ = served
    lines = set(httpx.get(f"{url}/metrics").text.splitlines())
    assert 'quell_server_max_request_workers{host="h1",instance="a"} 24.0' in lines
    assert 'quell_server_keepalive_timeout_seconds{host="h1",instance="a"} 2.5' in lines
    assert 'quell_server_php_max_children{host="h1",instance="a"} 5.0' in lines


@pytest.mark.parametrize(
    ("token", "body", "status", "says"),
    [
        (None, {"instance": "a", "settings": {"php_max_children": 6}}, 401, "token"),
        ("wrong-token-wrong-token", {"instance": "a", "settings": {}}, 401, "wrong token"),
        (TOKEN, {"instance": "b", "settings": {"php_max_children": 6}}, 404, "no instance 'b'"),
        (TOKEN, {"instance": "a", "settings": {}}, 400, "non-empty"),
        (TOKEN, {"instance": "a", "settings": {"max_children": 6}}, 400, "max_children=6"),
        (TOKEN, {"instance": "a", "settings": {"php_max_children": 6.5}}, 400, "6.5"),
        (TOKEN, {"instance": "a", "settings": {"keepalive_timeout_s": 0}}, 400, "=0"),
        (TOKEN, {"instance": "a", "settings": {"max_request_workers": True}}, 400, "True"),
    ],
)
def test_a_request_that_may_not_change_them_is_refused_with_nothing_written(
    served: tuple[Agent, str, AgentConfig],
    token: str | None,
    body: dict[str, Any],
    status: int,
    says: str,
) -> None:
    _, url, cfg = served
    spec = cfg.instances[0].apache
    assert spec is not None
    before = {f: Path(f).read_text() for f in (spec.httpd_conf, spec.php_fpm_conf)}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(f"{url}/v1/reconfigure", json=body, headers=headers)
    assert r.status_code == status and says in r.json()["error"], r.text
    assert {f: Path(f).read_text() for f in before} == before
    assert not list(Path(spec.httpd_conf).parent.glob("*.new"))


def test_reconfigure_must_be_allowed_and_needs_an_apache_section(tmp_path: Path) -> None:
    cfg = config(tmp_path, ["reconfigure"])
    bare = cfg.model_copy(
        update={"instances": [cfg.instances[0].model_copy(update={"apache": None})]}
    )
    assert [p.message for p in agent_problems(bare)] == [
        "'reconfigure' needs an instance with 'apache'"
    ]


def test_files_without_each_setting_once_are_refused_when_the_agent_starts(
    tmp_path: Path,
) -> None:
    (tmp_path / "cg").mkdir()
    cfg = config(tmp_path, [])
    spec = cfg.instances[0].apache
    assert spec is not None
    Path(spec.php_fpm_conf).write_text("[www]\npm = static\n")
    with pytest.raises(InputError) as err:
        Agent(cfg, cgroup_tree(tmp_path / "cg"))
    assert err.value.source == "instance a"
    assert [p.location for p in err.value.problems] == ["php_max_children"]

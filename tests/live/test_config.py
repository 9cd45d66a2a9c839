"""Agent and live configs are checked like scenarios: every problem at once, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.cli import main
from quell.errors import InputError
from quell.live.config import load_agent_config, load_live_config

BAD_AGENT = """
host: h1
listen: {addr: not-an-ip, port: 70000}
allow: [cpu_cap]
instances:
  - {id: a, cgroup: x, pid_file: /run/a.pid}
  - {id: a, cgroup: ../escape}
  - {id: b, colour: red}
"""

BAD_LIVE = """
prometheus: {url: "ftp://x"}
haproxy: {socket: /x.sock, backend: "be web", log_socket: /l.sock}
agents: {h9: "http://127.0.0.1:1"}
instances:
  - {id: a, host: h1, slot: true}
policy: {name: nosuch}
scaling: {min_instances: 3, max_instances: 2}
"""


def problems(exc: InputError) -> set[str]:
    return {p.location for p in exc.problems}


def test_an_agent_config_reports_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(BAD_AGENT)
    with pytest.raises(InputError) as caught:
        load_agent_config(path)
    assert problems(caught.value) == {"listen.addr", "listen.port", "instances[2].colour"}
    path.write_text(
        BAD_AGENT.replace("addr: not-an-ip, port: 70000", "port: 9000").replace(
            "  - {id: b, colour: red}\n", ""
        )
    )
    with pytest.raises(InputError) as caught:
        load_agent_config(path)
    assert problems(caught.value) == {"instances", "instances[0]", "instances[1].cgroup", "allow"}


def test_a_live_config_reports_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    path.write_text(BAD_LIVE)
    with pytest.raises(InputError) as caught:
        load_live_config(path)
    assert problems(caught.value) == {"prometheus.url", "haproxy.backend", "policy.name"}
    fixed = BAD_LIVE.replace('"ftp://x"', '"http://127.0.0.1:9090"').replace('"be web"', "be")
    path.write_text(fixed.replace("nosuch", "rr"))
    with pytest.raises(InputError) as caught:
        load_live_config(path)
    assert problems(caught.value) == {
        "instances",
        "agents.h9",
        "scaling.max_instances",
        "scaling.min_instances",
        "token_file",
    }


@pytest.mark.parametrize("command", [["agent"], ["live", "run"]])
def test_the_commands_refuse_a_bad_config_with_exit_2(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_AGENT if command == ["agent"] else BAD_LIVE)
    with pytest.raises(SystemExit) as caught:
        main([*command, "--config", str(path)])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "problem(s)" in err and "Traceback" not in err


def test_the_shipped_examples_are_valid() -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    assert load_agent_config(deploy / "agent.yaml").listen.addr == "127.0.0.1"
    cfg = load_live_config(deploy / "live.yaml")
    assert cfg.listen is not None and cfg.listen.addr == "127.0.0.1"

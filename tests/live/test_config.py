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


def test_lab_up_configs_give_prima_the_context_the_scenario_gives_it(tmp_path: Path) -> None:
    from quell.lab.standing import write_live_configs
    from quell.live.controller import make_policy, policy_context
    from quell.scenario import load_scenario
    from quell.scenario.policy import policy_context as scenario_context

    path = Path(__file__).resolve().parents[2] / "scenarios" / "prima" / "demo.yaml"
    scenario = load_scenario(path)
    state = {
        "haproxy": {"socket": "/x/haproxy.sock", "backend": "be", "log_socket": "/x/log.sock"},
        "client_netns": "/run/netns/x",
        "probe": {"period_s": 1.0, "size_bytes": 500000},
        "instances": [
            {
                "id": "i1",
                "host": "h1",
                "cgroup": "g1",
                "slot": False,
                "probe_url": "http://10.77.1.2:8081/p",
            },
            {
                "id": "h2s1",
                "host": "h2",
                "cgroup": "g2",
                "slot": True,
                "probe_url": "http://10.77.1.3:8081/p",
            },
            {
                "id": "h3s1",
                "host": "h3",
                "cgroup": "g3",
                "slot": True,
                "probe_url": "http://10.77.1.4:8081/p",
            },
        ],
    }
    write_live_configs(tmp_path, scenario, state, path.parent)
    cfg = load_live_config(tmp_path / "live.yaml")
    live = policy_context(cfg, path.parent)
    ref = scenario_context(scenario, path.parent)
    assert live.target_rt_s == ref.target_rt_s == 0.014
    assert live.interval_s == ref.interval_s
    assert live.probe_period_s == ref.probe_period_s
    assert live.probe_util_pct == ref.probe_util_pct
    assert live.scaling is not None and ref.scaling is not None
    assert tuple(live.scaling.hosts) == tuple(ref.scaling.hosts) == ("h2", "h3")
    assert live.scaling.min_instances == ref.scaling.min_instances
    assert live.scaling.max_instances == ref.scaling.max_instances
    assert dict(live.initial_instances) == dict(ref.initial_instances) == {"i1": "h1"}
    policy = make_policy(cfg, tmp_path)
    assert policy.name == "prima"
    # the controller decides at its interval only: the defaults' fast path is off, and one asked
    # for by name is refused, not left unused
    assert "fast_interval_s" not in cfg.policy.params
    assert getattr(policy, "fast_interval_s", "absent") is None
    fast = cfg.model_copy(
        update={
            "policy": cfg.policy.model_copy(
                update={"params": {**cfg.policy.params, "fast_interval_s": 1.0}}
            )
        }
    )
    with pytest.raises(InputError, match="fast_interval_s"):
        make_policy(fast, tmp_path)
    for host in ("h1", "h2", "h3"):
        assert load_agent_config(tmp_path / f"agent-{host}.yaml").host == host

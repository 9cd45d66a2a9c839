"""The agent on a recorded cgroup v2 tree: exact values on /metrics in the Prometheus text
format, and its one state-changing endpoint refused (401, nothing written) without the token,
off (404) unless allowed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from quell.live.agent import Agent
from tests.live.agents import TOKEN, agent_at


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Agent, str]]:
    (tmp_path / "cg").mkdir()
    agent = agent_at(tmp_path, getattr(request, "param", ["cpu_cap"]))
    agent.start()
    thread = threading.Thread(target=agent.serve_forever, daemon=True)
    thread.start()
    try:
        yield agent, f"http://127.0.0.1:{agent.port}"
    finally:
        agent.stop()


def test_metrics_carry_the_cgroup_values_with_units(served: tuple[Agent, str]) -> None:
    agent, url = served
    assert agent.server is not None and agent.server.server_address[0] == "127.0.0.1"
    text = httpx.get(f"{url}/metrics").text
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    assert 'quell_cgroup_cpu_usage_seconds_total{host="h1",instance="a"} 1.5' in lines
    assert 'quell_cgroup_cpu_pressure_some_seconds_total{host="h1",instance="a"} 0.123456' in lines
    assert 'quell_cgroup_cpu_throttled_seconds_total{host="h1",instance="a"} 0.25' in lines
    assert 'quell_instance_up{host="h1",instance="a"} 0.0' in lines  # no process in it
    assert not any(line.startswith("quell_cgroup_cpu_cap_cpus{") for line in lines)
    assert "# TYPE quell_cgroup_cpu_usage_seconds_total counter" in text


def test_a_cap_without_the_token_is_refused_and_changes_nothing(
    served: tuple[Agent, str], tmp_path: Path
) -> None:
    _, url = served
    cpu_max = tmp_path / "cg" / "svc" / "cpu.max"
    body = {"instance": "a", "cpus": 0.5}
    for headers in ({}, {"Authorization": "Bearer wrong-token-wrong"}, {"Authorization": TOKEN}):
        r = httpx.post(f"{url}/v1/cpu-cap", json=body, headers=headers)
        assert r.status_code == 401
        assert cpu_max.read_text() == "max 100000\n"
    r = httpx.post(f"{url}/v1/cpu-cap", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert cpu_max.read_text() == "50000 100000\n"
    text = httpx.get(f"{url}/metrics").text
    assert 'quell_cgroup_cpu_cap_cpus{host="h1",instance="a"} 0.5' in text


@pytest.mark.parametrize("served", [[]], indirect=True)
def test_a_cap_is_off_unless_allowed(served: tuple[Agent, str], tmp_path: Path) -> None:
    _, url = served
    r = httpx.post(
        f"{url}/v1/cpu-cap",
        json={"instance": "a", "cpus": 0.5},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 404
    assert (tmp_path / "cg" / "svc" / "cpu.max").read_text() == "max 100000\n"

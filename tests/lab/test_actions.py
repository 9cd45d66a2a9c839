"""Policy actions reach the real load balancer and cgroups: the traffic follows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.core.action import AddInstance, SetCpuCap, SetWeight
from quell.lab.environment import LabEnvironment
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout
from tests.lab.leftovers import leftovers

pytestmark = pytest.mark.lab


def scenario(algorithm: str = "roundrobin") -> dict:
    return {
        "name": "actions",
        "duration_s": 30,
        "hosts": [{"id": "h1"}, {"id": "h2"}],
        "instances": [{"id": "a", "host": "h1"}, {"id": "b", "host": "h2"}],
        "load_balancer": {"algorithm": algorithm},
        "files": [{"path": "/x.bin", "size_bytes": 5000}],
        "workload": {
            "arrival": {"process": "deterministic", "rate_rps": 40},
            "requests": [{"path": "/x.bin"}],
        },
    }


def run_for(env: LabEnvironment, seconds: float) -> dict[str, int]:
    """Observe once per second for ``seconds``; count answered requests per instance."""
    counts: dict[str, int] = {}
    t = env.clock.now()
    for k in range(1, int(seconds) + 1):
        env.clock.sleep_until(t + k)
        snap = env.observe()
        for iid, obs in snap.instances.items():
            counts[iid] = counts.get(iid, 0) + obs.requests
    return counts


def test_weights_additions_and_cpu_caps_take_effect(tmp_path: Path) -> None:
    s = parse_scenario(scenario())
    env = LabEnvironment(s, tmp_path, tmp_path / "run", detect_layout())
    try:
        env.start()
        run_for(env, 2)
        even = run_for(env, 3)
        assert abs(even["a"] - even["b"]) <= 2, even
        env.apply([SetWeight("a", 0)])
        run_for(env, 1)  # requests in flight at the change
        drained = run_for(env, 3)
        assert drained["a"] == 0 and drained["b"] >= 100, drained
        snap = env.observe()
        assert snap.instances["a"].weight == 0 and snap.instances["b"].weight == 100
        env.apply([AddInstance("c", "h2", weight=100)])
        run_for(env, 2)
        shared = run_for(env, 3)
        assert shared["c"] >= 40 and shared["b"] >= 40 and shared["a"] == 0, shared
        env.apply([SetCpuCap("c", 0.2)])
        quota = (env.layout.cpu or env.layout.root) / env.instances["c"].group.name
        text = (
            (quota / "cpu.cfs_quota_us").read_text()
            if env.layout.version == "v1"
            else (quota / "cpu.max").read_text()
        )
        assert text.split()[0] == "20000"
    finally:
        env.close()
    assert leftovers(env.tag.value) == {"netns": [], "cgroups": [], "processes": [], "files": []}

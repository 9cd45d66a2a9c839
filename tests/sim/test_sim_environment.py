"""SimEnvironment behind the Environment protocol: interference, actions, determinism, scale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quell.core.action import AddInstance, RemoveInstance, SetCpuCap, SetWeight
from quell.core.observation import Snapshot
from quell.errors import ActionError, InputError
from quell.experiment.run import scenario_loop
from quell.policy.static import StaticPolicy
from quell.scenario import parse_scenario
from quell.scenario.model import Scenario
from quell.sim import SimEnvironment

ROOT = Path(__file__).resolve().parents[2]


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "t",
        "seed": 7,
        "duration_s": 45,
        "interval_s": 1,
        "hosts": [{"id": "h1", "link_mbit": 100}, {"id": "h2", "link_mbit": 100}],
        "instances": [{"id": "i1", "host": "h1"}, {"id": "i2", "host": "h2"}],
        "files": [{"path": "/f", "size_bytes": 102400}],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": 85.4},
            "requests": [{"path": "/f"}],
        },
        "antagonists": [{"id": "noise", "kind": "iperf3", "host": "h2", "streams": 2}],
        "events": [
            {"at_s": 15, "phase": "interference", "start": ["noise"]},
            {"at_s": 30, "phase": "recovery", "stop": ["noise"]},
        ],
        "service": {},
    }
    base.update(over)
    return parse_scenario(base)


def run(s: Scenario) -> tuple[SimEnvironment, list[Snapshot]]:
    env = SimEnvironment(s)
    snaps: list[Snapshot] = []
    scenario_loop(s, env, StaticPolicy(), on_snapshot=snaps.append).run()
    return env, snaps


def phase_mean_rt(snaps: list[Snapshot], iid: str, start: float, end: float) -> float:
    obs = [
        s.instances[iid]
        for s in snaps
        if start < s.time_s <= end and iid in s.instances and s.instances[iid].requests
    ]
    n = sum(o.requests for o in obs)
    return sum(o.requests * (o.mean_rt_seconds or 0.0) for o in obs) / n


def test_iperf3_on_a_host_slows_only_its_instance() -> None:
    _, snaps = run(scenario())
    base2, hit2 = phase_mean_rt(snaps, "i2", 0, 15), phase_mean_rt(snaps, "i2", 15, 30)
    base1, hit1 = phase_mean_rt(snaps, "i1", 0, 15), phase_mean_rt(snaps, "i1", 15, 30)
    assert hit2 > 2.0 * base2  # two extra streams on a ~35 % loaded link: about 3x
    assert hit1 == pytest.approx(base1, rel=0.2)
    assert phase_mean_rt(snaps, "i2", 30, 45) == pytest.approx(base2, rel=0.3)


def test_observations_have_the_lab_fields_and_probe() -> None:
    probe = {"period_s": 1, "size_bytes": 20000}
    _, snaps = run(scenario(duration_s=5, events=[], antagonists=[], probe=probe))
    o = snaps[-1].instances["i1"]
    assert snaps[-1].environment == "sim"
    assert o.requests > 0 and o.throughput_rps == o.requests / o.interval_s
    assert o.mean_rt_seconds and o.p50_rt_seconds and o.p95_rt_seconds and o.p99_rt_seconds
    assert o.p50_rt_seconds <= o.p95_rt_seconds <= o.p99_rt_seconds
    assert o.util_pct is not None and 20 < o.util_pct < 50
    assert o.weight == 100 and o.steal_ratio is None and o.psi_cpu_some_pct is None
    assert o.extra["probe_rt_seconds"] > 0


def test_same_seed_same_results_different_seed_different() -> None:
    def rts(seed: int) -> list[float | None]:
        _, snaps = run(scenario(seed=seed, duration_s=20, events=[], antagonists=[]))
        return [o.p95_rt_seconds for s in snaps for o in s.instances.values()]

    assert rts(3) == rts(3)
    assert rts(3) != rts(4)


def test_stress_ng_and_slowdown_schedule_scale_work() -> None:
    s = scenario(
        hosts=[{"id": "h1"}],
        instances=[{"id": "i1", "host": "h1"}, {"id": "i2", "host": "h1"}],
        workload={"arrival": {"process": "poisson", "rate_rps": 40}, "requests": [{"path": "/f"}]},
        antagonists=[
            {"id": "cpu", "kind": "stress-ng", "host": "h1", "stressor": "cpu", "workers": 2}
        ],
        events=[{"at_s": 15, "phase": "stress", "start": ["cpu"]}, {"at_s": 30, "stop": ["cpu"]}],
        service={
            "capacity_bytes_per_s": 102400 * 100.0,
            "stress_ng_slowdown_per_worker": 1.0,
            "slowdown": [
                {"kind": "schedule", "instances": ["i2"], "points": [{"at_s": 30, "factor": 4}]}
            ],
        },
    )
    _, snaps = run(s)
    base = phase_mean_rt(snaps, "i1", 0, 15)
    assert phase_mean_rt(snaps, "i1", 15, 30) > 2.0 * base  # factor 3 while stress-ng runs
    assert phase_mean_rt(snaps, "i1", 30, 45) == pytest.approx(base, rel=0.3)
    assert phase_mean_rt(snaps, "i2", 30, 45) > 3.0 * phase_mean_rt(snaps, "i2", 0, 15)


def test_onoff_slowdown_is_seeded() -> None:
    svc = {
        "slowdown": [
            {"kind": "onoff", "instances": ["i1"], "factor": 5, "on_seconds": 2, "off_seconds": 4}
        ]
    }
    a = SimEnvironment(scenario(service=svc))
    b = SimEnvironment(scenario(service=svc))
    assert np.array_equal(a._chg_t, b._chg_t) and a._chg_t.size > 5


def test_add_instance_boots_then_takes_load_and_remove_drains() -> None:
    s = scenario(duration_s=80, events=[], antagonists=[])
    env = SimEnvironment(s)
    env.clock.sleep_until(10)
    env.observe()
    env.apply([AddInstance("i3", "h1", weight=100)])
    env.clock.sleep_until(39)
    assert "i3" not in env.observe().instances  # still booting (30 s): not in snapshots yet
    env.clock.sleep_until(50)
    assert env.observe().instances["i3"].requests > 50
    env.apply([RemoveInstance("i1"), SetWeight("i2", 50)])
    env.clock.sleep_until(51)
    env.observe()  # drains what i1 still had
    env.clock.sleep_until(60)
    snap = env.observe()
    assert "i1" not in snap.instances
    assert snap.instances["i3"].requests > 1.5 * snap.instances["i2"].requests
    with pytest.raises(ActionError, match="SetCpuCap"):
        env.apply([SetCpuCap("i2", 1.0)])


def test_fcfs_admission_limit_refuses() -> None:
    s = scenario(
        events=[],
        antagonists=[],
        duration_s=10,
        hosts=[{"id": "h1"}, {"id": "h2"}],
        service={
            "discipline": "fcfs",
            "workers": 2,
            "queue_limit": 4,
            "capacity_bytes_per_s": 102400 * 30.0,
        },
    )
    _, snaps = run(s)
    assert sum(o.errors for snap in snaps for o in snap.instances.values()) > 0


def test_video_sessions_run() -> None:
    s = scenario(
        events=[],
        antagonists=[],
        duration_s=60,
        workload={"arrival": {"process": "poisson", "rate_rps": 1.0}, "sessions": {}},
    )
    _, snaps = run(s)
    assert sum(o.requests for snap in snaps for o in snap.instances.values()) > 100


def test_ten_thousand_instances_run_to_completion() -> None:
    s = parse_scenario(
        {
            "name": "fleet",
            "duration_s": 4,
            "interval_s": 2,
            "hosts": [{"id": f"h{k}", "link_mbit": 1000} for k in range(100)],
            "instances": [{"id": f"i{k}", "host": f"h{k % 100}"} for k in range(10_000)],
            "files": [{"path": "/f", "size_bytes": 50_000}],
            "workload": {
                "arrival": {"process": "poisson", "rate_rps": 100_000},
                "requests": [{"path": "/f"}],
            },
            "service": {},
        }
    )
    env, snaps = run(s)
    assert len(snaps) == 2 and len(snaps[-1].instances) == 10_000
    served = sum(o.requests for snap in snaps for o in snap.instances.values())
    assert served + int(env.in_system().sum()) == len(env.schedule_)


def test_service_section_rejects_unknown_keys() -> None:
    with pytest.raises(InputError, match=r"service\.bogus"):
        scenario(service={"bogus": 1})


def test_missing_capacity_is_an_input_error() -> None:
    with pytest.raises(InputError, match="capacity_bytes_per_s"):
        SimEnvironment(scenario(hosts=[{"id": "h1"}, {"id": "h2", "link_mbit": 10}]))


def test_cli_sim_run_bad_scenario_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: -1\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from quell.cli import main; main()", "sim", "run", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "duration_s" in proc.stderr


@pytest.mark.parametrize("name", ["sim-mm1.yaml", "interference-smoke.yaml"])
def test_cli_sim_run_json(tmp_path: Path, name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from quell.cli import main; main()", "sim", "run",
         str(ROOT / "scenarios" / name), "--json", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import json

    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["environment"] == "sim" and summary["phases"]


def test_a_clamscan_counts_as_one_cpu_bound_worker() -> None:
    """The simulator's model of a clamscan neighbour: one stress-ng CPU worker, no more."""

    def rts(antagonist: dict[str, Any]) -> list[float | None]:
        s = scenario(
            hosts=[{"id": "h1"}],
            instances=[{"id": "i1", "host": "h1"}],
            workload={
                "arrival": {"process": "poisson", "rate_rps": 40},
                "requests": [{"path": "/f"}],
            },
            antagonists=[{"id": "bg", "host": "h1", **antagonist}],
            events=[{"at_s": 15, "start": ["bg"]}, {"at_s": 30, "stop": ["bg"]}],
            service={"capacity_bytes_per_s": 102400 * 100.0, "stress_ng_slowdown_per_worker": 1.0},
        )
        _, snaps = run(s)
        return [snap.instances["i1"].mean_rt_seconds for snap in snaps]

    clam = rts({"kind": "clamscan", "data_mb": 64})
    assert clam == rts({"kind": "stress-ng", "stressor": "cpu", "workers": 1})
    assert clam != rts({"kind": "stress-ng", "stressor": "cpu", "workers": 2})

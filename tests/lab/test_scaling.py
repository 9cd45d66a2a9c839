"""Scale-out with a boot delay and scale-in by drain-then-remove, on real components."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.core.observation import Snapshot
from quell.lab.balancer import BACKEND
from quell.lab.environment import LabEnvironment
from quell.lab.request_log import record_tail
from quell.probe.severity import PROBE_KEY
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout
from quell.store.run import RequestRecord
from tests.lab.leftovers import leftovers

pytestmark = pytest.mark.lab

BOOT_S = 4.0


def scenario(**over: object) -> dict:
    s: dict = {
        "name": "scaling",
        "duration_s": 30,
        "hosts": [{"id": "h1", "link_mbit": 50}, {"id": "h2", "link_mbit": 50}],
        "instances": [{"id": "a", "host": "h1"}, {"id": "b", "host": "h2"}],
        "files": [{"path": "/x.bin", "size_bytes": 5000}],
        "workload": {
            "arrival": {"process": "deterministic", "rate_rps": 30},
            "requests": [{"path": "/x.bin"}],
            "timeout_s": 5,
        },
        "probe": {"period_s": 1, "size_bytes": 20000},
        "scaling": {"hosts": ["h1", "h2"], "boot_s": BOOT_S},
    }
    s.update(over)
    return s


class Driver:
    """Observes once per second, like the control loop, and keeps every snapshot."""

    def __init__(self, env: LabEnvironment) -> None:
        self.env = env
        self.t0 = env.clock.now()
        self.k = 0
        self.snaps: list[Snapshot] = []

    def run(self, seconds: int) -> list[Snapshot]:
        out = []
        for _ in range(seconds):
            self.k += 1
            self.env.clock.sleep_until(self.t0 + self.k)
            out.append(self.env.observe())
        self.snaps += out
        return out


def in_lb(env: LabEnvironment) -> set[str]:
    assert env.runtime is not None
    return {s.server for s in env.runtime.show_stat() if s.backend == BACKEND}


def requests(env: LabEnvironment) -> list[RequestRecord]:
    return record_tail(env.run_dir / "requests.csv").read()


def test_an_added_instance_serves_only_after_its_boot_time(tmp_path: Path) -> None:
    env = LabEnvironment(parse_scenario(scenario()), tmp_path, tmp_path / "run", detect_layout())
    try:
        env.start()
        drive = Driver(env)
        drive.run(2)
        added_at = env.clock.now()
        env.apply([AddInstance("c", "h2"), AddInstance("z", "h1", weight=0)])
        time.sleep(0.5)
        # both servers (web and probe) run at once, but HAProxy does not know them yet
        c = env.instances["c"]
        assert c.listening() and c.probe_server is not None and c.probe_server.alive()
        assert in_lb(env) == {"a", "b"}
        booting = drive.run(5)
        later = drive.run(4)
        env.apply([SetWeight("z", 100)])
        drive.run(3)
        recs = requests(env)
        for snap in booting + later:
            serving = snap.time_s >= added_at + BOOT_S + 1.0  # promoted on the tick after boot
            if snap.time_s < added_at + BOOT_S:
                assert set(snap.instances) == {"a", "b"}, snap.time_s
            if serving:
                assert {"c", "z"} <= set(snap.instances), snap.time_s
        assert in_lb(env) == {"a", "b", "c", "z"}
        by_c = [r.send_s for r in recs if r.server == "c"]
        assert by_c and min(by_c) >= added_at + BOOT_S
        assert len(by_c) >= 20
        # weight 0: in HAProxy but sent nothing until its weight was raised
        weight_up = drive.t0 + 11
        by_z = [r.send_s for r in recs if r.server == "z"]
        assert by_z and min(by_z) >= weight_up - 0.1
        assert not [r for r in recs if r.error or r.status != 200]
        # its probe joined once it was serving
        assert any(PROBE_KEY in s.instances["c"].extra for s in later if "c" in s.instances)
    finally:
        env.close()
    assert leftovers(env.tag.value) == {"netns": [], "cgroups": [], "processes": [], "files": []}


def test_drain_finishes_in_flight_requests_then_removes_the_instance(tmp_path: Path) -> None:
    """Responses of 250 kB on a 25 Mbit/s link take 80 ms or more, so requests are in flight
    at the drain; none of them may fail."""
    s = scenario(
        hosts=[{"id": h, "link_mbit": 25} for h in ("h1", "h2", "h3")],
        instances=[{"id": "a", "host": "h1"}, {"id": "b", "host": "h2"}, {"id": "c", "host": "h3"}],
        files=[{"path": "/x.bin", "size_bytes": 250_000}],
    )
    s["workload"]["arrival"]["rate_rps"] = 9
    env = LabEnvironment(parse_scenario(s), tmp_path, tmp_path / "run", detect_layout())
    try:
        env.start()
        drive = Driver(env)
        drive.run(3)
        a = env.instances["a"]
        assert env.runtime is not None
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            stat = next(x for x in env.runtime.show_stat() if x.server == "a")
            if stat.scur >= 1:
                break
            time.sleep(0.01)
        assert stat.scur >= 1, "no request in flight to drain"
        drain_at = env.clock.now()
        env.apply([RemoveInstance("a", drain=True)])
        after = drive.run(3)
        assert "a" in after[0].instances  # still reported while it drains
        assert all("a" not in snap.instances for snap in after[1:])
        assert a.state == "gone" and not a.server.alive()
        assert a.probe_server is not None and not a.probe_server.alive()
        assert "a" not in in_lb(env)
        # drain=False: out at once
        b = env.instances["b"]
        env.apply([SetWeight("b", 0)])
        drive.run(2)
        env.apply([RemoveInstance("b", drain=False)])
        assert b.state == "gone" and not b.server.alive() and "b" not in in_lb(env)
        last = drive.run(2)
        assert all(set(snap.instances) == {"c"} for snap in last)
        recs = requests(env)
        by_a = [r for r in recs if r.server == "a"]
        assert any(r.send_s < drain_at < r.send_s + (r.latency_s or 0) for r in by_a)
        assert not [r for r in by_a if r.send_s > drain_at + 0.1]
        assert recs and not [r for r in recs if r.error or r.status != 200]
    finally:
        env.close()
    assert leftovers(env.tag.value) == {"netns": [], "cgroups": [], "processes": [], "files": []}

"""Closed-loop users in the lab, for real: nginx behind HAProxy, the load generator's users on
kept-alive connections. The interactive response-time law holds on what the lab reports each
interval; a user keeps one connection end to end while the server keeps it alive; a server
keep-alive shorter than the think time makes HAProxy reconnect to the server, not the user to
HAProxy; the generator stops on time by itself and the run leaves nothing behind."""

from __future__ import annotations

import csv
import io
import itertools
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import quell.lab.testbed
from quell.core.observation import Observation
from quell.lab.environment import LabEnvironment
from quell.lab.request_log import UserRequest, parse_user_line
from quell.lab.servers import ServerFiles
from quell.scenario import parse_scenario
from quell.scenario.model import Instance
from quell.signals.cgroup import detect_layout
from quell.workload.population import response_time_law_rps
from tests.lab.leftovers import leftovers

pytestmark = pytest.mark.lab

RAMP_S = 1.0


def scenario(users: int, think_s: float, size_bytes: int, duration_s: float) -> dict[str, Any]:
    return {
        "name": "closed-loop",
        "seed": 5,
        "duration_s": duration_s,
        "interval_s": 1,
        "hosts": [{"id": "h1", "cpus": [0]}],
        "instances": [{"id": "w", "host": "h1", "server": "nginx", "gzip": True}],
        "files": [{"path": "/t.txt", "size_bytes": size_bytes, "compressible": True}],
        "workload": {
            "arrival": {
                "process": "closed",
                "users": users,
                "think_time_s": think_s,
                "ramp_s": RAMP_S,
            },
            "requests": [{"path": "/t.txt"}],
            "cpus": [1],
        },
    }


class Run:
    """What a run left to check: the observations, the requests log, HAProxy's counters at
    the end, when the generator exited and what it said."""

    def __init__(self, data: dict[str, Any], tmp_path: Path) -> None:
        s = parse_scenario(data)
        env = LabEnvironment(s, tmp_path, tmp_path / "run", detect_layout())
        self.observations: list[Observation] = []
        try:
            env.start()
            for k in range(1, int(s.duration_s) + 1):
                env.clock.sleep_until(k)
                self.observations.append(env.observe().instances["w"])
            assert env.runtime is not None and env.testbed.loadgen is not None
            stat = env.runtime.command("show stat")
            loadgen = env.testbed.loadgen
            while loadgen.alive() and env.clock.now() < s.duration_s + 5:
                time.sleep(0.02)
            self.loadgen_exit_s = env.clock.now()
            self.loadgen_code = loadgen.popen.poll()
            self.report = json.loads(loadgen.log_tail().splitlines()[-1])
        finally:
            env.close()
        self.leftovers = leftovers(env.tag.value)
        rows = csv.DictReader(io.StringIO(stat.lstrip("# ")))
        self.server = next(r for r in rows if r["svname"] == "w")
        lines = (tmp_path / "run" / "requests.csv").read_text().splitlines()
        self.requests = [r for r in map(parse_user_line, lines) if r is not None]
        assert len(self.requests) == len(lines)

    def think_gaps_s(self) -> list[float]:
        """From each answer's end to the same user's next request."""
        by_user: dict[int, list[UserRequest]] = {}
        for r in self.requests:
            by_user.setdefault(r.user, []).append(r)
        gaps = []
        for mine in by_user.values():
            for a, b in itertools.pairwise(mine):
                assert a.record.latency_s is not None
                gaps.append(b.record.send_s - a.record.send_s - a.record.latency_s)
        return gaps


def test_response_time_law_on_a_saturated_server_and_one_connection_per_user(
    tmp_path: Path,
) -> None:
    # 40 users thinking Exp(100 ms) ask for 256 KiB of text that nginx gzips at level 9 (about
    # 7 ms of CPU each here, 4.4 ms on a faster CI machine) on one pinned CPU: about 140 req/s
    # and R of 180 ms (226 req/s and 77 ms there), mostly queueing either way, so the law is
    # far from the trivial X = N / Z (400 req/s). nginx keeps connections 5 s, 50 think times.
    # Within 5 %: over the 13 s measured, a user's cycle (R + Z, about 0.3 s) straddling either
    # end of the window moves X·(R + Z) by up to 2.5 %; the think times' sample mean, 1 %.
    users, think_s, duration_s = 40, 0.1, 15.0
    run = Run(scenario(users, think_s, 256 * 1024, duration_s), tmp_path)
    # what the lab reports every interval, once every user runs (after the 1 s ramp)
    steady = [o for o in run.observations if o.time_s > RAMP_S + 1]
    n = sum(o.requests for o in steady)
    x_rps = n / sum(o.interval_s for o in steady)
    r_s = sum(o.requests * (o.mean_rt_seconds or 0.0) for o in steady) / n
    assert r_s > think_s / 2  # the server is the bottleneck: N / Z would be 400 req/s
    assert x_rps == pytest.approx(response_time_law_rps(users, r_s, think_s), rel=0.05)
    assert all(o.errors == 0 for o in run.observations)
    # one connection per user, end to end: the user's to HAProxy and HAProxy's to nginx
    conn = Counter(r.conn for r in run.requests)
    assert conn == {"new": users, "reused": len(run.requests) - users}
    assert int(run.server["connect"]) == users
    assert int(run.server["reuse"]) >= int(run.server["stot"]) - users
    # on time: nothing sent at or after the duration, the generator out by itself soon after
    assert max(r.record.send_s for r in run.requests) < duration_s
    assert run.loadgen_code == 0 and run.loadgen_exit_s < duration_s + 1.0
    assert run.report["requests"] == len(run.requests) and run.report["reconnects"] == 0
    assert not any(run.leftovers.values()), run.leftovers


def test_a_server_keep_alive_shorter_than_the_think_time_reconnects_the_server_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nginx closes connections idle for 300 ms; 20 users think Exp(500 ms): 55 % of the
    # thinks outlast it. HAProxy keeps each user's side open (600 s) and opens a new server
    # connection for each request after such a think.
    keepalive_s = 0.3
    real = quell.lab.testbed.server_files

    def short_keepalive(base: Path, docroot: Path, addr: str, inst: Instance) -> ServerFiles:
        files = real(base, docroot, addr, inst)
        text = files.config.read_text()
        assert text.count("keepalive_timeout 5s;") == 1
        files.config.write_text(text.replace("keepalive_timeout 5s;", "keepalive_timeout 300ms;"))
        return files

    monkeypatch.setattr(quell.lab.testbed, "server_files", short_keepalive)
    users = 20
    run = Run(scenario(users, 0.5, 8192, 8.0), tmp_path)
    gaps = run.think_gaps_s()
    outlasting = sum(g > keepalive_s for g in gaps)
    assert outlasting > 0.4 * len(gaps)
    connects = int(run.server["connect"])
    assert connects == pytest.approx(users + outlasting, rel=0.05)
    # the users barely notice: a reconnect only where nginx closed as a request went out
    conn = Counter(r.conn for r in run.requests)
    assert conn["new"] == users
    assert conn["reopened"] + conn["retried"] <= 0.02 * len(run.requests), conn
    assert all(r.record.status == 200 for r in run.requests)
    assert not any(run.leftovers.values()), run.leftovers

"""CPU cost of the lab's sampler at 1 s sampling with 4 instances (goal: <= 1 % of one core).

A real lab with 4 lighttpd instances under light load is brought up; for 30 intervals the
runner's thread CPU time spent in ``observe()`` (every collector plus HAProxy's ``show stat``
and the client-side latencies) is measured. Peer, in the same run and over the same seconds:
``pidstat -u -w -d`` sampling the same server processes every second; its CPU time comes from
its own rusage. The ratio quell/pidstat is reported."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from quell.lab.environment import LabEnvironment
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout

INTERVALS = 30


def _scenario() -> dict:
    return {
        "name": "bench-sampler",
        "duration_s": INTERVALS + 5,
        "hosts": [{"id": f"h{k}", "link_mbit": 100} for k in range(4)],
        "instances": [{"id": f"i{k}", "host": f"h{k}"} for k in range(4)],
        "files": [{"path": "/x.bin", "size_bytes": 10000}],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": 40},
            "requests": [{"path": "/x.bin"}],
        },
    }


def run() -> dict:
    if os.geteuid() != 0:
        raise RuntimeError("the sampler benchmark runs a real lab and needs root")
    with tempfile.TemporaryDirectory() as tmp:
        s = parse_scenario(_scenario())
        env = LabEnvironment(s, Path(tmp), Path(tmp) / "run", detect_layout())
        try:
            env.start()
            pids = [str(p) for i in env.instances.values() for p in i.group.pids()]
            peer = subprocess.Popen(
                ["pidstat", "-u", "-w", "-d", "-h", "-p", ",".join(pids), "1", str(INTERVALS)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            costs = []
            t0 = env.clock.now()
            for k in range(1, INTERVALS + 1):
                env.clock.sleep_until(t0 + k)
                c0 = time.thread_time()
                snap = env.observe()
                costs.append(time.thread_time() - c0)
                assert len(snap.instances) == 4
            _, status, usage = os.wait4(peer.pid, 0)
            peer.returncode = os.waitstatus_to_exitcode(status)
        finally:
            env.close()
    quell_cpu_s = sum(costs)
    peer_cpu_s = usage.ru_utime + usage.ru_stime
    return {
        "benchmark": "sampler CPU cost, 1 s sampling, 4 instances",
        "intervals": INTERVALS,
        "quell_cpu_seconds_per_interval": round(quell_cpu_s / INTERVALS, 6),
        "quell_share_of_one_core_pct": round(quell_cpu_s / INTERVALS * 100, 3),
        "goal_share_of_one_core_pct": 1.0,
        "goal_met": quell_cpu_s / INTERVALS * 100 <= 1.0,
        "peer": "pidstat -u -w -d on the same 4 server processes, 1 s interval",
        "peer_cpu_seconds_per_interval": round(peer_cpu_s / INTERVALS, 6),
        "ratio_quell_to_peer": round(quell_cpu_s / peer_cpu_s, 2) if peer_cpu_s > 0 else None,
    }

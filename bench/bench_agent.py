"""CPU cost of the live agent at 1 s scrapes with 8 instances (goal: <= 1 % of one core),
beside the sampler's figure (bench_sampler).

A standing lab with 8 lighttpd instances (``quell lab up``'s code, no load) and its agent as a
process of its own (probe off); /metrics is fetched once a second for 30 s, as Prometheus would,
and the agent's CPU time (utime + stime from /proc) over those seconds is reported in per cent
of one core. Peer, over the same seconds: ``pidstat -u -w -d`` sampling the same server
processes every second; the ratio agent/pidstat is reported."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from quell.lab.standing import bring_up, tear_down
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout

SCRAPES = 30
TICK = os.sysconf("SC_CLK_TCK")


def _scenario() -> dict:
    return {
        "name": "bench-agent",
        "duration_s": 60,
        "hosts": [{"id": "h1"}],
        "instances": [{"id": f"i{k}", "host": "h1"} for k in range(8)],
        "files": [{"path": "/x.bin", "size_bytes": 10000}],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": 10},
            "requests": [{"path": "/x.bin"}],
        },
    }


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run() -> dict:
    if os.geteuid() != 0:
        raise RuntimeError("the agent benchmark runs a real lab and needs root")
    layout = detect_layout()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "up"
        lab = bring_up(parse_scenario(_scenario()), Path(tmp), run_dir, layout)
        agent = None
        try:
            cfg = yaml.safe_load((run_dir / "agent-h1.yaml").read_text())
            src = str(Path(__file__).resolve().parents[1] / "src")
            agent = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "quell",
                    "agent",
                    "--config",
                    str(run_dir / "agent-h1.yaml"),
                ],
                env={**os.environ, "PYTHONPATH": src},
                stderr=subprocess.DEVNULL,
            )
            url = f"http://127.0.0.1:{cfg['listen']['port']}/metrics"
            for _ in range(50):
                try:
                    httpx.get(url)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            pids = [str(i["pid"]) for i in lab.state["instances"]]
            peer = subprocess.Popen(
                ["pidstat", "-u", "-w", "-d", "-h", "-p", ",".join(pids), "1", str(SCRAPES)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            c0, t0 = _cpu_s(agent.pid), time.monotonic()
            size = 0
            for k in range(1, SCRAPES + 1):
                size = len(httpx.get(url).content)
                time.sleep(max(0.0, t0 + k - time.monotonic()))
            agent_s, wall = _cpu_s(agent.pid) - c0, time.monotonic() - t0
            _, _, ru = os.wait4(peer.pid, 0)
            peer_s = ru.ru_utime + ru.ru_stime
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=5)
            tear_down(run_dir, layout)
    pct = 100 * agent_s / wall
    return {
        "instances": 8,
        "scrapes": SCRAPES,
        "metrics_bytes": size,
        "agent_cpu_pct_of_core": round(pct, 3),
        "goal_pct": 1.0,
        "met": pct <= 1.0,
        "pidstat_cpu_pct_of_core": round(100 * peer_s / wall, 3),
        "ratio_agent_over_pidstat": round(agent_s / peer_s, 2) if peer_s > 0 else None,
    }

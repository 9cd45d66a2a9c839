"""Nothing of a run survives it: not after a normal end, SIGTERM, or kill -9 plus `lab clean`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from quell.store.run import RunStore
from tests.lab.leftovers import leftovers, run_tag

pytestmark = pytest.mark.lab

SCENARIO = {
    "name": "teardown",
    "duration_s": 40,
    "hosts": [{"id": "h1", "link_mbit": 50}, {"id": "h2", "link_mbit": 50}],
    "instances": [
        {"id": "a", "host": "h1"},
        {"id": "b", "host": "h2", "server": "nginx"},
    ],
    "files": [{"path": "/x.bin", "size_bytes": 20000}],
    "workload": {
        "arrival": {"process": "poisson", "rate_rps": 30},
        "requests": [{"path": "/x.bin"}],
    },
    "antagonists": [
        {"id": "cpu", "kind": "stress-ng", "host": "h1", "stressor": "cpu", "workers": 1},
        {"id": "net", "kind": "iperf3", "host": "h2", "streams": 1},
    ],
    "events": [{"at_s": 1, "phase": "noisy", "start": ["cpu", "net"]}],
    # the probe adds a server per instance and a client process: they must go too
    "probe": {"period_s": 1, "size_bytes": 50000},
}


def start_runner(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    scenario = tmp_path / "teardown.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "quell", "lab", "run", str(scenario), "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return proc, runs


def wait_for_load(runs: Path, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> Path:
    """Wait until the antagonists run and requests have been answered; returns the run dir."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        for run_dir in runs.glob("*"):
            csv = run_dir / "requests.csv"
            logs = run_dir / "logs"
            if (
                csv.exists()
                and csv.stat().st_size > 2000
                and (logs / "stress-ng-cpu.log").exists()
                and (logs / "iperf3-net.log").exists()
                and (run_dir / "probes.csv").exists()
            ):
                time.sleep(1.0)
                return run_dir
        time.sleep(0.2)
    raise AssertionError("the run never got going")


def test_kill_9_then_clean_leaves_nothing(tmp_path: Path) -> None:
    proc, runs = start_runner(tmp_path)
    run_dir = wait_for_load(runs, proc)
    tag = run_tag(run_dir)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    left = leftovers(tag)
    # the killed runner could not tear down: its pieces are still there...
    assert left["netns"] and left["cgroups"] and left["processes"] and left["files"], left
    done = subprocess.run(
        [sys.executable, "-m", "quell", "lab", "clean"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"quell-{tag}-core" in done.stdout
    # ...and `lab clean` removed every one of them
    assert leftovers(tag) == {"netns": [], "cgroups": [], "processes": [], "files": []}
    # what was measured before the kill is still there
    with RunStore.open(run_dir) as store:
        assert len(store.observations()) >= 2


def test_sigterm_tears_down_and_keeps_the_data(tmp_path: Path) -> None:
    proc, runs = start_runner(tmp_path)
    run_dir = wait_for_load(runs, proc)
    tag = run_tag(run_dir)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
    assert rc != 0
    assert leftovers(tag) == {"netns": [], "cgroups": [], "processes": [], "files": []}
    assert (run_dir / "summary.json").exists()
    with RunStore.open(run_dir) as store:
        assert store.request_count() > 10
        assert "finished_at" not in store.meta()

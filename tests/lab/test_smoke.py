"""The lab's two smoke scenarios, run for real: the interference effects must show."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from quell.scenario import load_scenario
from quell.store.run import RunStore
from tests.effects import assert_cohosted_instance_slows_alone, phase_rt
from tests.lab.leftovers import leftovers, run_tag
from tests.lab.unstolen import run_lab_unstolen

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.lab


def root_qdiscs() -> str:
    return subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout


def test_network_interference_slows_only_the_cohosted_instance(tmp_path: Path) -> None:
    """PRIMA Table III: iperf3 on host 2's link; round robin keeps sending i2 half the load."""
    path = ROOT / "scenarios" / "interference-smoke.yaml"
    qdiscs_before = root_qdiscs()
    summary = run_lab_unstolen(load_scenario(path), path, tmp_path)
    assert_cohosted_instance_slows_alone(summary)
    baseline = next(p for p in summary["phases"] if p["name"] == "baseline")["instances"]
    # round robin: equal shares; about 35 % of each 100 Mbit/s link
    assert abs(baseline["i1"]["requests"] - baseline["i2"]["requests"]) <= 2
    assert 25.0 <= baseline["i1"]["util_pct"] <= 45.0
    # teardown left nothing: no process, namespace, cgroup, file or tc rule of the run
    assert not any(leftovers(run_tag(Path(summary["run_dir"]))).values())
    assert root_qdiscs() == qdiscs_before
    # the run says what it was measured on
    with RunStore.open(Path(summary["run_dir"])) as store:
        machine = store.meta()["machine"]
    assert machine["logical_cpus"] == os.cpu_count()
    assert machine["kernel_release"] == platform.release()


def test_cache_thrasher_on_the_same_cpu_slows_a_cpu_bound_instance(tmp_path: Path) -> None:
    path = ROOT / "scenarios" / "cpu-interference-smoke.yaml"
    """Requests of about 20 ms of CPU beside an always-runnable thrasher on the same CPU: each
    request gets half the CPU after its first slice, so RT ≈ 2 × 20 ms − one slice (1.8-2.4x
    measured over three runs)."""
    summary = run_lab_unstolen(load_scenario(path), path, tmp_path)
    base = phase_rt(summary, "baseline", "web")
    noisy = phase_rt(summary, "antagonist", "web")
    assert noisy >= 1.5 * base, (base, noisy)
    p = next(p for p in summary["phases"] if p["name"] == "antagonist")["instances"]["web"]
    assert p["errors"] == 0
    assert not any(leftovers(run_tag(Path(summary["run_dir"]))).values())

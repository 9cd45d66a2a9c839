"""``quell sim compare``: one run per policy on the same load, the side-by-side table, the JSON
document on the last line and in the comparison directory; bad input exits 2 before any run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from quell.scenario import load_scenario
from quell.store.run import RunStore
from tests.sim.build import scenario_data

SCENARIO: dict[str, Any] = scenario_data(
    n_hosts=3,
    rate_rps=60,
    size_bytes=200_000,
    name="cmp",
    seed=3,
    duration_s=60,
    interval_s=5,
    instances=[{"id": "i1", "host": "h0"}, {"id": "i2", "host": "h1"}],
    antagonists=[{"id": "n", "kind": "iperf3", "host": "h0", "streams": 1, "bitrate_mbit": 50}],
    events=[{"at_s": 20, "phase": "noisy", "start": ["n"]}],
    probe={"period_s": 5, "size_bytes": 100_000},
    target={"mean_rt_s": 0.05},
    scaling={"hosts": ["h2"], "boot_s": 5},
    policy={"name": "static"},
    compare=[{"name": "lc"}, {"name": "threshold", "params": {"scale_out_util_pct": 20}}],
    service={"size": {"distribution": "exponential"}},
)


def compare(path: Path, runs: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "quell", "sim", "compare", str(path), "--json",
         "--runs-dir", str(runs), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_compare_runs_each_policy_and_prints_one_json_document(tmp_path: Path) -> None:
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    proc = compare(path, tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    names = [r["policy"] for r in doc["policies"]]
    assert names == ["static", "lc", "threshold"]
    assert "SLO %" in proc.stdout and "oracle" in proc.stdout
    cmp_dir = Path(doc["comparison_dir"])
    assert json.loads((cmp_dir / "comparison.json").read_text()) == doc
    # one page with the policies side by side: a figure of one column each
    page = Path(doc["page"])
    assert page == cmp_dir / "comparison.html" and "comparison.png" in page.read_text()
    assert (cmp_dir / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for row in doc["policies"]:
        run = Path(row["run_dir"])
        assert run.parent == cmp_dir and (run / "run.db").is_file()
        assert load_scenario(run / "scenario.yaml").policy.name == row["policy"]
        assert 0.0 <= row["slo_pct"] <= 100.0 and row["mean_rt_ms"] > 0
        assert row["oracle_instance_seconds"] == doc["oracle"]["instance_seconds"]
    assert doc["timeout_s"] == 10.0 and "what users felt, per request sent" in proc.stdout
    for row in doc["policies"]:
        # per phase, every request of the run's store sent in it, answered or not
        with RunStore.open(Path(row["run_dir"])) as store:
            req = store.request_arrays()
        assert list(row["users"]) == ["baseline", "noisy"]
        for (name, start, end), users in zip(
            [("baseline", 0, 20), ("noisy", 20, 60)], row["users"].values(), strict=True
        ):
            sent = (req["send_s"] >= start) & (req["send_s"] < end)
            lost = sent & ~((req["status"] == 200) & np.isfinite(req["latency_s"]))
            assert (users["requests"], users["unanswered"]) == (sent.sum(), lost.sum()), name
            felt_s = np.where(lost, 10.0, np.minimum(req["latency_s"], 10.0))[sent]
            assert users["share_above_rth"] == pytest.approx(np.mean(felt_s > 0.05))
            assert users["p99_rt_seconds"] == np.sort(felt_s)[math.ceil(0.99 * sent.sum()) - 1]
    static, lc, threshold = doc["policies"]
    assert static["scaling_actions"] == 0 and static["instance_seconds"] == 120.0
    assert threshold["scaling_actions"] >= 1  # 60 req/s of 200 kB: ~48 % of two links
    lc_scenario = yaml.safe_load((Path(lc["run_dir"]) / "scenario.yaml").read_text())
    assert lc_scenario["load_balancer"]["algorithm"] == "leastconn"


def test_bad_policy_params_exit_2_before_any_run(tmp_path: Path) -> None:
    bad = {**SCENARIO, "compare": [{"name": "threshold", "params": {"bogus": 1}}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = compare(path, tmp_path / "runs")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bogus" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_one_policy_twice_under_labels_runs_both(tmp_path: Path) -> None:
    # threshold at 20 % scales out on this load (~48 % of two links); at 90 % it never does.
    two = {
        **SCENARIO,
        "policy": {"name": "threshold", "label": "eager", "params": {"scale_out_util_pct": 20}},
        "compare": [{"name": "threshold", "label": "lazy", "params": {"scale_out_util_pct": 90}}],
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(two))
    proc = compare(path, tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    eager, lazy = doc["policies"]
    assert (eager["policy"], lazy["policy"]) == ("eager", "lazy")
    assert Path(eager["run_dir"]).name == "eager" and Path(lazy["run_dir"]).name == "lazy"
    assert eager["scaling_actions"] >= 1 and lazy["scaling_actions"] == 0


def test_seeds_run_every_policy_per_seed_and_summarise_them(tmp_path: Path) -> None:
    two = {**SCENARIO, "compare": [{"name": "lc"}]}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(two))
    proc = compare(path, tmp_path / "runs", "--seeds", "2")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["seeds"] == [3, 4] and "seeds 3–4" in proc.stdout and "vs static" in proc.stdout
    cmp_dir = Path(doc["comparison_dir"])
    assert json.loads((cmp_dir / "comparison.json").read_text()) == doc
    per_seed = [json.loads((Path(d) / "comparison.json").read_text()) for d in doc["per_seed"]]
    assert [p["seed"] for p in per_seed] == [3, 4]
    assert [Path(p["comparison_dir"]).name for p in per_seed] == ["seed-3", "seed-4"]
    for d in per_seed:
        for row in d["policies"]:
            assert load_scenario(Path(row["run_dir"]) / "scenario.yaml").seed == d["seed"]
    slo = {r["policy"]: [p["policies"][i]["slo_pct"] for p in per_seed]
           for i, r in enumerate(per_seed[0]["policies"])}  # fmt: skip
    rt = [p["policies"][0]["mean_rt_ms"] for p in per_seed]
    assert rt[0] != rt[1]  # two seeds, two draws of the load
    static, lc = doc["policies"]
    assert static["slo_pct"]["mean"] == pytest.approx(sum(slo["static"]) / 2)
    assert static["slo_pct"]["min"] == min(slo["static"])
    diffs = [b - a for a, b in zip(slo["static"], slo["lc"], strict=True)]
    assert lc["slo_pct_vs_first"]["mean"] == pytest.approx(sum(diffs) / 2)
    assert lc["slo_pct_vs_first"]["higher_on"] == sum(d > 0 for d in diffs)


def test_seeds_below_one_exit_2_before_any_run(tmp_path: Path) -> None:
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    proc = compare(path, tmp_path / "runs", "--seeds", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--seeds" in proc.stderr
    assert not (tmp_path / "runs").exists()

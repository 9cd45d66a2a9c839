"""The command line as a user runs it: ``python -m quell ...`` in a subprocess."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quell.core.observation import Observation, Snapshot
from quell.store.run import RequestRecord, RunStore

SCENARIOS = Path(__file__).parent.parent / "scenario"
VALID = SCENARIOS / "valid" / "base.yaml"
WEIGHT_300 = SCENARIOS / "invalid" / "weight_300.yaml"
MULTI = SCENARIOS / "multi" / "reference_problems.yaml"


def quell(*args: str | Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m quell ARGS`` (or ``python -c CODE ARGS``) with a wide, colourless terminal."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    head = ["-c", code] if code is not None else ["-m", "quell"]
    return subprocess.run(
        [sys.executable, *head, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Traceback" not in proc.stdout
    assert proc.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["lab", "--help"],
        ["lab", "run", "--help"],
        ["lab", "report", "--help"],
        ["lab", "clean", "--help"],
        ["scenario", "--help"],
        ["scenario", "check", "--help"],
    ],
    ids=" ".join,
)
def test_help_exits_0(args: list[str]) -> None:
    proc = quell(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    assert proc.stderr == ""


def test_help_lists_the_commands() -> None:
    top = quell("--help").stdout
    assert "lab" in top and "scenario" in top
    lab = quell("lab", "--help").stdout
    for command in ("run", "report", "clean"):
        assert command in lab


def test_unknown_option_is_a_usage_error() -> None:
    proc = quell("scenario", "check", "--bogus", VALID)
    assert proc.returncode == 2
    assert "No such option: --bogus" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_scenario_check_valid() -> None:
    proc = quell("scenario", "check", VALID)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok: base: 2 host(s), 2 instance(s), 3 phase(s), 30 s"


def test_scenario_check_invalid() -> None:
    proc = quell("scenario", "check", WEIGHT_300)
    assert_clean_failure(
        proc, str(WEIGHT_300), "instances[0].weight: Input should be less than or equal to 256"
    )
    assert proc.stdout == ""


def test_scenario_check_lists_every_problem() -> None:
    proc = quell("scenario", "check", MULTI)
    assert_clean_failure(
        proc,
        "5 problem(s)",
        "instances[1].host: unknown host 'h9'",
        "workload.requests[1].path: '/huge.bin' is not in files",
        "events[0].start: unknown antagonist 'pig'",
        "events[1].at_s: 45.0 s is not before the end (30.0 s)",
        "events[1].phase: phase 'noisy' is already used",
    )


def test_scenario_check_missing_file(tmp_path: Path) -> None:
    proc = quell("scenario", "check", tmp_path / "nope.yaml")
    assert_clean_failure(proc, "cannot read file")


def test_lab_run_invalid_scenario_exits_2() -> None:
    proc = quell("lab", "run", WEIGHT_300)
    assert_clean_failure(proc, "instances[0].weight: Input should be less than or equal to 256")


# Runs the CLI with a stand-in lab runner that exits 99 if it is ever called, so the test shows
# that an invalid scenario stops ``lab run`` before anything starts, whatever the lab can do here.
def stand_in_runner(body: str) -> str:
    """Code for ``quell(..., code=...)``: ``body`` defines ``run_lab``, which then stands in for
    the lab runner while the CLI runs."""
    return f"""import sys, types
{body}
stand_in = types.ModuleType("quell.experiment.lab")
stand_in.run_lab = run_lab
sys.modules["quell.experiment.lab"] = stand_in
sys.argv = ["quell", *sys.argv[1:]]
from quell.cli import main
main()
"""


NEVER_CALLED_RUNNER = stand_in_runner(
    """
def run_lab(*args, **kwargs):
    print("run_lab was called", file=sys.stderr)
    raise SystemExit(99)
"""
)


def test_lab_run_invalid_scenario_starts_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = quell("lab", "run", "--runs-dir", runs, WEIGHT_300, code=NEVER_CALLED_RUNNER)
    assert_clean_failure(proc, "instances[0].weight")
    assert "run_lab was called" not in proc.stderr
    assert not runs.exists()


def test_lab_report_missing_dir(tmp_path: Path) -> None:
    proc = quell("lab", "report", tmp_path / "nope")
    assert_clean_failure(proc, str(tmp_path / "nope"), "no such directory")


def test_lab_report_empty_dir(tmp_path: Path) -> None:
    proc = quell("lab", "report", tmp_path)
    assert_clean_failure(proc, "not a run directory (no run.db)")
    assert not (tmp_path / "report").exists()


def test_lab_report_corrupt_store(tmp_path: Path) -> None:
    (tmp_path / "run.db").write_bytes(b"\x00garbage" * 512)
    proc = quell("lab", "report", tmp_path)
    assert_clean_failure(proc, "unreadable run store")


def _small_run(run_dir: Path, finished: bool) -> None:
    store = RunStore.create(run_dir)
    store.set_meta(scenario="tiny", environment="sim", phases=[["baseline", 0.0, 4.0]])
    for t in (1.0, 2.0, 3.0, 4.0):
        obs = Observation(t, "web1", 1.0, requests=1, throughput_rps=1.0, cpu_util=0.25)
        store.add_snapshot(Snapshot(t, "sim", {"web1": obs}))
    store.add_requests(
        RequestRecord(t - 0.5, lat, 200, 10, "web1")
        for t, lat in ((1.0, 0.010), (2.0, 0.020), (3.0, 0.030), (4.0, 0.060))
    )
    store.commit()
    if finished:
        store.set_meta(finished_at=1.0)
    store.close()


def test_lab_report_json(tmp_path: Path) -> None:
    _small_run(tmp_path, finished=True)
    proc = quell("lab", "report", "--json", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"report written to {tmp_path / 'report'}" in proc.stderr.replace("\n", "")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["complete"] is True
    assert summary["phases"][0]["instances"]["web1"] == {
        "requests": 4,
        "errors": 0,
        "throughput_rps": 1.0,
        "mean_rt_ms": 30.0,
        "p95_rt_ms": 55.5,  # numpy percentile of 10, 20, 30, 60 ms
        "cpu_util": 0.25,
        "util_pct": None,
    }
    assert "baseline  [0, 4) s" in proc.stdout
    assert (tmp_path / "report" / "index.html").is_file()


def test_lab_report_incomplete_run_says_so(tmp_path: Path) -> None:
    _small_run(tmp_path, finished=False)
    proc = quell("lab", "report", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "incomplete run: it stopped before the end; data ends at 4 s" in proc.stdout


def test_scenario_check_builds_the_policies_it_names(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    body = (
        "name: policies\nduration_s: 10\nhosts: [{id: h1, link_mbit: 100}]\n"
        "instances: [{id: i1, host: h1}]\nfiles: [{path: /a.bin, size_bytes: 1000}]\n"
        "workload: {arrival: {process: poisson, rate_rps: 5}, requests: [{path: /a.bin}]}\n"
        "target: {mean_rt_s: 0.02}\n"
    )
    # lc relies on HAProxy's leastconn: the comparison runs it with that balancer.
    scenario.write_text(body + "compare: [{name: rr}, {name: lc}]\n")
    ok = quell("scenario", "check", scenario)
    assert ok.returncode == 0, ok.stderr
    scenario.write_text(body + "policy: {name: prima, params: {model: nope.json}}\n")
    assert_clean_failure(
        quell("scenario", "check", scenario),
        "nope.json",
        "cannot read model bundle: No such file or directory",
    )


# A stand-in lab runner for ``lab compare``: each call writes a finished run whose every
# interval carries the machine's CPU steal from STEALS (one value per call, in order), so the
# test shows which runs compare keeps and which it runs again, without the lab.
STEAL_RUNNER = stand_in_runner(
    """
import json
from quell.core.observation import Observation, Snapshot
from quell.experiment.run import new_run_dir, prepare_run_dir
from quell.store.run import RequestRecord
STEALS = json.loads(sys.argv.pop(1))
def run_lab(scenario, path, runs_dir, progress):
    steal = STEALS.pop(0)
    run_dir = new_run_dir(runs_dir, scenario, "lab")
    store = prepare_run_dir(run_dir, scenario, path, "lab")
    for t in range(1, int(scenario.duration_s) + 1):
        obs = {i.id: Observation(float(t), i.id, 1.0, steal_ratio=steal) for i in scenario.instances}
        store.add_snapshot(Snapshot(float(t), "lab", obs))
    store.add_requests(RequestRecord(t + 0.5, 0.01, 200, 100, "web1") for t in range(30))
    store.set_meta(finished_at=1.0)
    store.close()
    return {"run_dir": str(run_dir)}
"""
)


def test_lab_compare_runs_a_stolen_run_again_and_keeps_it(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    text = VALID.read_text().replace("name: base", "name: cmp")
    scenario.write_text(text + "policy: {name: static}\ncompare:\n  - {name: rr}\n")
    runs = tmp_path / "runs"
    # static: 2 % steal, then 0.1 %; rr: 0.8 % twice (kept, the least stolen of its two)
    steals = json.dumps([0.02, 0.001, 0.009, 0.008])
    proc = quell(
        steals, "lab", "compare", "--runs-dir", runs, "--json", scenario, code=STEAL_RUNNER
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    static, rr = result["policies"]["static"], result["policies"]["rr"]
    assert static["max_steal_pct"] == pytest.approx(0.1)
    assert rr["max_steal_pct"] == pytest.approx(0.8)
    assert len(result["stolen"]["static"]) == 1 and len(result["stolen"]["rr"]) == 2
    assert rr["run_dir"] in result["stolen"]["rr"]
    for kept_or_refused in [*result["stolen"]["static"], *result["stolen"]["rr"]]:
        assert Path(kept_or_refused, "run.db").is_file()  # nothing measured is thrown away
    assert "rr noisy 0.80 %" in proc.stdout  # the warning under the table
    assert "static" not in proc.stdout.split("averaged over")[1].split("\n")[0]


# A stand-in lab runner whose k-th call answers every request in LATENCIES[k] seconds.
LATENCY_RUNNER = stand_in_runner(
    """
import json
from quell.experiment.run import new_run_dir, prepare_run_dir
from quell.store.run import RequestRecord
LATENCIES = json.loads(sys.argv.pop(1))
def run_lab(scenario, path, runs_dir, progress):
    latency = LATENCIES.pop(0)
    run_dir = new_run_dir(runs_dir, scenario, "lab")
    store = prepare_run_dir(run_dir, scenario, path, "lab")
    store.add_requests(RequestRecord(t + 0.5, latency, 200, 100, "web1") for t in range(30))
    store.set_meta(finished_at=1.0)
    store.close()
    return {"run_dir": str(run_dir)}
"""
)


def test_lab_compare_repeats_pairs_each_policy_with_the_first(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    text = VALID.read_text().replace("name: base", "name: cmp")
    scenario.write_text(text + "policy: {name: static}\ncompare:\n  - {name: rr}\n")
    runs = tmp_path / "runs"
    # per repeat, static then rr: static 10, 12, 14 ms; rr 20, 18, 28 ms
    latencies = json.dumps([0.010, 0.020, 0.012, 0.018, 0.014, 0.028])
    proc = quell(
        latencies,
        "lab",
        "compare",
        "--repeats",
        "3",
        "--runs-dir",
        runs,
        "--json",
        scenario,
        code=LATENCY_RUNNER,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["repeats"] == 3 and len(result["per_repeat"]) == 3
    for each in result["per_repeat"]:  # every repeat written on its own as it finished
        assert json.loads(Path(each).read_text())["policies"].keys() == {"static", "rr"}
    static, rr = result["policies"]
    assert [static["policy"], rr["policy"]] == ["static", "rr"]
    noisy = {p["phase"]: p for p in rr["phases"]}["noisy"]
    assert noisy["worst_mean_rt_s"]["mean"] == pytest.approx(0.022)
    assert noisy["worst_mean_rt_s"]["sd"] == pytest.approx(math.sqrt((4 + 16 + 36) / 2) / 1e3)
    # rr - static per repeat: 10, 6, 14 ms (sd 4 ms); +100, +50, +100 % (sd 28.87 %)
    vs = noisy["all_mean_rt_s_vs_first"]
    assert vs["s"]["mean"] == pytest.approx(0.010)
    assert vs["s"]["se"] == pytest.approx(0.004 / math.sqrt(3))
    assert vs["pct"]["mean"] == pytest.approx(250 / 3)
    assert vs["pct"]["se"] == pytest.approx(math.sqrt(2500 / 3) / math.sqrt(3))
    assert vs["lower_on"] == 0 and vs["of"] == 3
    assert {p["phase"]: p for p in static["phases"]}["noisy"]["all_mean_rt_s_vs_first"] is None
    assert "+83.3±16.7%" in proc.stdout


def test_lab_compare_refuses_bad_steal_options_before_running(tmp_path: Path) -> None:
    for option, value in (("--attempts", "0"), ("--max-steal-pct", "-1")):
        proc = quell("lab", "compare", option, value, VALID, code=NEVER_CALLED_RUNNER)
        assert proc.returncode == 2 and option in proc.stderr, proc.stderr
        assert "run_lab was called" not in proc.stderr and "Traceback" not in proc.stderr

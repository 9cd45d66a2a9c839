"""``quell model multicore`` as a user runs it: ``python -m quell ...`` in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quell.cli import app
from quell.models.multicore import MulticoreModel
from quell.studies.multicore.measure import PLAN_FILE, POINT_FIELDS, POINTS_FILE

PAPER = ["--mu1", "3301", "--mu2", "300", "--cores", "4", "--capacity", "10000"]


def quell(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "quell", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def run_in_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The same command through the typer app in this process (success paths; no start-up)."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, "")


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def test_predict_json_document() -> None:
    doc = last_json(
        run_in_process(
            "model", "multicore", "predict", *PAPER, "--rate", "200", "--rate", "800", "--json"
        )
    )
    rates = doc["rates"]
    assert isinstance(rates, list) and [r["rate"] for r in rates] == [200.0, 800.0]
    for r in rates:
        assert set(r["cpu0"]) == {"E_k", "P_N", "E_T_s", "E_Ts_s", "util"}
        assert set(r["system"]) == {"E_T_s", "throughput_rps", "util_per_core"}
        assert len(r["system"]["util_per_core"]) == 4
    model = MulticoreModel(4, 1, 3301.0, 300.0, None, 10_000)
    assert rates[1]["system"]["E_T_s"] == pytest.approx(model.predict([800.0])[0].mean_response_s)


def test_predict_table() -> None:
    proc = quell("model", "multicore", "predict", *PAPER, "--rate", "500")
    assert proc.returncode == 0, proc.stderr
    assert "E[k] cpu0" in proc.stdout and "0.568 0.417 0.417 0.417" in proc.stdout
    assert "knee" in proc.stdout and "880.07 req/s" in proc.stdout


def test_knees_of_section_5_3_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    # Paper: 4 cores with 1 / 2 / 4 NICs bend at about 800 / 1000 / 1200 req/s.
    knees = {}
    for nics in (1, 2, 4):
        doc = last_json(
            run_in_process(
                "model",
                "multicore",
                "predict",
                *PAPER,
                "--interrupt-cores",
                str(nics),
                "--rate",
                "100",
                "--json",
            )
        )
        knees[nics] = doc["knee_rps"]
    with capsys.disabled():
        print(f"\nknees (paper ≈ 800 / 1000 / 1200): {knees}")
    assert knees[1] < knees[2] < knees[4]
    assert knees[1] == pytest.approx(800, rel=0.15)
    assert knees[2] == pytest.approx(1000, rel=0.15)
    assert knees[4] == pytest.approx(1200, rel=0.15)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in proc.stderr


def test_bad_input_lists_every_problem() -> None:
    proc = quell(
        "model",
        "multicore",
        "predict",
        "--cores",
        "2",
        "--mu1",
        "100",
        "--mu2",
        "50",
        "--p",
        "1.5",
        "--capacity",
        "0",
        "--rate",
        "-3",
        "--rate",
        "10",
    )
    assert_clean_failure(proc, "3 problem(s)", "p:", "capacity", "rate[0]")


def test_unstable_rate_is_a_clear_error() -> None:
    proc = quell(
        "model", "multicore", "predict", *PAPER, "--p", "0.1", "--rate", "500", "--rate", "1300"
    )
    assert_clean_failure(proc, "rate[1]", "unstable at 1300 req/s", "390 req/s ≥ μ2 = 300")


def test_unknown_discipline() -> None:
    proc = quell("model", "multicore", "predict", *PAPER, "--rate", "5", "--discipline", "fifo")
    assert_clean_failure(proc, "--discipline", "paper, shared")


def write_run(run_dir: Path) -> None:
    """A run directory as ``measure`` writes it, made from a known 2-core model."""
    run_dir.mkdir()
    (run_dir / PLAN_FILE).write_text(json.dumps({"cores": [0, 1], "connections": 256}))
    with (run_dir / POINTS_FILE).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=POINT_FIELDS)
        w.writeheader()
        for config, m in (("one", 1), ("spread", 2)):
            model = MulticoreModel(2, m, 9000.0, 5000.0, 0.45 if m == 1 else None, 256 // m)
            for pr in model.predict([1000.0, 2000.0, 3000.0, 4000.0]):
                soft = [pr.throughput_rps / 9000.0 / m if c < m else 0.0 for c in range(2)]
                w.writerow(
                    {
                        "config": config,
                        "interrupt_cores": m,
                        "rate_rps": pr.rate_rps,
                        "throughput_rps": pr.throughput_rps,
                        "mean_response_s": pr.mean_response_s,
                        "response_sd_s": pr.mean_response_s,
                        "responses": 10_000,
                        "errors": 0,
                        "util_per_core": json.dumps(list(pr.util_per_core)),
                        "softirq_per_core": json.dumps(soft),
                        "net_rx_per_s": "[]",
                        "server_cpu": 0.0,
                        "client_cpu": 0.0,
                        "foreign_cpu": 0.0,
                        "attempt": 0,
                    }
                )


def test_fit_recovers_and_blind_predicts_a_model_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    proc = run_in_process("model", "multicore", "fit", run, "--json")
    doc = last_json(proc)
    fit = doc["fit"]
    assert isinstance(fit, dict)
    assert fit["mu1_rps"] == pytest.approx(9000.0, rel=1e-9)
    assert fit["p"] == pytest.approx(0.45, rel=1e-9)
    assert fit["mu2_rps"] == pytest.approx(5000.0, rel=1e-5)
    configs = doc["configs"]
    assert isinstance(configs, list)
    spread = next(c for c in configs if c["config"] == "spread")
    assert spread["blind"] is True
    assert spread["errors"]["rt"] == pytest.approx(0.0, abs=1e-5)
    assert "Response time" in proc.stdout and "spread (m=2) blind" in proc.stdout
    assert (run / "report" / "multicore.png").stat().st_size > 10_000
    assert "μ1 = 9000" in (run / "report" / "index.html").read_text()


def test_fit_of_a_missing_run_is_a_clear_error(tmp_path: Path) -> None:
    assert_clean_failure(quell("model", "multicore", "fit", tmp_path / "nope"), "points.csv")

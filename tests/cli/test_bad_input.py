"""Commands other than ``scenario check`` given what they cannot use: a report on a file, an
empty or corrupt run; ``prima show`` on a non-bundle; ``model multicore fit`` on a bad run
directory; options out of range. Each exits 2 with a message, never a traceback, and writes
nothing. Run in-process (``tests.cli.inprocess``), so an exception the CLI lets through fails
the test as itself."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
import yaml

from quell.studies.multicore.measure import PLAN_FILE, POINTS_FILE
from tests.cli.inprocess import assert_refused, assert_usage_error, run_quell
from tests.models.test_model_cli import write_run
from tests.report.report_run import fill_run

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "scenarios" / "prima-sim-bundle.json"
SCENARIO = ROOT / "scenarios" / "sim-mm1.yaml"
SPEC = ROOT / "scenarios" / "prima" / "profile-file-lab.yaml"


# -- lab report / sim report ---------------------------------------------------------------------
def _corrupt_store(run_dir: Path, how: str) -> None:
    run_dir.mkdir()
    db = run_dir / "run.db"
    if how == "garbage":
        db.write_bytes(b"\x00garbage" * 512)
    elif how == "empty-db":
        sqlite3.connect(db).close()  # a database without quell's tables
    elif how == "truncated":
        fill_run(run_dir / "whole").close()
        db.write_bytes((run_dir / "whole" / "run.db").read_bytes()[:3000])
    elif how == "bad-meta":
        fill_run(run_dir).close()
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE meta SET value = '{not json' WHERE key = 'phases'")
    elif how == "db-is-a-dir":
        db.mkdir()


@pytest.mark.parametrize("command", ["lab", "sim"])
@pytest.mark.parametrize(
    ("how", "problem"),
    [
        ("garbage", "unreadable run store: file is not a database"),
        ("empty-db", "unreadable run store: no such table: observations"),
        ("truncated", "unreadable run store"),
        ("bad-meta", "not a usable run store"),
        ("db-is-a-dir", "not a run directory (no run.db)"),
    ],
)
def test_report_on_a_corrupt_run(tmp_path: Path, command: str, how: str, problem: str) -> None:
    run_dir = tmp_path / "run"
    _corrupt_store(run_dir, how)
    assert_refused(run_quell(command, "report", run_dir), str(run_dir), problem)
    assert not (run_dir / "report").exists()


@pytest.mark.parametrize("command", ["lab", "sim"])
def test_report_on_a_file_or_an_empty_dir(tmp_path: Path, command: str) -> None:
    assert_refused(run_quell(command, "report", SCENARIO), str(SCENARIO), "not a directory")
    assert_refused(run_quell(command, "report", tmp_path), "not a run directory (no run.db)")
    assert_refused(run_quell(command, "report", tmp_path / "nope"), "no such directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["run?x", "run#1", "run%20x", "run ;$(reboot)`id`|x", "[red]x["])
def test_report_on_a_run_whose_path_has_uri_or_shell_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The store opens the run's own run.db (it once read ``run?x`` as the file ``run`` with a
    query, found no tables there and left an empty ``run`` behind in the working directory)."""
    monkeypatch.chdir(tmp_path)
    fill_run(tmp_path / name).close()
    outcome = run_quell("sim", "report", name)
    assert outcome.code == 0, outcome
    assert (tmp_path / name / "report" / "index.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


# -- prima show ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        ("scenario", "line 1: not valid JSON: Expecting value"),
        ("latin-1", "not UTF-8 text: byte 0xe9"),
        ("list", "format: not a quell model bundle"),
        ("empty", "not valid JSON"),
        ("dir", "it is a directory, not a regular file"),
        ("fifo", "it is a FIFO, not a regular file"),
        ("truncated", "not valid JSON"),
        ("wrong-types", "meta.probe_period_s: Input should be a valid number"),
    ],
)
def test_prima_show_on_a_non_bundle(tmp_path: Path, make: str, problem: str) -> None:
    path = tmp_path / "bundle.json"
    if make == "scenario":
        path.write_bytes(SCENARIO.read_bytes())
    elif make == "latin-1":
        path.write_bytes(b'{"meta": "caf\xe9"}')
    elif make == "list":
        path.write_text("[1, 2]")
    elif make == "empty":
        path.touch()
    elif make == "dir":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "truncated":
        path.write_bytes(BUNDLE.read_bytes()[:500])
    elif make == "wrong-types":
        doc = json.loads(BUNDLE.read_text())
        doc["meta"]["probe_period_s"] = "soon"
        path.write_text(json.dumps(doc))
    assert_refused(run_quell("prima", "show", path), str(path), problem)


def test_prima_show_on_a_device_or_a_nul_path() -> None:
    assert_refused(run_quell("prima", "show", "/dev/zero"), "it is a character device")
    assert_usage_error(run_quell("prima", "show", "a\0b.json"), "embedded null byte")


def test_prima_show_on_a_bundle() -> None:
    outcome = run_quell("prima", "show", BUNDLE)
    assert outcome.code == 0, outcome
    assert outcome.stdout.startswith("workload ")


# -- model multicore fit -------------------------------------------------------------------------
def _rewrite_points(run_dir: Path, change: dict[str, str]) -> None:
    path = run_dir / POINTS_FILE
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({**row, **change})


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        ("no-points", "cannot read measured points: No such file or directory"),
        ("points-latin-1", "not UTF-8 text: byte 0xb5"),
        ("points-fifo", "it is a FIFO, not a regular file"),
        ("points-huge-field", "not valid CSV: field larger than field limit"),
        ("no-plan", "cannot read measurement plan: No such file or directory"),
        ("plan-list", "Input should be a valid dictionary"),
        ("plan-no-cores", "cores: required key is missing"),
        ("plan-cores-number", "cores: Input should be a valid list"),
        ("zero-interrupt-cores", "interrupt_cores is 0, not at least 1"),
        ("util-strings", "is not a JSON list of numbers"),
        ("rate-text", "could not convert string to float: 'fast'"),
    ],
)
def test_multicore_fit_on_a_bad_run_directory(tmp_path: Path, spoil: str, problem: str) -> None:
    run = tmp_path / "run"
    write_run(run)
    points, plan = run / POINTS_FILE, run / PLAN_FILE
    if spoil == "no-points":
        points.unlink()
    elif spoil == "points-latin-1":
        points.write_bytes(points.read_bytes() + b"one,1,1000,\xb5s\n")
    elif spoil == "points-fifo":
        points.unlink()
        os.mkfifo(points)
    elif spoil == "points-huge-field":
        points.write_text(points.read_text() + '"' + "x" * 200_000 + '"\n')
    elif spoil == "no-plan":
        plan.unlink()
    elif spoil == "plan-list":
        plan.write_text("[]")
    elif spoil == "plan-no-cores":
        plan.write_text('{"connections": 256}')
    elif spoil == "plan-cores-number":
        plan.write_text('{"cores": 2, "connections": 256}')
    elif spoil == "zero-interrupt-cores":
        _rewrite_points(run, {"interrupt_cores": "0"})
    elif spoil == "util-strings":
        _rewrite_points(run, {"util_per_core": '["a", "b"]'})
    elif spoil == "rate-text":
        _rewrite_points(run, {"rate_rps": "fast"})
    assert_refused(run_quell("model", "multicore", "fit", run), str(run), problem)
    assert not (run / "report").exists()


def test_multicore_fit_on_a_file_or_an_empty_dir(tmp_path: Path) -> None:
    assert_refused(run_quell("model", "multicore", "fit", SCENARIO), "Not a directory")
    assert_refused(run_quell("model", "multicore", "fit", tmp_path), "No such file or directory")
    assert list(tmp_path.iterdir()) == []


# -- options out of range ------------------------------------------------------------------------
PAPER = ["--mu1", "3301", "--mu2", "300", "--cores", "4"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["sim", "compare", "--seeds", "0", SCENARIO], ["--seeds"]),
        (["sim", "compare", "--seeds", "10" * 12, SCENARIO], ["--seeds"]),
        (["lab", "compare", "--attempts", "6", SCENARIO], ["--attempts"]),
        (["lab", "compare", "--max-steal-pct", "nan", SCENARIO], ["--max-steal-pct"]),
        (["lab", "compare", "--max-steal-pct", "101", SCENARIO], ["--max-steal-pct"]),
        (["prima", "profile", SPEC, "--out", "OUT", "--repetitions", "0"], ["--repetitions"]),
        (["prima", "profile", SPEC, "--out", "OUT", "--repetitions", "21"], ["--repetitions"]),
        (["model", "multicore", "predict", *PAPER, "--rate", "x"], ["--rate"]),
        (["scenario", "check", "--bogus", SCENARIO], ["No such option: --bogus"]),
        (["scenario", "check", ROOT / "scenarios"], ["Invalid value for 'path'"]),
    ],
    ids=lambda v: " ".join(map(str, v)) if isinstance(v, list) else None,
)
def test_option_out_of_range_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str | Path], fragments: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert_usage_error(run_quell(*args), *fragments)
    assert list(tmp_path.iterdir()) == []  # no runs/ or OUT/


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["model", "multicore", "predict", *PAPER, "--rate", "nan"], ["rate[0]", "got nan"]),
        (["model", "multicore", "predict", *PAPER, "--rate", "1e400"], ["rate[0]", "got inf"]),
        (["model", "multicore", "predict", *PAPER, "--rate", "1", "--p", "2"], ["p: must be"]),
        (["model", "multicore", "predict", *PAPER, "--rate", "1", "--capacity", "0"], ["N must"]),
        (  # was a MemoryError: the model keeps one entry per core
            ["model", "multicore", "predict", *PAPER, "--rate", "1", "--cores", "1" + "0" * 10],
            ["cores: must be a whole number in [1, 8192], got 10000000000"],
        ),
        (
            ["model", "multicore", "predict", *PAPER, "--rate", "1", "--discipline", "[b]x"],
            ["[b]x"],
        ),
        (
            ["prima", "profile", SPEC, "--out", "OUT", "--env", "moon"],
            ["'moon': choose lab or sim"],
        ),
        (["model", "multicore", "measure", "--step-s", "1"], ["step_s: must be in [3, 60] s"]),
        (["model", "multicore", "measure", "--rate", "inf"], ["rates_rps[0]"]),
        (
            ["model", "multicore", "measure", "--connections", "0", "--config", "bogus"],
            ["connections: must be in", "unknown configuration 'bogus'"],
        ),
    ],
    ids=lambda v: " ".join(map(str, v)) if isinstance(v, list) else None,
)
def test_option_value_the_command_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str | Path], fragments: list[str]
) -> None:
    import quell.studies.multicore.measure as measure

    def never(*_: object) -> Path:
        raise AssertionError("the measurement would have started")

    monkeypatch.setattr(measure, "unique_run_dir", never)
    monkeypatch.chdir(tmp_path)
    assert_refused(run_quell(*args), *fragments)
    assert list(tmp_path.iterdir()) == []


# -- names that become paths ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["../../../escaped", "$(reboot);`id`|x &", "~root/.ssh/ b", "/etc"]
)
def test_a_scenario_name_stays_inside_the_runs_directory(tmp_path: Path, name: str) -> None:
    """The run directory is named after the scenario; '../../../escaped' made one outside
    --runs-dir (and a name ending in '/etc/shadow' a FileExistsError as root)."""
    doc = yaml.safe_load(SCENARIO.read_text()) | {"name": name, "duration_s": 20}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    runs = tmp_path / "a" / "b" / "runs"
    outcome = run_quell("sim", "run", scenario, "--runs-dir", runs)
    assert outcome.code == 0, outcome
    (run_dir,) = runs.iterdir()
    assert (run_dir / "run.db").is_file()
    assert re.fullmatch(r"\d{8}-\d{6}-sim-[A-Za-z0-9._-]+", run_dir.name), run_dir.name
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_dir() and runs not in p.parents) == [
        "a",
        "b",
        "runs",
    ]

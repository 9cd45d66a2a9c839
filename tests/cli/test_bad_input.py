"""Commands other than ``scenario check`` given what they cannot use: a report on a file, an
empty or corrupt run; ``prima show`` on a non-bundle; ``model multicore fit`` on a bad run
directory; options out of range. Each exits 2 with a message, never a traceback, and writes
nothing. Run in-process (``tests.cli.inprocess``), so an exception the CLI lets through fails
the test as itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.cli.inprocess import assert_refused, run_quell
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

"""A lab is in use while the process that brought it up runs, whatever that program is (a
test runner as well as quell): ``quell lab clean`` must leave it alone. The pid and its start
time name the process; a reused pid does not pass for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from quell.lab.cleanup import process_start_ticks, runner_alive, runner_record


def test_a_live_runner_of_any_program_keeps_its_lab(tmp_path: Path) -> None:
    # a plain python sleeping: no "quell" in its command line
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state = tmp_path / "state.json"
        record = runner_record(proc.pid)
        assert record["pid_start_ticks"] == process_start_ticks(proc.pid) is not None
        state.write_text(json.dumps({"tag": "t", **record}))
        assert runner_alive(state)
        # the same pid with another start time is another process (a reused pid)
        state.write_text(json.dumps({"tag": "t", **record, "pid_start_ticks": 1}))
        assert not runner_alive(state)
    finally:
        proc.kill()
        proc.wait()
    state.write_text(json.dumps({"tag": "t", **record}))
    assert not runner_alive(state)  # gone


def test_a_state_file_without_a_start_time_falls_back_to_the_command_line(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state = tmp_path / "state.json"
        state.write_text(json.dumps({"tag": "t", "pid": proc.pid}))
        assert not runner_alive(state)  # no "quell" in "python -c ..."
    finally:
        proc.kill()
        proc.wait()

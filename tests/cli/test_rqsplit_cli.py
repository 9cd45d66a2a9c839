"""``quell attribute rqsplit`` refuses what it cannot do with exit 2 and a message: a missing
target, both targets, a command that is not there, and the eBPF program not built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.inprocess import assert_refused, run_quell


def test_one_target_is_needed() -> None:
    assert_refused(run_quell("attribute", "rqsplit"), "one of --pid PID or a command after --")
    assert_refused(
        run_quell("attribute", "rqsplit", "--pid", "1", "--", "true"),
        "one of --pid PID or a command after --",
    )


def test_a_missing_command_or_process_is_refused() -> None:
    assert_refused(
        run_quell("attribute", "rqsplit", "--", "/nonexistent/quell-cmd"),
        "'/nonexistent/quell-cmd' is not an executable",
    )
    # pid_max is at most 2**22 on Linux
    assert_refused(run_quell("attribute", "rqsplit", "--pid", str(2**22 + 1)), "no process")


def test_the_program_not_built_exits_2_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "rqwait.bpf.o"
    monkeypatch.setenv("QUELL_RQWAIT_OBJ", str(missing))
    outcome = run_quell("attribute", "rqsplit", "--", "true")
    assert_refused(outcome, str(missing), "make native", "eBPF run-queue split")

"""The command line run in this process (``quell.cli.main`` with argv), its output captured:
no interpreter start-up per call, and an exception the CLI does not turn into a message
reaches the test as itself."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from quell.cli import main


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_quell(*args: str | Path) -> Outcome:
    """``quell ARGS``: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_refused(outcome: Outcome, *fragments: str) -> None:
    """Exit 2 with ``error: `` and every fragment on stderr, no traceback, nothing on stdout."""
    assert outcome.code == 2, outcome
    assert "Traceback" not in outcome.stderr + outcome.stdout
    assert outcome.stderr.startswith("error: "), outcome.stderr
    for fragment in fragments:
        assert fragment in outcome.stderr, (fragment, outcome.stderr)


def assert_usage_error(outcome: Outcome, *fragments: str) -> None:
    """Exit 2 with the command line's usage message naming each fragment, no traceback."""
    assert outcome.code == 2, outcome
    assert "Traceback" not in outcome.stderr + outcome.stdout
    assert "Usage:" in outcome.stderr, outcome.stderr
    for fragment in fragments:
        assert fragment in outcome.stderr, (fragment, outcome.stderr)

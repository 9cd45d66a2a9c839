"""What the command line prints and how: results on stdout (a JSON document as the last line
with ``--json``), progress and diagnostics on stderr, every message from outside (an error, a
file's contents, a path) printed literally, never read as markup."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)
out_console = Console()


@contextmanager
def progress_bar(total_s: float, label: str) -> Iterator[Callable[[float, str], None]]:
    """A bar over ``total_s`` seconds of run; the callable moves it and names the phase."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("[bold]{task.fields[phase]:<14}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )
    with progress:
        task = progress.add_task(escape(label), total=total_s, phase="starting")

        def update(done_s: float, phase: str) -> None:
            progress.update(task, completed=done_s, phase=escape(phase))

        yield update


@contextmanager
def steps_bar(total: int, label: str) -> Iterator[Callable[[str], None]]:
    """A bar over ``total`` steps, labelled ``label`` until the first note; each note after the
    first moves it one step and names the step under way; full and ``done`` at the end."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task(escape(label), total=total)
        first = True

        def note(what: str) -> None:
            nonlocal first
            if not first:
                progress.advance(task)
            first = False
            progress.update(task, description=escape(what))

        yield note
        progress.update(task, completed=total, description="done")


def emit_json(doc: Any) -> None:
    """``doc`` as one line of JSON, the last on stdout."""
    sys.stdout.flush()
    print(json.dumps(doc, separators=(",", ":")))


def emit_summary(summary: dict[str, Any], as_json: bool) -> None:
    """A run's phase tables, then (``as_json``) the summary as the last line."""
    from quell.report.table import print_summary

    print_summary(summary, out_console)
    if as_json:
        emit_json(summary)


def say(message: str, style: str | None = None) -> None:
    """A diagnostic on stderr, printed literally, in ``style`` (e.g. ``"yellow"``), and not
    wrapped (a path it names stays one piece to copy; the terminal wraps it)."""
    err_console.print(message, style=style, markup=False, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    """An error on stderr: ``error: `` and the message, printed literally and not wrapped (a
    long path stays one piece to copy; the terminal wraps it)."""
    err_console.print(f"[red]error[/]: {escape(message)}", highlight=False, soft_wrap=True)

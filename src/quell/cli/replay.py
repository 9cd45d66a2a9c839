"""``quell replay``: decide again on a recorded run, with the policy's parameters changed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quell.cli.options import JsonOpt, RunDirArg

SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="A policy parameter to change, as key=value (the value read as YAML); repeatable.",
    ),
]
BaseDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--base-dir",
        help="Where the parameters' relative paths (model files) resolve; default: the "
        "scenario's directory as the run recorded it.",
    ),
]


def replay_command(
    run_dir: RunDirArg,
    changes: SetOpt = None,
    base_dir: BaseDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run RUN_DIR's policy again over the snapshots it recorded, without acting: with nothing
    changed every decision comes back as recorded; with --set, where the changed policy would
    first have added or removed an instance differently, and its scaling actions per phase."""
    from quell.cli.console import emit_json, out_console
    from quell.experiment.replay import parse_changes, replay_run
    from quell.report.replay import print_replay

    doc = replay_run(run_dir, parse_changes(changes or []), base_dir).as_dict()
    print_replay(doc, out_console)
    if as_json:
        emit_json(doc)

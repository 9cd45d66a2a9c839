"""Arguments and options that several command groups share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ScenarioArg = Annotated[Path, typer.Argument(help="Scenario YAML file.", dir_okay=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document as the last line.")]
RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", help="Where run directories are created.")]
RunDirArg = Annotated[Path, typer.Argument(help="A run directory.")]

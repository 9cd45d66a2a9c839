"""``quell study``: measurement campaigns run as sweeps of points. ``consolidation`` runs the
consolidation study (docs/papers/consolidation.md) in the lab or the simulator;
``consolidation-results`` writes its results page and figures from the study records."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

study_app = typer.Typer(help="Measurement campaigns: the consolidation study.")


@study_app.command("consolidation")
def consolidation(
    spec_path: Annotated[Path, typer.Argument(help="Study spec (YAML).", dir_okay=False)],
    env: Annotated[str, typer.Option("--env", help="lab or sim.")] = "sim",
    runs_dir: Annotated[
        Path | None,
        typer.Option("--runs-dir", help="Where the points' runs go (resumable)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON document as the last line.")
    ] = False,
) -> None:
    """Run a consolidation study's points (each written as it is measured; a point measured
    before is read back), then write the study record (<runs-dir>/<name>-<env>.json), its
    figures (<runs-dir>/figures/) and print each curve's shape."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from quell.cli.console import emit_json, err_console, out_console, say
    from quell.studies.consolidation.sweep import ConsolidationCampaign

    campaign = ConsolidationCampaign(spec_path, env, runs_dir)
    progress = Progress(
        TextColumn("[bold]{task.fields[what]:<52}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task("points", total=campaign.points, what="starting")
        done = campaign.run(lambda k, what: progress.update(task, completed=k, what=what[:52]))
    for c in done.curves:
        out_console.print(
            f"{c.curve}: base {1e3 * c.base_rt_s:.1f} ms, peak {1e3 * c.peak_rt_s:.1f} ms at"
            f" {c.peak_inc_users} Sys_Inc users ({c.degradation:.2f}x), last"
            f" {1e3 * c.last_rt_s:.1f} ms{', non-monotonic' if c.non_monotonic else ''}",
            markup=False,
            highlight=False,
        )
    say(f"{done.points} point(s); record {done.record}; figures in {done.runs_dir / 'figures'}")
    if as_json:
        emit_json(done.to_json())


@study_app.command("consolidation-results")
def consolidation_results(
    data: Annotated[Path, typer.Option("--data", help="Directory of study records.")] = Path(
        "docs/results/data/consolidation"
    ),
    out: Annotated[Path, typer.Option("--out", help="The page to write.")] = Path(
        "docs/results/consolidation.md"
    ),
    figures: Annotated[Path, typer.Option("--figures", help="Directory for the figures.")] = Path(
        "docs/img/consolidation"
    ),
) -> None:
    """Write the consolidation study's results page and its figures from the study records in
    --data (copied there from each study's <runs-dir>/record/)."""
    from quell.cli.console import say
    from quell.studies.consolidation.results import write_page

    write_page(data, out, figures)
    say(f"results page written to {out}, figures to {figures}")

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
    from quell.errors import InputError, Problem
    from quell.studies.consolidation.results import curves, shape, write_figures
    from quell.studies.consolidation.spec import Env, load_study
    from quell.studies.consolidation.sweep import (
        collect,
        lab_measure,
        run_study,
        sim_measure,
        write_record,
    )

    if env not in ("lab", "sim"):
        raise InputError("--env", [Problem("--env", f"{env!r}: choose lab or sim")])
    study = load_study(spec_path)
    which: Env = "lab" if env == "lab" else "sim"
    measure = lab_measure() if which == "lab" else sim_measure(study.spec.sim)
    root = runs_dir or Path("runs") / "consolidation" / study.spec.name
    points = study.points(which)
    progress = Progress(
        TextColumn("[bold]{task.fields[what]:<52}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task("points", total=len(points), what="starting")

        def step(done: int, what: str) -> None:
            progress.update(task, completed=done, what=what[:52])

        measured = run_study(study, which, root, measure, step)
    record = collect(study, which, measured)
    data_dir = root / "record"
    record_path = data_dir / f"{study.spec.name}-{which}.json"
    write_record(record_path, record)
    figures = write_figures(data_dir, root / "figures")
    cs = curves(record)
    summary = []
    for c, cells in cs.items():
        if len(cells) < 2:
            continue
        sh = shape(cells)
        summary.append(
            {
                "curve": c.name(),
                "base_rt_s": sh.base_s,
                "peak_rt_s": sh.peak_s,
                "peak_inc_users": sh.peak_at,
                "last_rt_s": sh.last_s,
                "degradation": sh.degradation,
                "non_monotonic": sh.non_monotonic,
            }
        )
        out_console.print(
            f"{c.name()}: base {1e3 * sh.base_s:.1f} ms, peak {1e3 * sh.peak_s:.1f} ms at"
            f" {sh.peak_at} Sys_Inc users ({sh.degradation:.2f}x), last {1e3 * sh.last_s:.1f}"
            f" ms{', non-monotonic' if sh.non_monotonic else ''}",
            markup=False,
            highlight=False,
        )
    say(f"{len(measured)} point(s); record {record_path}; figures in {root / 'figures'}")
    if as_json:
        emit_json(
            {
                "name": study.spec.name,
                "env": which,
                "runs_dir": str(root),
                "record": str(record_path),
                "figures": [str(f) for f in figures],
                "points": len(measured),
                "curves": summary,
            }
        )


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
    import os

    from quell.cli.console import say
    from quell.errors import InputError, Problem
    from quell.studies.consolidation.results import render, write_figures

    if not data.is_dir():
        raise InputError(str(data), [Problem("", "not a directory")])
    image_dir = os.path.relpath(figures, out.parent)
    try:
        page = render(data, image_dir=image_dir)
        write_figures(data, figures)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(
            str(data), [Problem("", f"a record is not of a known form: {exc}")]
        ) from None
    out.write_text(page)
    say(f"results page written to {out}, figures to {figures}")

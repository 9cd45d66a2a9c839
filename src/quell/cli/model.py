"""``quell model``: analytical performance models. ``quell model multicore`` is the multicore
web-server model of Chen et al. (ICPE 2014): predict, measure in the lab, fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quell.cli.options import JsonOpt

model_app = typer.Typer(help="Analytical performance models: predict, fit to measurements.")
multicore_app = typer.Typer(
    help="Multicore web server whose NIC soft interrupts load some cores (Chen et al. 2014)."
)
model_app.add_typer(multicore_app, name="multicore", no_args_is_help=True)

DisciplineOpt = Annotated[
    str,
    typer.Option(
        "--discipline",
        help="How an interrupt core serves its two job classes: 'paper' (each class at its "
        "full rate, the paper's assumption) or 'shared' (one processor shared by all jobs).",
    ),
]


@multicore_app.command("predict")
def predict(
    cores: Annotated[int, typer.Option("--cores", help="Cores n of the server.")],
    mu1: Annotated[float, typer.Option("--mu1", help="Soft-interrupt service rate μ1, req/s.")],
    mu2: Annotated[float, typer.Option("--mu2", help="Application service rate μ2, req/s.")],
    rate: Annotated[
        list[float], typer.Option("--rate", help="Request rate λ, req/s (repeat for several).")
    ],
    interrupt_cores: Annotated[
        int, typer.Option("--interrupt-cores", help="Cores m that handle NIC interrupts.")
    ] = 1,
    p: Annotated[
        float | None,
        typer.Option(
            "--p",
            help="Probability a request's application work stays on its interrupt core "
            "(default m/n: spread evenly; must be 1 when m = n).",
        ),
    ] = None,
    capacity: Annotated[
        int, typer.Option("--capacity", help="Job limit N of each interrupt core.")
    ] = 1000,
    discipline: DisciplineOpt = "paper",
    as_json: JsonOpt = False,
) -> None:
    """Predict response time, blocking, throughput and per-core utilisation at each rate."""
    from quell.cli.console import emit_json, out_console
    from quell.models.multicore import MulticoreModel, as_discipline, prediction_document
    from quell.studies.multicore.tables import print_prediction

    model = MulticoreModel(cores, interrupt_cores, mu1, mu2, p, capacity, as_discipline(discipline))
    doc = prediction_document(model, list(rate))
    print_prediction(doc, out_console)
    if as_json:
        emit_json(doc)


RunDirArg = Annotated[
    Path, typer.Argument(help="A run directory of `quell model multicore measure`.")
]


@multicore_app.command("measure")
def measure(
    rate: Annotated[
        list[float] | None,
        typer.Option(
            "--rate",
            help="Offered request rate, req/s (repeat; default 1000..10000 in steps of 1000).",
        ),
    ] = None,
    step_s: Annotated[float, typer.Option("--step-s", help="Seconds per rate.")] = 6.0,
    connections: Annotated[int, typer.Option("--connections", help="Client connections.")] = 256,
    file_bytes: Annotated[
        int, typer.Option("--file-bytes", help="Size of the served file.")
    ] = 16384,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            help="'one' (interrupts on CPU 0), 'spread' (RPS over all CPUs), 'local' (RPS off).",
        ),
    ] = None,
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Where run directories are created.")
    ] = Path("runs"),
    as_json: JsonOpt = False,
) -> None:
    """Measure a static server at increasing rates with soft interrupts on one core, then
    spread over all (root; a few minutes; leaves nothing running)."""
    from rich.markup import escape

    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.studies.multicore.measure import measure as run_measure

    run_dir = run_measure(
        rate or [], step_s, connections, file_bytes, config or [], runs_dir, progress_bar
    )
    say(f"measured into {run_dir}")
    out_console.print(f"next: quell model multicore fit {escape(str(run_dir))}")
    if as_json:
        emit_json({"run_dir": str(run_dir)})


@multicore_app.command("fit")
def fit(
    run_dir: RunDirArg,
    fit_config: Annotated[
        str, typer.Option("--fit-config", help="Configuration to fit on; the others are blind.")
    ] = "one",
    discipline: DisciplineOpt = "paper",
    as_json: JsonOpt = False,
) -> None:
    """Estimate μ1, p and μ2 from a lab run, blind-predict the other configuration, and write
    a report (PNG + HTML) into RUN_DIR/report."""
    from quell.cli.console import emit_json, out_console, say
    from quell.studies.multicore.report import fit as fit_and_report
    from quell.studies.multicore.tables import print_fit

    fitted = fit_and_report(run_dir, fit_config, discipline)
    print_fit(fitted, out_console, say)
    if as_json:
        emit_json(fitted.doc)

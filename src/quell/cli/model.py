"""``quell model``: analytical performance models. ``quell model multicore`` is the multicore
web-server model of Chen et al. (ICPE 2014): predict, measure in the lab, fit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # the model pulls in numpy and scipy: loaded when a command runs
    from quell.models.multicore import Discipline, MulticoreModel

model_app = typer.Typer(help="Analytical performance models: predict, fit to measurements.")
multicore_app = typer.Typer(
    help="Multicore web server whose NIC soft interrupts load some cores (Chen et al. 2014)."
)
model_app.add_typer(multicore_app, name="multicore", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document as the last line.")]
DisciplineOpt = Annotated[
    str,
    typer.Option(
        "--discipline",
        help="How an interrupt core serves its two job classes: 'paper' (each class at its "
        "full rate, the paper's assumption) or 'shared' (one processor shared by all jobs).",
    ),
]


def _discipline(value: str) -> Discipline:
    from quell.errors import InputError, Problem
    from quell.models.multicore import DISCIPLINES

    if value not in DISCIPLINES:
        raise InputError(
            "--discipline", [Problem("", f"must be one of {', '.join(DISCIPLINES)}, got {value!r}")]
        )
    return "paper" if value == "paper" else "shared"


def prediction_document(model: MulticoreModel, rates: list[float]) -> dict[str, Any]:
    """The JSON document of ``predict``: one entry per rate, plus the model and its knee."""
    predictions = model.predict(rates)
    return {
        "model": {
            "cores": model.cores,
            "interrupt_cores": model.interrupt_cores,
            "mu1_rps": model.mu1_rps,
            "mu2_rps": model.mu2_rps,
            "p": model.p_effective,
            "capacity": model.capacity,
            "discipline": model.discipline,
        },
        "knee_rps": model.knee_rps(),
        "rates": [pr.as_dict() for pr in predictions],
    }


def _print_prediction(doc: dict[str, Any]) -> None:
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table

    m = doc["model"]
    table = Table(
        title=(
            f"{m['cores']} cores, {m['interrupt_cores']} interrupt core(s), μ1 = {m['mu1_rps']:g}, "
            f"μ2 = {m['mu2_rps']:g} req/s, p = {m['p']:.4g}, N = {m['capacity']}, "
            f"{m['discipline']}"
        )
    )
    for col in (
        "rate req/s",
        "E[k] cpu0",
        "P_N cpu0",
        "E[T] cpu0 ms",
        "E[Ts] cpu0 ms",
        "util cpu0",
        "E[T] ms",
        "tput req/s",
        "util per core",
    ):
        table.add_column(escape(col), justify="right")
    for r in doc["rates"]:
        c, s = r["cpu0"], r["system"]
        table.add_row(
            f"{r['rate']:g}",
            f"{c['E_k']:.4g}",
            f"{c['P_N']:.3g}",
            f"{1e3 * c['E_T_s']:.4g}",
            f"{1e3 * c['E_Ts_s']:.4g}",
            f"{c['util']:.3f}",
            f"{1e3 * s['E_T_s']:.4g}",
            f"{s['throughput_rps']:.5g}",
            " ".join(f"{u:.3f}" for u in s["util_per_core"]),
        )
    out_console.print(table)
    out_console.print(
        f"knee (busiest core's CPU demand reaches one core): {doc['knee_rps']:.5g} req/s"
    )


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
    from quell.models.multicore import MulticoreModel

    model = MulticoreModel(cores, interrupt_cores, mu1, mu2, p, capacity, _discipline(discipline))
    doc = prediction_document(model, list(rate))
    _print_prediction(doc)
    if as_json:
        sys.stdout.flush()
        print(json.dumps(doc, separators=(",", ":")))


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

    from quell.cli.console import out_console, progress_bar, say
    from quell.studies.multicore.measure import CONFIGS, MeasurePlan, run_measurement

    defaults = MeasurePlan()
    plan = MeasurePlan(
        rates_rps=tuple(rate) if rate else defaults.rates_rps,
        step_s=step_s,
        connections=connections,
        file_bytes=file_bytes,
        configs=tuple(config) if config else CONFIGS,
    )
    run_dir = run_measurement(plan, runs_dir, lambda: progress_bar(plan.total_s, "multicore"))
    say(f"measured into {run_dir}")
    out_console.print(f"next: quell model multicore fit {escape(str(run_dir))}")
    if as_json:
        sys.stdout.flush()
        print(json.dumps({"run_dir": str(run_dir)}))


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
    from rich.markup import escape

    from quell.cli.console import out_console, say
    from quell.report.fit import FitTable as Table
    from quell.studies.multicore.report import error_rows, fit_document, fit_run, write_report

    est, results, _ = fit_run(run_dir, fit_config, _discipline(discipline))
    doc = fit_document(est, results)
    out = write_report(run_dir, est, results, doc)
    f = doc["fit"]
    out_console.print(
        f"fitted on {fit_config!r} ({est.discipline}): μ1 = {f['mu1_rps']:.0f} ± "
        f"{f['mu1_se_rps']:.0f} req/s, p = {f['p']:.3f} ± {f['p_se']:.3f}, μ2 = "
        f"{f['mu2_rps']:.0f} ± {f['mu2_se_rps']:.0f} req/s (χ² {f['chi2']:.3g}, {f['dof']} dof)",
        highlight=False,
    )
    rows = error_rows(results)
    table = Table(title="Mean relative error between model and measurement (%)")
    for col in rows[0]:
        table.add_column(escape(col), justify="right")
    for row in rows[1:]:
        table.add_row(*row)
    out_console.print(table)
    say(f"report written to {out}")
    if as_json:
        sys.stdout.flush()
        print(json.dumps(doc, separators=(",", ":")))

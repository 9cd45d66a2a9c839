"""``quell attribute``: fit Soroban's attribution model on runs of one schedule, predict each
request's provider part with its interval, report it (table, plots, HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quell.cli.options import JsonOpt

attribute_app = typer.Typer(
    help="Attribute each request's latency to the provider (co-located load) or the service."
)

ModelArg = Annotated[Path, typer.Argument(help="Attribution model bundle (JSON).", dir_okay=False)]
RunsArg = Annotated[
    list[Path],
    typer.Argument(help="Run directories (*.qtlog, requests.csv.gz or records.csv; psi.csv)."),
]


@attribute_app.command("fit")
def fit_command(
    uncontended: Annotated[
        Path, typer.Option("--uncontended", help="The schedule's run without co-located load.")
    ],
    contended: Annotated[
        list[Path], typer.Option("--contended", help="A run of the same schedule under load.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Where to write the model bundle.")],
    test_uncontended: Annotated[
        Path | None,
        typer.Option(
            "--test-uncontended", help="Held-out: the uncontended run of another schedule."
        ),
    ] = None,
    test_contended: Annotated[
        list[Path] | None,
        typer.Option(
            "--test-contended",
            help="Held-out: a run under other load (other seed or antagonist kind).",
        ),
    ] = None,
    labels: Annotated[
        str, typer.Option("--labels", help="percentile (the seed's) or paired (by request id).")
    ] = "percentile",
    inducing: Annotated[int, typer.Option("--inducing", min=1, help="Inducing inputs.")] = 200,
    iters: Annotated[int, typer.Option("--iters", min=1, help="L-BFGS-B iterations.")] = 50,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the split and the GP.")] = 0,
    holdout: Annotated[
        float, typer.Option("--holdout", min=0.0, max=0.9, help="Share of requests held out.")
    ] = 0.2,
    baselines: Annotated[
        bool, typer.Option("--baselines/--no-baselines", help="Score the baselines too.")
    ] = True,
    exact_points: Annotated[
        int, typer.Option("--exact-points", min=10, help="Training requests of the exact GP.")
    ] = 1000,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="Calibrate the GP's interval by leaving each contended run out (needs two).",
        ),
    ] = True,
    include_uncontended: Annotated[
        bool,
        typer.Option(
            "--include-uncontended/--no-include-uncontended",
            help="Train on the uncontended run's requests too, with excess 0.",
        ),
    ] = True,
    floor_quantile: Annotated[
        float,
        typer.Option(
            "--floor-quantile",
            help="The provider floor: this quantile of the predicted excess of the uncontended"
            " run's requests (below it no provider part); 0 for none.",
        ),
    ] = 0.995,
    as_json: JsonOpt = False,
) -> None:
    """Label the contended runs' requests against the uncontended run, fit the sparse GP, score
    it and the baselines on held-out requests, and write the model bundle."""
    from quell.cli.console import emit_json, out_console, steps_bar
    from quell.core.extras import require
    from quell.experiment.attribution import FitSettings, fit_runs
    from quell.report.attribution_runs import print_fit

    require(["GPy", "sklearn", "pandas"], "quell attribute fit: the models", "research")
    settings = FitSettings(
        inducing, iters, seed, holdout, exact_points, baselines, calibrate, floor_quantile
    )
    result = fit_runs(
        uncontended, contended, out, settings, labels, include_uncontended,
        test_uncontended, test_contended or [], steps_bar,
    )  # fmt: skip
    doc = {"model": str(out)} | result.as_dict()
    print_fit(doc, out_console)
    if as_json:
        emit_json(doc)


@attribute_app.command("predict")
def predict_command(
    model: ModelArg,
    runs: RunsArg,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Per-request CSV (one run) or directory of them (several)."),
    ] = None,
    level: Annotated[float, typer.Option("--level", help="Interval level.")] = 0.95,
    as_json: JsonOpt = False,
) -> None:
    """Each request's predicted excess with its interval and its provider and service parts."""
    from quell.cli.console import emit_json, out_console, say
    from quell.report.attribution_runs import predict_runs, print_runs

    attributed = predict_runs(model, runs, out, level, say)
    print_runs(attributed, out_console)
    if as_json:
        emit_json(attributed.as_dict())


@attribute_app.command("report")
def report_command(
    model: ModelArg,
    runs: RunsArg,
    out: Annotated[Path, typer.Option("--out", help="Directory for the PNGs and index.html.")],
    as_json: JsonOpt = False,
) -> None:
    """The runs' latency and provider part: a table, a per-request attribution plot per run,
    the heatmap over the runs' cells (when each has a cell.json naming its antagonist workers
    and service load) and an HTML page."""
    from quell.cli.console import emit_json, out_console, say
    from quell.report.attribution_runs import print_runs, report_runs

    attributed = report_runs(model, runs, out, say)
    print_runs(attributed, out_console)
    if as_json:
        emit_json(attributed.as_dict())


@attribute_app.command("measure")
def measure_command(
    out: Annotated[Path, typer.Option("--out", help="Directory of the campaign's runs.")],
    part: Annotated[str, typer.Option("--part", help="train or test.")] = "train",
    cpu: Annotated[int, typer.Option("--cpu", min=0, help="The CPU the service shares.")] = 1,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            min=10,
            help="Requests per run (the campaign's: 6,000 to train, 50,000 to test, 10,000 for "
            "the periodic runs).",
        ),
    ] = None,
    ebpf: Annotated[
        bool,
        typer.Option(
            "--ebpf",
            help="Attach the eBPF run-queue split for the runs: each request also records its "
            "wait behind other cgroups and its preemptions by them (exit 2 if it cannot load).",
        ),
    ] = False,
) -> None:
    """Run the campaign's cells of ``part`` on this machine (root; under the lab lock): the
    instrumented service beside stress-ng tenants, each run's per-request records, PSI samples
    and cell in ``out/<cell>/``. Cells already measured are kept."""
    from quell.cli.console import say
    from quell.studies.attribution.campaign import measure

    measure(out, part, cpu, requests, ebpf, say)


InducingOpt = Annotated[
    int, typer.Option("--inducing", min=1, help="Inducing points of the sparse GP.")
]
ItersOpt = Annotated[
    int, typer.Option("--iters", min=1, help="Optimiser iterations of the sparse GP.")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the fits and of the held-out draws.")]


@attribute_app.command("analyse")
def analyse_command(
    runs_dir: Annotated[Path, typer.Argument(help="The campaign's measured runs.")],
    data: Annotated[
        Path, typer.Option("--data", help="Where to keep the runs' data and results.json.")
    ],
    inducing: InducingOpt = 200,
    iters: ItersOpt = 50,
    seed: SeedOpt = 0,
    exact_points: Annotated[
        int,
        typer.Option("--exact-points", min=10, help="Training requests of the exact GP reference."),
    ] = 1000,
) -> None:
    """Keep the campaign's runs compactly under ``DATA/runs/`` (records as requests.csv.gz),
    fit on the training runs, score on the held-out ones, and write ``DATA/results.json``."""
    from quell.cli.console import say
    from quell.core.extras import require
    from quell.studies.attribution.analysis import analyse_campaign

    require(["GPy", "sklearn", "pandas"], "quell attribute analyse: the models", "research")
    written = analyse_campaign(runs_dir, data, inducing, iters, seed, exact_points, say)
    say(f"wrote {written}")


@attribute_app.command("periodic")
def periodic_command(
    runs_dir: Annotated[Path, typer.Argument(help="Measured training and periodic runs.")],
    data: Annotated[Path, typer.Option("--data", help="Where to write periodic.json.")],
    inducing: InducingOpt = 200,
    iters: ItersOpt = 50,
    seed: SeedOpt = 0,
) -> None:
    """Fig. 4: fit on the training runs in RUNS_DIR and attribute the service alone and beside
    a periodic clamav scan (``measure --part periodic``); writes ``DATA/periodic.json``."""
    from quell.cli.console import say
    from quell.core.extras import require
    from quell.studies.attribution.analysis import periodic_campaign

    require(["GPy", "sklearn", "pandas"], "quell attribute periodic: the models", "research")
    written = periodic_campaign(runs_dir, data, inducing, iters, seed, say)
    say(f"wrote {written}")


@attribute_app.command("results")
def results_command(
    data: Annotated[Path, typer.Option("--data", help="Directory with results.json.")],
    out: Annotated[Path, typer.Option("--out", help="The results page (Markdown).")],
) -> None:
    """Write the results page from ``DATA/results.json``."""
    from quell.studies.attribution.results import write_page

    write_page(data, out)


@attribute_app.command("rqsplit")
def rqsplit_command(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="A command to run and measure (after --), instead of --pid."),
    ] = None,
    pid: Annotated[
        int | None, typer.Option("--pid", min=1, help="Measure this running process.")
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option(
            "--seconds",
            min=0.1,
            help="How long to measure --pid (default 10 s); a limit for a COMMAND.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per thread of a process: its run-queue wait split between its own cgroup and the others
    that held the CPU meanwhile, and its preemptions by other cgroups (the optional eBPF
    program; root, BTF and `make native` with clang and bpftool). Exit 2 when it cannot load."""
    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.instrument.bpf.rqsplit import measure
    from quell.report.rqsplit import print_rqsplit

    result = measure(pid, command or [], seconds, progress=progress_bar)
    if command and result.returncode:
        say(f"{command[0]} exited with status {result.returncode}", "yellow")
    print_rqsplit(result, out_console)
    if as_json:
        emit_json(result.as_dict())

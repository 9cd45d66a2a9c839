"""``quell attribute``: fit Soroban's attribution model on runs of one schedule, predict each
request's provider part with its interval, report it (table, plots, HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

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
CELL_FILE = "cell.json"


def _run(path: Path) -> Any:
    from quell.studies.attribution.pipeline import Run
    from quell.studies.attribution.runs import read_psi, read_records

    return Run(str(path), read_records(path), read_psi(path))


def _run_for(bundle: Any, path: Path) -> Any:
    """``path``'s run as ``bundle`` can attribute it: records with no class are left out (and
    said) when the model has no such class: connections that sent no request line, such as
    HAProxy's TCP health checks in a lab run's ``instrument/<id>/``."""
    from quell.cli.console import say
    from quell.errors import InputError, Problem
    from quell.studies.attribution.pipeline import Run

    run = _run(path)
    if "" in bundle.classes:
        return run
    keep = run.records.request_class != ""
    if keep.all():
        return run
    if not keep.any():
        message = "only records with no request class (connections that sent no request)"
        raise InputError(str(path), [Problem("request_class", message)])
    say(
        f"{path}: {int((~keep).sum())} record(s) with no request class left out (connections "
        "that sent no request line, such as health checks)"
    )
    return Run(run.name, run.records.select(keep), run.psi)


def _check_level(level: float) -> None:
    from quell.errors import InputError, Problem

    if not 0.0 < level < 1.0:
        raise InputError("--level", [Problem("", f"must be between 0 and 1, got {level}")])


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
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from quell.cli.console import emit_json, err_console
    from quell.errors import InputError, Problem
    from quell.studies.attribution.pipeline import FitSettings, fit_attribution, training_set

    if labels not in ("percentile", "paired"):
        raise InputError("--labels", [Problem("", f"percentile or paired, not {labels!r}")])
    if not 0.0 <= floor_quantile < 1.0:
        message = f"0 (no floor) or a quantile below 1, got {floor_quantile}"
        raise InputError("--floor-quantile", [Problem("", message)])
    base = _run(uncontended)
    runs = [_run(p) for p in contended]
    kind: Literal["percentile", "paired"] = "percentile" if labels == "percentile" else "paired"
    data = training_set(base, runs, kind, include_uncontended)
    held_out = []
    if (test_uncontended is None) != (not test_contended):
        message = "give both --test-uncontended and --test-contended, or neither"
        raise InputError("held-out runs", [Problem("", message)])
    if test_uncontended is not None and test_contended:
        names = [n for n in data.features.names if not n.startswith("class=")]
        test = training_set(
            _run(test_uncontended),
            [_run(p) for p in test_contended],
            kind,
            include_uncontended=False,
            names=names,
            classes=data.features.classes,
        )
        held_out.append(("held-out runs", test))
    settings = FitSettings(
        inducing, iters, seed, holdout, exact_points, baselines, calibrate, floor_quantile or None
    )
    steps = (5 if baselines else 1) + (len(runs) if calibrate and len(runs) >= 2 else 0)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task("fitting", total=steps)
        first = True

        def note(what: str) -> None:
            nonlocal first
            if not first:
                progress.advance(task)
            first = False
            progress.update(task, description=what)

        source = f"uncontended {uncontended}; contended {', '.join(map(str, contended))}"
        result = fit_attribution(data, settings, source, note, held_out)
        progress.update(task, completed=steps, description="done")
    result.model.save(out)
    doc = result.as_dict()
    _print_scores(
        f"held-out requests: {doc['n_test']} (trained on {doc['n_train']})",
        doc["scores"],
        doc["fit_seconds"],
        doc["acceptance"],
    )
    for name, held in doc["held_out"].items():
        n = held["scores"][0]["n"] if held["scores"] else 0
        _print_scores(f"{name}: {n} requests", held["scores"], {}, held["acceptance"])
    _print_calibration(doc["calibration"])
    _print_floor(doc["floor"])
    _print_agreement(result.agreement)
    if as_json:
        emit_json({"model": str(out)} | result.as_dict())


def _print_scores(
    title: str,
    scores: list[dict[str, Any]],
    fit_seconds: dict[str, float],
    goals: dict[str, bool | None],
) -> None:
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table

    table = Table(title=escape(title), title_justify="left")
    for h in ("model", "R²", "MAE ms", "RMSE ms", "95 % coverage", "fit s"):
        table.add_column(h, justify="left" if h == "model" else "right")
    for s in scores:
        cov = "-" if s["coverage"] is None else f"{100 * s['coverage']:.1f} %"
        fit_s = fit_seconds.get(s["model"])
        table.add_row(
            s["model"],
            f"{s['r2']:.3f}",
            f"{1e3 * s['mae_seconds']:.3f}",
            f"{1e3 * s['rmse_seconds']:.3f}",
            cov,
            "-" if fit_s is None else f"{fit_s:.1f}",
        )
    out_console.print(table)
    if goals:
        words = {True: "met", False: "NOT met", None: "-"}
        out_console.print(
            "targets: R² ≥ 0.8 "
            + words[goals.get("r2")]
            + "; 95 % interval covers 93-97 % "
            + words[goals.get("coverage")]
            + "; MAE ≥ 30 % below the run-queue wait's "
            + words[goals.get("mae_vs_runq")],
            markup=False,
            highlight=False,
        )


def _print_calibration(cal: dict[str, Any] | None) -> None:
    from quell.cli.console import out_console

    if cal is None:
        text = (
            "sparse_gp's interval as fitted"
            " (not calibrated: --no-calibrate, or fewer than two contended runs)"
        )
    else:
        per_class = ", ".join(f"{c} x{v:.2f}" for c, v in cal["class_scales"].items())
        text = (
            f"sparse_gp's interval calibrated by leaving {len(cal['groups'])} runs out in turn"
            f" ({cal['requests']} requests): sd x{cal['scale']:.2f}"
            + (f"; per class {per_class}" if per_class else "")
        )
    out_console.print(text, markup=False, highlight=False)


def _print_floor(floor: dict[str, Any] | None) -> None:
    from quell.cli.console import out_console

    if not floor or floor["method"] == "none":
        text = "provider floor: none (every positive predicted excess is the provider's)"
    else:
        text = (
            f"provider floor: {1e3 * floor['seconds']:.3f} ms, the {100 * floor['quantile']:g} %"
            f" quantile of the predicted excess of {floor['requests']} uncontended requests"
        )
    out_console.print(text, markup=False, highlight=False)


def _print_agreement(rows: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table

    if not rows:
        return
    table = Table(title="percentile against paired labels", title_justify="left")
    for h in ("run", "paired", "MAE ms", "p95 |diff| ms", "correlation", "p99 pct/paired ms"):
        table.add_column(h, justify="left" if h == "run" else "right")
    for r in rows:
        table.add_row(
            escape(r["run"]),
            str(r["n_paired"]),
            f"{1e3 * r['mae_seconds']:.3f}",
            f"{1e3 * r['p95_abs_difference_seconds']:.3f}",
            f"{r['correlation']:.3f}",
            f"{1e3 * r['percentile_p99_seconds']:.2f} / {1e3 * r['paired_p99_seconds']:.2f}",
        )
    out_console.print(table)


def _print_runs(rows: list[tuple[str, dict[str, Any]]]) -> None:
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.report.attribution import SUMMARY_COLUMNS, summary_cells
    from quell.report.fit import FitTable as Table

    table = Table(title="latency and its provider part (ms)", title_justify="left")
    table.add_column("run", overflow="fold")
    for h, _ in SUMMARY_COLUMNS:
        table.add_column(h.replace("provider ", "prov. "), justify="right")
    for name, summary in rows:
        table.add_row(escape(name), *summary_cells(summary))
    out_console.print(table)


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
    from quell.attribute.apply import attribute
    from quell.attribute.bundle import load_attribution_model
    from quell.cli.console import emit_json
    from quell.report.attribution import write_attribution_csv

    _check_level(level)
    bundle = load_attribution_model(model)
    rows = []
    for path in runs:
        run = _run_for(bundle, path)
        attr = attribute(bundle, run.records, run.psi, level, run.name)
        rows.append((run.name, attr.summary()))
        if out is not None:
            target = out if len(runs) == 1 else out / f"{len(rows):02d}-{path.name}.csv"
            write_attribution_csv(target, attr)
    _print_runs(rows)
    if as_json:
        emit_json({"runs": [{"run": n} | s for n, s in rows]})


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
    from quell.attribute.apply import attribute
    from quell.attribute.bundle import load_attribution_model
    from quell.cli.console import emit_json
    from quell.core.files import load_json
    from quell.errors import InputError, Problem
    from quell.report.attribution import (
        Cell,
        plot_heatmap,
        plot_request_attribution,
        render_attribution_html,
    )

    bundle = load_attribution_model(model)
    out.mkdir(parents=True, exist_ok=True)
    rows, images, cells = [], [], []
    for i, path in enumerate(runs, start=1):
        run = _run_for(bundle, path)
        attr = attribute(bundle, run.records, run.psi, source=run.name)
        summary = attr.summary()
        rows.append((run.name, summary))
        png = f"requests-{i:02d}.png"
        plot_request_attribution(attr, out / png, path.name)
        images.append(png)
        cell_file = path / CELL_FILE
        if path.is_dir() and cell_file.is_file():
            doc = load_json(cell_file, "heatmap cell")
            try:
                cells.append(
                    Cell(
                        float(doc["antagonist_workers"]),
                        float(doc["load"]),
                        float(summary["provider_p99_seconds"]),
                    )
                )
            except (KeyError, TypeError, ValueError):
                message = "needs numbers antagonist_workers and load"
                raise InputError(str(cell_file), [Problem("", message)]) from None
    if cells:
        plot_heatmap(
            cells,
            out / "heatmap.png",
            "antagonist workers",
            "service load",
            "latency attributed to the provider, p99",
        )
        images.insert(0, "heatmap.png")
    meta = bundle.data.meta
    model_doc = {
        "file": str(model),
        "trained": meta.created,
        "requests": meta.n_train,
        "labels": meta.labels,
        "features": ", ".join(bundle.features),
        "classes": ", ".join(bundle.classes),
    } | {f"held-out {k}": f"{v:.4g}" for k, v in meta.scores.items()}
    page = render_attribution_html("Latency attribution", model_doc, rows, images)
    (out / "index.html").write_text(page)
    _print_runs(rows)
    if as_json:
        emit_json(
            {
                "runs": [{"run": n} | s for n, s in rows],
                "images": images,
                "html": str(out / "index.html"),
            }
        )


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
    import os

    from quell.cli.console import say
    from quell.errors import InputError, PrerequisiteError, Problem
    from quell.studies.attribution.campaign import PARTS
    from quell.studies.attribution.experiment import run_cells

    if part not in PARTS:
        raise InputError("--part", [Problem("", f"one of {', '.join(PARTS)}, not {part!r}")])
    if os.geteuid() != 0:
        raise PrerequisiteError("root", "cgroups for the service and its tenants")
    if cpu not in os.sched_getaffinity(0):
        raise InputError("--cpu", [Problem("", f"CPU {cpu} is not available here")])
    cells = PARTS[part]() if requests is None else PARTS[part](requests)
    if not ebpf:
        run_cells(cells, out, cpu, say)
        return
    from quell.instrument import bpf

    with bpf.attached() as split:
        run_cells(cells, out, cpu, say, rq_threads_fd=split.threads_fd())


@attribute_app.command("analyse")
def analyse_command(
    runs_dir: Annotated[Path, typer.Argument(help="The campaign's measured runs.")],
    data: Annotated[
        Path, typer.Option("--data", help="Where to keep the runs' data and results.json.")
    ],
    inducing: Annotated[int, typer.Option("--inducing", min=1)] = 200,
    iters: Annotated[int, typer.Option("--iters", min=1)] = 50,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    exact_points: Annotated[int, typer.Option("--exact-points", min=10)] = 1000,
) -> None:
    """Keep the campaign's runs compactly under ``DATA/runs/`` (records as requests.csv.gz),
    fit on the training runs, score on the held-out ones, and write ``DATA/results.json``."""
    from quell.cli.console import say
    from quell.core.files import write_json
    from quell.errors import InputError, Problem
    from quell.report.attribution_results import RESULTS_FILE
    from quell.studies.attribution.analysis import analyse, export_run
    from quell.studies.attribution.pipeline import FitSettings

    kept = data / "runs"
    measured = sorted(p.parent for p in runs_dir.glob("*/cell.json")) if runs_dir.is_dir() else []
    if not measured:
        raise InputError(str(runs_dir), [Problem("", "no measured run (*/cell.json) here")])
    for run in measured:
        if (run / "logs").is_dir():
            export_run(run, kept / run.name)
            say(f"kept {run.name}")
        elif (run / "requests.csv.gz").is_file() and run.resolve() != (kept / run.name).resolve():
            import shutil

            shutil.copytree(run, kept / run.name, dirs_exist_ok=True)  # kept already
            say(f"kept {run.name}")
    settings = FitSettings(inducing, iters, seed, 0.2, exact_points, True)
    doc = analyse(kept, settings, say)
    write_json(data / RESULTS_FILE, doc)
    say(f"wrote {data / RESULTS_FILE}")


@attribute_app.command("periodic")
def periodic_command(
    runs_dir: Annotated[Path, typer.Argument(help="Measured training and periodic runs.")],
    data: Annotated[Path, typer.Option("--data", help="Where to write periodic.json.")],
    inducing: Annotated[int, typer.Option("--inducing", min=1)] = 200,
    iters: Annotated[int, typer.Option("--iters", min=1)] = 50,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Fig. 4: fit on the training runs in RUNS_DIR and attribute the service alone and beside
    a periodic clamav scan (``measure --part periodic``); writes ``DATA/periodic.json``."""
    import shutil
    import tempfile

    from quell.cli.console import say
    from quell.core.files import write_json
    from quell.errors import InputError, Problem
    from quell.report.attribution_results import PERIODIC_FILE
    from quell.studies.attribution.analysis import analyse_periodic, export_run
    from quell.studies.attribution.pipeline import FitSettings

    measured = sorted(p.parent for p in runs_dir.glob("*/cell.json")) if runs_dir.is_dir() else []
    if not measured:
        raise InputError(str(runs_dir), [Problem("", "no measured run (*/cell.json) here")])
    with tempfile.TemporaryDirectory() as tmp:
        kept = Path(tmp)
        for run in measured:
            if (run / "logs").is_dir():
                export_run(run, kept / run.name)
            elif (run / "requests.csv.gz").is_file():
                shutil.copytree(run, kept / run.name)
        # Fig. 4 uses the model's mean only: no interval to calibrate
        settings = FitSettings(inducing, iters, seed, 0.2, 10, True, calibrate=False)
        doc = analyse_periodic(kept, settings, say)
    data.mkdir(parents=True, exist_ok=True)
    write_json(data / PERIODIC_FILE, doc)
    say(f"wrote {data / PERIODIC_FILE}")


@attribute_app.command("results")
def results_command(
    data: Annotated[Path, typer.Option("--data", help="Directory with results.json.")],
    out: Annotated[Path, typer.Option("--out", help="The results page (Markdown).")],
) -> None:
    """Write the results page from ``DATA/results.json``."""
    from quell.errors import InputError, Problem
    from quell.report.attribution_results import RESULTS_FILE, render

    if not (data / RESULTS_FILE).is_file():
        raise InputError(str(data), [Problem(RESULTS_FILE, "missing")])
    out.write_text(render(data))


_RQSPLIT_GATE = 'read -r _ <&3; exec 3<&-; exec "$@"'


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
    from quell.cli.console import emit_json
    from quell.errors import InputError, Problem

    if (pid is None) == (not command):
        raise InputError("rqsplit", [Problem("", "give one of --pid PID or a command after --")])
    if pid is not None:
        threads, span, target = _rqsplit_pid(pid, 10.0 if seconds is None else seconds)
    else:
        assert command
        threads, span, target = _rqsplit_command(command, seconds)
    _print_rqsplit(threads, span, target)
    if as_json:
        emit_json(
            {
                "pid": target,
                "seconds": span,
                "threads": [t.to_json() | {"name": n} for t, n in threads],
            }
        )


def _thread_name(pid: int, tid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return None


def _rqsplit_pid(pid: int, seconds: float) -> tuple[list[tuple[Any, str | None]], float, int]:
    import time

    from quell.cli.console import progress_bar
    from quell.errors import InputError, Problem
    from quell.instrument import bpf

    if not Path(f"/proc/{pid}").is_dir():
        raise InputError("--pid", [Problem("", f"no process {pid}")])
    with bpf.attached(target_tgid=pid) as split:
        start = time.monotonic()
        with progress_bar(seconds, f"run-queue split of {pid}") as update:
            while (done := time.monotonic() - start) < seconds:
                update(done, "measuring")
                if not Path(f"/proc/{pid}").is_dir():
                    break
                time.sleep(min(0.2, seconds - done))
            update(min(seconds, time.monotonic() - start), "done")
        span = time.monotonic() - start
        threads = split.read()
        named = [(t, _thread_name(pid, t.tid)) for t in threads]
    return named, span, pid


def _rqsplit_command(
    command: list[str], seconds: float | None
) -> tuple[list[tuple[Any, str | None]], float, int]:
    """Start ``command`` held at a gate (a shell waiting on a pipe, then exec-ing it in place,
    so its pid is the command's), attach the program to that pid, open the gate, wait."""
    import os
    import shutil
    import subprocess
    import time

    from quell.errors import ComponentError, InputError, Problem
    from quell.instrument import bpf

    if shutil.which(command[0]) is None:
        raise InputError("COMMAND", [Problem("", f"{command[0]!r} is not an executable")])
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", _RQSPLIT_GATE, "sh", *command], pass_fds=(read_end,)
        )
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        raise ComponentError(command[0], str(exc)) from None
    os.close(read_end)
    threads: list[Any] = []
    try:
        with bpf.attached(target_tgid=proc.pid) as split:
            start = time.monotonic()
            os.write(write_end, b"go\n")
            os.close(write_end)
            write_end = -1
            try:
                proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=10)
            span = time.monotonic() - start
            threads = split.read()
        if proc.returncode:
            from quell.cli.console import say

            say(f"{command[0]} exited with status {proc.returncode}", "yellow")
    finally:
        if write_end >= 0:
            os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return [(t, None) for t in threads], span, proc.pid


def _print_rqsplit(threads: list[tuple[Any, str | None]], span: float, target: int) -> None:
    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table

    table = Table(
        title=f"run-queue wait of process {target} over {span:.1f} s, by who held the CPU"
    )
    for col in ("tid", "name", "cgroup", "wait s", "own s", "others s", "preempted by others"):
        table.add_column(col, justify="left" if col in ("name", "cgroup") else "right")
    table.add_column("main other cgroup")
    for t, name in sorted(threads, key=lambda tn: -tn[0].wait_ns):
        top = next((c for c in t.culprits if not c.own and c.wait_ns), None)
        table.add_row(
            str(t.tid),
            name or "",
            t.cgroup_path or str(t.cgroup_id),
            f"{t.wait_ns / 1e9:.3f}",
            f"{t.own_wait_ns / 1e9:.3f}",
            f"{t.other_wait_ns / 1e9:.3f}",
            str(t.preemptions_by_others),
            ""
            if top is None
            else f"{top.cgroup_path or top.cgroup_id} ({top.wait_ns / 1e9:.3f} s)",
        )
    if not threads:
        table.caption = "no thread of the process waited for a CPU"
    out_console.print(table)

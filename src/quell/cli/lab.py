"""``quell lab``: run scenarios on this machine with real servers, HAProxy, load and neighbours."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

import typer

from quell.cli.options import JsonOpt, RunDirArg, RunsDirOpt, ScenarioArg

lab_app = typer.Typer(help="Run scenarios on this machine with real servers, HAProxy and load.")

STEAL_SUSPECT_PCT = 0.5
"""``quell.core.observation.STEAL_SUSPECT_PCT``, spelled out so ``--help`` loads nothing."""


@lab_app.command("run")
def lab_run(
    path: ScenarioArg,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
) -> None:
    """Run a scenario in the lab: real servers in namespaces and cgroups, HAProxy, load, antagonists."""
    from quell.cli.console import emit_summary, progress_bar
    from quell.experiment.lab import run_lab
    from quell.scenario import load_scenario

    scenario = load_scenario(path)
    summary = run_lab(
        scenario, path, runs_dir, lambda: progress_bar(scenario.duration_s, scenario.name)
    )
    emit_summary(summary, as_json)


@lab_app.command("compare")
def lab_compare(
    path: ScenarioArg,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
    max_steal_pct: Annotated[
        float,
        typer.Option(
            "--max-steal-pct",
            min=0.0,
            max=100.0,
            help="Run a policy again when the machine's CPU steal averaged over this (percent) "
            "in one of its settled windows.",
        ),
    ] = STEAL_SUSPECT_PCT,
    attempts: Annotated[
        int,
        typer.Option(
            "--attempts",
            min=1,
            max=5,
            help="Runs of one policy at most; past them the least stolen run is kept.",
        ),
    ] = 2,
    repeats: Annotated[
        int,
        typer.Option(
            "--repeats",
            min=1,
            max=20,
            help="Run every policy this many times, one repeat after another, and give each "
            "policy's spread and its paired difference from the first.",
        ),
    ] = 1,
) -> None:
    """Run the scenario once per policy (its ``policy`` then each of ``compare``) and print
    them side by side; each run gets its own directory and HTML report. A run the machine's
    own CPU steal spoiled is run again (``--attempts``) and kept on disk. With ``--repeats``
    N, all of that N times, each repeat's comparison written as it finishes, then per phase
    each policy's mean ± sd over the repeats and its paired difference from the first."""
    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.core.extras import require
    from quell.experiment.compare import compare_in_lab, compare_repeats_in_lab
    from quell.report.compare import compare_table
    from quell.report.repeats import print_repeat_summary
    from quell.scenario import load_scenario

    scenario = load_scenario(path)
    require(["matplotlib"], "quell lab compare: each run's report, the comparison page", "lab")

    def refused(key: str, run_dir: Path) -> None:
        say(
            f"{key}: the machine's CPU steal averaged over {max_steal_pct:g} % in a settled "
            f"window of {run_dir}; kept there, and run again if attempts remain",
            style="yellow",
        )

    bar = functools.partial(progress_bar, scenario.duration_s)
    if repeats > 1:

        def one_repeat(k: int, doc: dict[str, Any]) -> None:
            compare_table(doc, out_console, max_steal_pct)
            say(f"repeat {k} of {repeats} written beside its runs")

        result, out = compare_repeats_in_lab(
            scenario,
            path,
            runs_dir,
            repeats,
            max_steal_pct,
            attempts,
            progress=bar,
            on_refused=refused,
            on_repeat=one_repeat,
        )
        print_repeat_summary(scenario.name, result["policies"], out_console)
    else:
        result, out = compare_in_lab(
            scenario, path, runs_dir, max_steal_pct, attempts, progress=bar, on_refused=refused
        )
        compare_table(result, out_console, max_steal_pct)
    say(f"comparison written to {out}")
    if as_json:
        emit_json(result)


@lab_app.command("report")
def lab_report(run_dir: RunDirArg, as_json: JsonOpt = False) -> None:
    """Print a table per phase and write PNG plots and an HTML page into RUN_DIR/report."""
    from quell.cli.console import emit_json, emit_summary, say
    from quell.report.render import render_report

    summary, out = render_report(run_dir)
    emit_summary(summary, as_json=False)
    say(f"report written to {out}")
    if as_json:
        emit_json(summary)


@lab_app.command("clean")
def lab_clean() -> None:
    """Remove what a killed runner left behind (processes, namespaces, cgroups, tc rules) and
    every lab `quell lab up` left standing."""
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.lab.cleanup import clean_leftovers
    from quell.studies.consolidation.lab import remove_leftovers

    removed = clean_leftovers(cleaners=[remove_leftovers])
    if not removed:
        out_console.print("nothing to clean")
    for item in removed:
        out_console.print(f"removed {escape(item)}")


@lab_app.command("up")
def lab_up(
    path: ScenarioArg,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
    spares: Annotated[
        int,
        typer.Option(
            "--spares",
            min=0,
            max=4,
            help="Pre-provisioned instances per scaling host, declared as disabled HAProxy "
            "slots for the live controller's slot scaler.",
        ),
    ] = 1,
    load: Annotated[
        bool,
        typer.Option(
            "--load",
            help="Start the scenario's load now and stay to stage its neighbours on time until "
            "its end (the lab stays up after).",
        ),
    ] = False,
) -> None:
    """Bring a scenario's hosts, instances and HAProxy up with no policy and leave them
    running; write lab.json (what to tear down) and agent, Prometheus and live configs for them
    into a new run directory. `quell lab down` tears it down."""
    from quell.cli.console import emit_json, out_console, say
    from quell.experiment.run import new_run_dir
    from quell.lab.preflight import preflight
    from quell.lab.standing import bring_up
    from quell.scenario import load_scenario
    from quell.signals.cgroup import detect_layout

    scenario = load_scenario(path)
    schedule = preflight(scenario, path.parent, str(path))
    run_dir = new_run_dir(runs_dir, scenario, "up")
    lab = bring_up(
        scenario,
        path.parent,
        run_dir,
        detect_layout(),
        spares=spares,
        load=load,
        status=lambda step: say(f"up: {step}"),
        schedule=schedule,
    )
    out_console.print(f"lab {lab.tag} up: {run_dir}", markup=False, highlight=False)
    for name in ("lab.json", "live.yaml", "prometheus.yml"):
        out_console.print(f"  {run_dir / name}", markup=False, highlight=False)
    if load:
        from quell.lab.standing import stage_events

        stage_events(lab, scenario, status=lambda step: say(f"load: {step}"))
        say(f"load: the scenario's {scenario.duration_s:g} s are over; the lab stays up")
    if as_json:
        emit_json({"run_dir": str(run_dir), "tag": lab.tag, "state": lab.state})


@lab_app.command("down")
def lab_down(
    run_dir: Annotated[
        Path | None,
        typer.Argument(
            help="The run directory `quell lab up` printed; default: every standing lab."
        ),
    ] = None,
) -> None:
    """Tear down a lab `quell lab up` left standing (every one without RUN_DIR)."""
    from quell.cli.console import out_console
    from quell.lab.standing import standing_run_dirs, tear_down
    from quell.signals.cgroup import detect_layout

    layout = detect_layout()
    dirs = [run_dir] if run_dir is not None else standing_run_dirs()
    if not dirs:
        out_console.print("no standing lab")
    for d in dirs:
        removed = tear_down(d, layout)
        out_console.print(f"{d}: down ({len(removed)} removed)", markup=False, highlight=False)

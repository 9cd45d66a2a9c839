"""The ``quell`` command line. Bad input exits 2 with a message naming the problem, never a
traceback; results go to stdout (a JSON document as the last line with ``--json``), progress and
diagnostics to stderr."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from quell.core.observation import STEAL_SUSPECT_PCT
from quell.errors import QuellError
from quell.models.cli import model_app
from quell.prima.cli import prima_app
from quell.scenario import load_scenario
from quell.scenario.model import Scenario
from quell.sim.cli import sim_app

app = typer.Typer(
    help="See, explain and beat performance interference from co-located tenants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
lab_app = typer.Typer(help="Run scenarios on this machine with real servers, HAProxy and load.")
scenario_app = typer.Typer(help="Work with scenario files.")
app.add_typer(lab_app, name="lab", no_args_is_help=True)
app.add_typer(scenario_app, name="scenario", no_args_is_help=True)
app.add_typer(sim_app, name="sim", no_args_is_help=True)
app.add_typer(prima_app, name="prima", no_args_is_help=True)
app.add_typer(model_app, name="model", no_args_is_help=True)

err_console = Console(stderr=True)
out_console = Console()

ScenarioArg = Annotated[
    Path, typer.Argument(help="Scenario YAML file.", exists=False, dir_okay=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON summary as the last line.")]
RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", help="Where run directories are created.")]


@contextmanager
def progress_bar(total_s: float, label: str) -> Iterator[Callable[[float, str], None]]:
    progress = Progress(
        TextColumn("[bold]{task.fields[phase]:<14}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )
    with progress:
        task = progress.add_task(label, total=total_s, phase="starting")

        def update(done_s: float, phase: str) -> None:
            progress.update(task, completed=done_s, phase=phase)

        yield update


def emit_summary(summary: dict[str, Any], as_json: bool) -> None:
    from quell.report.table import print_summary

    print_summary(summary, out_console)
    if as_json:
        sys.stdout.flush()
        print(json.dumps(summary, separators=(",", ":")))


@scenario_app.command("check")
def scenario_check(path: ScenarioArg) -> None:
    """Validate a scenario file (and the policies it names, with their model files) and list
    every problem found."""
    from quell.policy import build_policy, scenario_for_policy

    s = load_scenario(path)
    for spec in [s.policy, *s.compare]:
        run = scenario_for_policy(s, spec)  # lc runs with the leastconn balancer it relies on
        build_policy(run.policy, run, path.parent)
    out_console.print(
        f"[green]ok[/]: {s.name}: {len(s.hosts)} host(s), {len(s.instances)} instance(s), "
        f"{len(s.phases())} phase(s), {s.duration_s:g} s"
    )


@lab_app.command("run")
def lab_run(
    path: ScenarioArg,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
) -> None:
    """Run a scenario in the lab: real servers in namespaces and cgroups, HAProxy, load, antagonists."""
    scenario = load_scenario(path)
    from quell.lab.runner import run_lab

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
) -> None:
    """Run the scenario once per policy (its ``policy`` then each of ``compare``) and print
    them side by side; each run gets its own directory and HTML report. A run the machine's
    own CPU steal spoiled is run again (``--attempts``) and kept on disk."""
    scenario = load_scenario(path)
    from quell.experiment import new_run_dir
    from quell.policy import build_policy, scenario_for_policy
    from quell.report.compare import compare_table, comparison

    runs_of = [scenario_for_policy(scenario, spec) for spec in [scenario.policy, *scenario.compare]]
    for s in runs_of:  # every policy must build before the first run starts
        build_policy(s.policy, s, path.parent)
    runs: list[tuple[str, Path]] = []
    stolen: dict[str, list[str]] = {}
    for s in runs_of:
        run_dir, over = _unstolen_lab_run(s, path, runs_dir, scenario.name, max_steal_pct, attempts)
        runs.append((s.policy.key, run_dir))
        if over:
            stolen[s.policy.key] = [str(d) for d in over]
    result = comparison(scenario, runs) | {"max_steal_pct": max_steal_pct, "stolen": stolen}
    cmp_dir = new_run_dir(runs_dir, scenario, "lab-compare")
    cmp_dir.mkdir(parents=True)
    (cmp_dir / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    compare_table(result, out_console, max_steal_pct)
    err_console.print(f"comparison written to {cmp_dir / 'comparison.json'}")
    if as_json:
        sys.stdout.flush()
        print(json.dumps(result, separators=(",", ":")))


def _unstolen_lab_run(
    scenario: Scenario,
    path: Path,
    runs_dir: Path,
    name: str,
    max_steal_pct: float,
    attempts: int,
) -> tuple[Path, list[Path]]:
    """One policy's lab run with its report, run again while the machine's CPU steal spoiled
    a settled window: (the run kept, every run over the bound)."""
    from quell.experiment import least_stolen
    from quell.lab.runner import run_lab
    from quell.report.compare import run_phases
    from quell.report.render import render_report

    key = scenario.policy.key
    progress = functools.partial(progress_bar, scenario.duration_s, f"{name} ({key})")

    def once() -> Path:
        run_dir = Path(run_lab(scenario, path, runs_dir, progress)["run_dir"])
        render_report(run_dir)
        return run_dir

    def steal_of(run_dir: Path) -> float | None:
        steal: float | None = run_phases(scenario, run_dir)["max_steal_pct"]
        return steal

    def refused(run_dir: Path) -> None:
        err_console.print(
            f"[yellow]{key}: the machine's CPU steal averaged over {max_steal_pct:g} % in a "
            f"settled window of {run_dir}; kept there, and run again if attempts remain[/]"
        )

    return least_stolen(once, steal_of, max_steal_pct, attempts, on_refused=refused)


@lab_app.command("report")
def lab_report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    as_json: JsonOpt = False,
) -> None:
    """Print a table per phase and write PNG plots and an HTML page into RUN_DIR/report."""
    from quell.report.render import render_report

    summary, out = render_report(run_dir)
    emit_summary(summary, as_json=False)
    err_console.print(f"report written to {out}")
    if as_json:
        print(json.dumps(summary, separators=(",", ":")))


@lab_app.command("clean")
def lab_clean() -> None:
    """Remove what a killed runner left behind: processes, namespaces, cgroups, tc rules."""
    from quell.lab.cleanup import clean_leftovers

    removed = clean_leftovers()
    if not removed:
        out_console.print("nothing to clean")
    for item in removed:
        out_console.print(f"removed {item}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except QuellError as exc:
        err_console.print(f"[red]error[/]: {exc}", highlight=False)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise SystemExit(130) from None

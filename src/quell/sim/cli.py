"""``quell sim``: run a scenario in the simulator, report on a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

sim_app = typer.Typer(help="Run scenarios in the discrete-event simulator (virtual time).")


@sim_app.command("run")
def sim_run(
    path: Annotated[Path, typer.Argument(help="Scenario YAML file.", dir_okay=False)],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON summary as the last line.")
    ] = False,
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Where run directories are created.")
    ] = Path("runs"),
) -> None:
    """Simulate a scenario: same format, run directory and summary as `quell lab run`."""
    from quell.cli import emit_summary, progress_bar
    from quell.experiment import new_run_dir, prepare_run_dir, run_scenario
    from quell.policy import build_policy
    from quell.scenario import load_scenario
    from quell.sim.environment import SimEnvironment

    scenario = load_scenario(path)
    env = SimEnvironment(scenario, base_dir=path.parent)
    policy = build_policy(scenario.policy, scenario, path.parent)
    run_dir = new_run_dir(runs_dir, scenario, env.name)
    store = prepare_run_dir(run_dir, scenario, path, env.name)
    try:
        with progress_bar(scenario.duration_s, scenario.name) as progress:
            summary = run_scenario(scenario, env, policy, store, progress)
    finally:
        env.close()
        store.close()
    emit_summary(summary, as_json)


@sim_app.command("report")
def sim_report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
) -> None:
    """Print a table per phase and write plots and an HTML page into RUN_DIR/report."""
    from quell.cli import emit_summary, err_console
    from quell.report.render import render_report

    summary, out = render_report(run_dir)
    emit_summary(summary, as_json=False)
    err_console.print(f"report written to {out}")

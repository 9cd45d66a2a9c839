"""``quell scenario``: work with scenario files."""

from __future__ import annotations

import typer

from quell.cli.options import ScenarioArg

scenario_app = typer.Typer(help="Work with scenario files.")


@scenario_app.command("check")
def scenario_check(path: ScenarioArg) -> None:
    """Validate a scenario file (and the policies it names, with their model files) and list
    every problem found."""
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.scenario import load_scenario
    from quell.scenario.policy import build_policy, scenario_for_policy

    s = load_scenario(path)
    for spec in [s.policy, *s.compare]:
        run = scenario_for_policy(s, spec)  # lc runs with the leastconn balancer it relies on
        build_policy(run.policy, run, path.parent)
    out_console.print(
        f"[green]ok[/]: {escape(s.name)}: {len(s.hosts)} host(s), {len(s.instances)} "
        f"instance(s), {len(s.phases())} phase(s), {s.duration_s:g} s"
    )

"""``quell sim``: run a scenario in the simulator, report on a run, compare policies."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from quell.cli.options import JsonOpt, RunDirArg, RunsDirOpt, ScenarioArg

if TYPE_CHECKING:
    from rich.console import Console

sim_app = typer.Typer(help="Run scenarios in the discrete-event simulator (virtual time).")


@sim_app.command("run")
def sim_run(
    path: ScenarioArg, as_json: JsonOpt = False, runs_dir: RunsDirOpt = Path("runs")
) -> None:
    """Simulate a scenario: same format, run directory and summary as `quell lab run`."""
    from quell.cli.console import emit_summary, progress_bar
    from quell.cli.startup import loading

    with loading():
        from quell.experiment.sim import run_sim
        from quell.scenario import load_scenario
        from quell.sim.core import load_event_core

        scenario = load_scenario(path)
        load_event_core()
    summary = run_sim(
        scenario, path, runs_dir, lambda: progress_bar(scenario.duration_s, scenario.name)
    )
    emit_summary(summary, as_json)


@sim_app.command("report")
def sim_report(run_dir: RunDirArg) -> None:
    """Print a table per phase and write plots and an HTML page into RUN_DIR/report."""
    from quell.cli.console import emit_summary, say
    from quell.report.render import render_report

    summary, out = render_report(run_dir)
    emit_summary(summary, as_json=False)
    say(f"report written to {out}")


@sim_app.command("misses")
def sim_misses(run_dir: RunDirArg, as_json: JsonOpt = False) -> None:
    """Where a run's missed instance-intervals fall against its neighbours' arrivals
    (`service.interference`, antagonists its events start), at weight 0 or above, and how many
    of them no policy that decides at interval boundaries could have avoided at the run's
    loading (from a simulator run, which reports the requests each instance holds)."""
    from quell.cli.console import emit_json, out_console
    from quell.report.misses import print_breakdown, run_miss_breakdown

    name, breakdown = run_miss_breakdown(run_dir)
    print_breakdown(name, breakdown, out_console)
    if as_json:
        emit_json({"scenario": name, "run_dir": str(run_dir), **breakdown.to_dict()})


COMPARE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (header, key, format)
    ("policy", "policy", "s"),
    ("SLO %", "slo_pct", ".1f"),
    ("all %", "slo_all_pct", ".1f"),
    ("req %", "slo_req_pct", ".1f"),
    ("settling %", "settling_pct", ".1f"),
    ("mean ms", "mean_rt_ms", ".0f"),
    ("p95 ms", "p95_rt_ms", ".0f"),
    ("inst-s", "instance_seconds", ".0f"),
    ("oracle", "oracle_instance_seconds", ".0f"),
    ("scaling", "scaling_actions", "d"),
    ("errors", "cycle_errors", "d"),
)


def print_comparison(doc: dict[str, Any], console: Console) -> None:
    from rich.markup import escape

    from quell.report.fit import FitTable

    target = doc.get("target_rt_s")
    name = escape(doc["scenario"])
    title = f"{name}: target mean RT {target * 1e3:g} ms" if target else name
    table = FitTable(title=title, title_justify="left")
    for header, _, fmt in COMPARE_COLUMNS:
        table.add_column(header, justify="left" if fmt == "s" else "right")
    for row in doc["policies"]:
        table.add_row(
            *(
                "-" if row.get(k) is None else escape(format(row[k], f))
                for _, k, f in COMPARE_COLUMNS
            )
        )
    console.print(table)
    if target:
        console.print(
            f"SLO %: instance-intervals with mean RT <= target, leaving out {doc['settle_s']:g} s "
            "after each change (all %: none left out; req %: weighed by requests; settling %: "
            "the share left out); inst-s: "
            "instance-seconds used; oracle: the fewest that could have met the target; errors: "
            "failed control cycles"
        )
    from quell.report.felt import felt_table, policy_rows

    users = {row["policy"]: row.get("users") for row in doc["policies"]}
    rows = policy_rows(users)
    if rows:
        console.print(felt_table(rows, ("policy", "phase"), target, doc.get("timeout_s")))
    missing = [escape(name) for name, u in users.items() if u is None]
    if missing:
        console.print(
            f"no per-request records in the run of {', '.join(missing)} "
            "(service.request_log: on keeps them)"
        )


Seeds = Annotated[
    int,
    typer.Option(
        "--seeds",
        min=1,
        max=1000,
        help="Run the whole comparison on this many seeds (the scenario's seed and the ones "
        "after it) and print each policy's spread and its paired difference from the first.",
    ),
]


@sim_app.command("compare")
def sim_compare(
    path: ScenarioArg,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
    seeds: Seeds = 1,
) -> None:
    """Run the scenario once per policy (its `policy`, then each of `compare`) on the same load
    and neighbours; print SLO, response times, instance-seconds and the oracle's side by side.
    `lc` runs with the balancer's least-connections algorithm, the others as the scenario says.
    With --seeds N, every seed's comparison is written as it finishes (seed-S/comparison.json)."""
    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.cli.startup import loading
    from quell.core.extras import require

    require(["numba", "matplotlib"], "quell sim compare: the runs, the comparison page", "sim")
    with loading():
        from quell.experiment.compare import COMPARISON_FILE, compare_seeds_in_sim, policy_runs
        from quell.report.seeds import print_seed_summary
        from quell.scenario import load_scenario
        from quell.sim.core import load_event_core

        scenario = load_scenario(path)
        # bad parameters: refused before any bar shows
        first = policy_runs(scenario, path.parent)
        load_event_core()
    per_run = scenario.duration_s * (1 + len(scenario.compare))

    def shown(doc: dict[str, Any]) -> None:
        if seeds == 1:
            print_comparison(doc, out_console)

    with progress_bar(per_run * seeds, scenario.name) as progress:
        doc = compare_seeds_in_sim(
            scenario, path.parent, seeds, runs_dir, progress, shown, first=first
        )
    if seeds > 1:
        print_seed_summary(scenario.name, doc["seeds"], doc["policies"], out_console)
    say(f"comparison written to {Path(doc['comparison_dir']) / COMPARISON_FILE}")
    if as_json:
        emit_json(doc)

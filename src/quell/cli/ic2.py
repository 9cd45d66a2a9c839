"""``quell ic2``: train IC2's interference detector from runs, score it on a run, sweep a
server setting."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quell.cli.options import JsonOpt, RunsDirOpt, ScenarioArg

ic2_app = typer.Typer(
    help="IC2: detect interference from tenant-side signals and reconfigure the web server."
)

SpecArg = Annotated[Path, typer.Argument(help="Spec YAML file.", dir_okay=False)]
EnvOpt = Annotated[
    str,
    typer.Option("--env", help="Where to run: lab (real servers, root) or sim (the simulator)."),
]


@ic2_app.command("train")
def ic2_train(
    spec_path: SpecArg,
    out: Annotated[
        Path, typer.Option("--out", help="Directory for the runs, the data and the detector.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Train a detector by the paper's three-phase bootstrap (IC2 off, then on with the last
    phase's tree): every scenario of SPEC run in each phase. Resumable: run it again with the
    same --out and it picks up after the last run whose data was written."""
    from quell.cli.console import emit_json, out_console, progress_bar
    from quell.core.extras import require
    from quell.studies.ic2.campaign import train
    from quell.studies.ic2.tables import print_training

    require(["sklearn"], "quell ic2 train: the detector's tree", "research")
    trained = train(spec_path, out, progress_bar)
    print_training(trained, out_console)
    if as_json:
        emit_json(trained.as_dict())


@ic2_app.command("evaluate")
def ic2_evaluate(
    path: ScenarioArg,
    model: Annotated[
        Path, typer.Option("--model", help="A detector bundle, or a directory holding one.")
    ],
    env: EnvOpt = "lab",
    run: Annotated[
        list[Path] | None,
        typer.Option(
            "--run",
            help="Score this recorded run of SCENARIO instead of running it; give it several "
            "times to score the runs together as well as each alone.",
        ),
    ] = None,
    states: Annotated[
        int, typer.Option("--states", help="The state machine the latencies are read from.")
    ] = 5,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Run with this policy instead of the scenario's (static)."),
    ] = None,
    as_json: JsonOpt = False,
    runs_dir: RunsDirOpt = Path("runs"),
) -> None:
    """Run SCENARIO (or read a recorded run of it) and score the detector against the labels
    its antagonists' events give: recall, precision and miss rate of class I per interval, and
    the median detection and clearing latency of the state machine."""
    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.studies.ic2.evaluate import evaluate
    from quell.studies.ic2.tables import print_evaluation

    evaluation = evaluate(path, model, env, run or [], states, policy, runs_dir, progress_bar, say)
    print_evaluation(evaluation, out_console, say)
    if as_json:
        emit_json(evaluation.as_dict())


@ic2_app.command("sweep")
def ic2_sweep(
    spec_path: SpecArg,
    out: Annotated[Path, typer.Option("--out", help="Directory for the runs and the results.")],
    as_json: JsonOpt = False,
) -> None:
    """Sweep one apache setting of a scenario, clean and under each antagonist (the paper's
    Fig. 2 and 3): the mean response time at each value and the best one per condition.
    Resumable with the same --out; writes sweep.json and sweep.png there."""
    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.studies.ic2.sweep import sweep
    from quell.studies.ic2.tables import print_sweep

    doc = sweep(spec_path, out, progress_bar)
    print_sweep(doc, out, out_console, say)
    if as_json:
        emit_json(doc)


@ic2_app.command("table4")
def ic2_table4(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Runs of one scenario; the first one's policy is the baseline, runs of one "
            "policy are repetitions."
        ),
    ],
    first_s: Annotated[
        float, typer.Option("--first-s", help="The first part of each period, in seconds.")
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """The paper's Table 4 from runs of one scenario with different policies (static, ic2
    graceful, ic2 online...): the interfered instances' mean response time in the first
    --first-s seconds of each antagonist period and after, the reduction against the first
    run, and when the policy reconfigured; with request logs, also by send time: the mean
    over the periods and how many requests waited longer than --first-s or failed, and the means
    of what users waited with a failed request at the workload's timeout. Runs of the
    same policy (label) are repetitions: their means, and each reduction's standard error over
    the pairs (the k-th run of a policy against the k-th of the baseline)."""
    from quell.cli.console import emit_json, out_console
    from quell.studies.ic2.table4 import table4_of_runs
    from quell.studies.ic2.tables import print_table4

    doc = table4_of_runs(run_dirs, first_s)
    print_table4(doc, out_console)
    if as_json:
        emit_json(doc)


@ic2_app.command("ablate")
def ic2_ablate(
    spec_path: SpecArg,
    out: Annotated[Path, typer.Option("--out", help="The finished campaign's directory.")],
    run_dirs: Annotated[list[Path], typer.Argument(help="Recorded runs to score on.")],
    as_json: JsonOpt = False,
) -> None:
    """The cost ablation (1:1:1 against 5:1:10, as weights and as expected cost): trees grown
    on a finished campaign's last-phase data, scored on recorded runs it never saw."""
    from quell.cli.console import emit_json, out_console
    from quell.studies.ic2.campaign import ablate
    from quell.studies.ic2.tables import print_ablation

    rows = ablate(spec_path, out, run_dirs)
    print_ablation(rows, out_console)
    if as_json:
        emit_json({"spec": str(spec_path), "campaign": str(out), "rows": rows})


@ic2_app.command("sizes")
def ic2_sizes(
    spec_path: SpecArg,
    out: Annotated[Path, typer.Option("--out", help="The finished campaign's directory.")],
    as_json: JsonOpt = False,
) -> None:
    """The tree's size by leave-one-run-out: per max_depth and min_samples_leaf, trees grown
    on all of a finished campaign's runs but one, scored on that one at the spec's cost."""
    from quell.cli.console import emit_json, out_console
    from quell.studies.ic2.campaign import sizes
    from quell.studies.ic2.tables import print_sizes

    rows = sizes(spec_path, out)
    print_sizes(rows, out_console)
    if as_json:
        emit_json({"spec": str(spec_path), "campaign": str(out), "rows": rows})


@ic2_app.command("results")
def ic2_results(
    data: Annotated[Path, typer.Option("--data", help="Directory of measured JSON files.")] = Path(
        "docs/results/data/ic2"
    ),
    out: Annotated[Path, typer.Option("--out", help="The page to write.")] = Path(
        "docs/results/ic2.md"
    ),
) -> None:
    """Write IC2's results page from the measured files in --data (sweeps, evaluations,
    ablations, Table 4, training)."""
    from quell.cli.console import say
    from quell.studies.ic2.results import write_page

    say(f"results page written to {write_page(data, out)}")

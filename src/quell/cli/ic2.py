"""``quell ic2``: train IC2's interference detector from runs, score it on a run, sweep a
server setting."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from quell.cli.options import JsonOpt, RunsDirOpt, ScenarioArg

if TYPE_CHECKING:
    from quell.studies.ic2.campaign import RunFn

ic2_app = typer.Typer(
    help="IC2: detect interference from tenant-side signals and reconfigure the web server."
)

SpecArg = Annotated[Path, typer.Argument(help="Spec YAML file.", dir_okay=False)]
EnvOpt = Annotated[
    str,
    typer.Option("--env", help="Where to run: lab (real servers, root) or sim (the simulator)."),
]


def _run_fn(env: str) -> RunFn:
    from quell.errors import InputError, Problem

    if env == "sim":
        from quell.experiment.sim import run_sim
        from quell.sim.core import load_event_core

        load_event_core()
        return run_sim
    if env == "lab":
        from quell.experiment.lab import run_lab

        return run_lab
    raise InputError("--env", [Problem("", f"must be lab or sim, got {env!r}")])


def _model_path(model: Path) -> Path:
    return model / "detector.json" if model.is_dir() else model


Columns = list[tuple[str, str, str]]
"""(header, key, format): ``s`` text on the left, ``ms`` seconds shown in milliseconds, any
other a format spec; a missing or ``None`` value shows as -."""


def _print_rows(title: str, cols: Columns, rows: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table

    table = Table(title=escape(title), title_justify="left")
    for header, _, fmt in cols:
        table.add_column(header, justify="left" if fmt == "s" else "right")
    for row in rows:
        cells = []
        for _, key, fmt in cols:
            v = row.get(key)
            if v is None:
                cells.append("-")
            elif fmt == "ms":
                cells.append(f"{1e3 * v:.1f}")
            else:
                cells.append(escape(format(v, fmt)))
        table.add_row(*cells)
    out_console.print(table)


def _recorded_scenario(store: Any, run_dir: Path) -> dict[str, Any]:
    """The scenario a recorded run ran, as its run store keeps it."""
    from quell.errors import InputError, Problem

    recorded = store.meta().get("scenario_json")
    if not isinstance(recorded, dict):
        raise InputError(str(run_dir), [Problem("meta.scenario_json", "missing")])
    return recorded


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
    from quell.studies.ic2.campaign import Trainer, load_campaign

    campaign = load_campaign(spec_path)
    run_fn = _run_fn(campaign.spec.environment)
    trainer = Trainer(campaign, out, run_fn)
    trainer.prepare()
    with progress_bar(trainer.total_s, campaign.spec.name) as bar:
        trainer.progress = bar
        bundle = trainer.train()
    phases = bundle.data.training.phases
    from quell.report.fit import FitTable as Table

    table = Table(title=f"{campaign.spec.name}: detector in {out / 'detector.json'}")
    for col in ("phase", "collected", "trained on", "NI", "T", "I"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for p in phases:
        collected: Any = p["collected"]
        trained: Any = p["trained_on"]
        counts = trained["class_counts"]
        table.add_row(
            str(p["phase"]),
            str(collected["samples"]),
            str(trained["samples"]),
            str(counts["NI"]),
            str(counts["T"]),
            str(counts["I"]),
        )
    out_console.print(table)
    if as_json:
        emit_json({"detector": str(out / "detector.json"), "phases": phases})


EVAL_COLUMNS: Columns = [
    ("inst", "instance", "s"),
    ("recall", "recall", ".3f"),
    ("prec", "precision", ".3f"),
    ("miss", "miss_rate", ".3f"),
    ("detect s", "detect_latency_s", ".1f"),
    ("clear s", "clear_latency_s", ".1f"),
    ("onsets", "detect_events", "d"),
    ("missed", "detect_missed", "d"),
    ("n", "samples", "d"),
]


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
    from quell.cli.console import emit_json, progress_bar, say
    from quell.core.files import write_json
    from quell.detect.bundle import load_detector
    from quell.errors import InputError, Problem
    from quell.scenario import load_scenario
    from quell.store.run import RunStore
    from quell.studies.ic2.campaign import interfered_instances, score_runs

    problems = []
    if states not in (2, 5):
        problems.append(Problem("--states", f"must be 2 or 5, got {states}"))
    if env not in ("lab", "sim"):
        problems.append(Problem("--env", f"must be lab or sim, got {env!r}"))
    if problems:
        raise InputError("quell ic2 evaluate", problems)
    n_states: Literal[2, 5] = 5 if states == 5 else 2
    scenario = load_scenario(path)
    if policy is not None:
        from pydantic import ValidationError

        from quell.core.schema import validation_problems
        from quell.scenario.model import PolicySpec

        try:
            spec = PolicySpec(name=policy)
        except ValidationError as err:
            raise InputError("--policy", validation_problems(err)) from None
        scenario = scenario.model_copy(update={"policy": spec, "compare": []})
    bundle = load_detector(_model_path(model))
    if not interfered_instances(scenario):
        raise InputError(
            str(path), [Problem("events", "start no antagonist on an instance's host")]
        )
    if not run:
        summary = _run_fn(env)(
            scenario, path, runs_dir, lambda: progress_bar(scenario.duration_s, scenario.name)
        )
        run = [Path(summary["run_dir"])]
    docs = []
    stores: list[RunStore] = []
    try:
        for r in run:
            stores.append(RunStore.open(r))
        for r, store in zip(run, stores, strict=True):
            recorded = store.meta().get("scenario_json")
            if recorded != scenario.model_dump(mode="json"):
                keys = sorted(
                    k
                    for k, v in scenario.model_dump(mode="json").items()
                    if not isinstance(recorded, dict) or recorded.get(k) != v
                )
                raise InputError(
                    str(r),
                    [Problem("", f"is not a run of {path}: they differ in {', '.join(keys)}")],
                )
        scored = score_runs(
            stores, scenario, bundle.detector, n_states, bundle.data.training.transient_s
        )
        for r, store, result in zip(run, stores, scored.pop("runs"), strict=True):
            machine = store.meta().get("machine")  # lab runs say what they were measured on
            doc = {
                "scenario": scenario.name,
                "run_dir": str(r),
                "model": str(_model_path(model)),
                "trained_on": bundle.meta.model_dump(mode="json"),
                **result,
                **({"machine": machine} if machine is not None else {}),
            }
            write_json(r / "ic2-evaluation.json", doc)
            _print_evaluation(doc)
            say(f"evaluation written to {r / 'ic2-evaluation.json'}")
            docs.append(doc)
        if len(run) > 1:
            pooled = {
                "scenario": scenario.name,
                "run_dirs": [str(r) for r in run],
                "model": str(_model_path(model)),
                "trained_on": bundle.meta.model_dump(mode="json"),
                **scored,
                "runs": {d["run_dir"]: {k: d[k] for k in SCORE_KEYS} for d in docs},
            }
            _print_runs(pooled)
            docs = [pooled]
    finally:
        for store in stores:
            store.close()
    if as_json:
        emit_json(docs[0])


SCORE_KEYS = (
    "recall",
    "precision",
    "miss_rate",
    "detect_latency_s",
    "clear_latency_s",
    "detect_events",
    "detect_missed",
    "samples",
)
"""What ``quell ic2 evaluate`` gives of each run when it scores several together."""


def _print_runs(doc: dict[str, Any]) -> None:
    from quell.cli.console import say

    rows = [{"instance": f"run {k}", **m} for k, m in enumerate(doc["runs"].values(), 1)]
    rows.append({**doc, "instance": "all"})
    _print_rows(f"{doc['scenario']}: class I, run by run and together", EVAL_COLUMNS, rows)
    for k, r in enumerate(doc["runs"], 1):
        say(f"run {k}: {r}")


def _print_evaluation(doc: dict[str, Any]) -> None:
    rows = [{"instance": iid, **r} for iid, r in doc["instances"].items()]
    if len(rows) > 1:
        rows.append({**doc, "instance": "all"})
    _print_rows(f"{doc['scenario']}: class I, {doc['states']}-state machine", EVAL_COLUMNS, rows)


@ic2_app.command("sweep")
def ic2_sweep(
    spec_path: SpecArg,
    out: Annotated[Path, typer.Option("--out", help="Directory for the runs and the results.")],
    as_json: JsonOpt = False,
) -> None:
    """Sweep one apache setting of a scenario, clean and under each antagonist (the paper's
    Fig. 2 and 3): the mean response time at each value and the best one per condition.
    Resumable with the same --out; writes sweep.json and sweep.png there."""
    from rich.markup import escape

    from quell.cli.console import emit_json, out_console, progress_bar, say
    from quell.report.fit import FitTable as Table
    from quell.report.ic2_results import sweep_cell_ms
    from quell.studies.ic2.sweep import Sweeper, load_sweep, plot

    sweep = load_sweep(spec_path)
    sweeper = Sweeper(sweep, out, _run_fn(sweep.spec.environment))
    sweeper.prepare()
    with progress_bar(sweeper.total_s, sweep.spec.name) as bar:
        sweeper.progress = bar
        doc = sweeper.run()
    plot(doc, out / "sweep.png")
    table = Table(
        title=f"{escape(sweep.spec.name)}: mean response time (ms) against {sweep.spec.setting}",
        title_justify="left",
    )
    table.add_column(sweep.spec.setting, justify="right")
    conds = list(doc["table"])
    for c in conds:
        table.add_column(escape(c), justify="right")
    for v in sweep.spec.values:
        table.add_row(f"{v:g}", *(sweep_cell_ms(doc["table"][c], v) for c in conds))
    out_console.print(table)
    say(f"(range of the repeats) * best per condition; sweep.json and sweep.png in {out}")
    kb = doc["row"]
    item = kb["directions"]
    say(
        f"{escape(kb['why'])}: IC2's row for this service: directions: {item!r}"
        if item is not None
        else f"{escape(kb['why'])}: no direction for IC2's row"
    )
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

    from quell.cli.console import emit_json
    from quell.errors import InputError, Problem
    from quell.report.ic2_results import reduction_text
    from quell.scenario.model import Scenario
    from quell.store.run import RunStore
    from quell.studies.ic2.table4 import table4

    labelled: list[tuple[str, Path]] = []
    scenarios: list[dict[str, Any]] = []
    for d in run_dirs:
        with RunStore.open(d) as store:
            recorded = _recorded_scenario(store, d)
        pol = recorded.get("policy") or {}
        labelled.append((str(pol.get("label") or pol.get("name") or d.name), d))
        scenarios.append({k: v for k, v in recorded.items() if k not in ("policy", "compare")})
    if any(s != scenarios[0] for s in scenarios[1:]):
        raise InputError(
            "quell ic2 table4",
            [Problem("RUN_DIRS", "are not runs of one scenario (they differ beyond the policy)")],
        )
    if first_s <= 0:
        raise InputError("--first-s", [Problem("", f"must be > 0, got {first_s:g}")])
    scenario = Scenario.model_validate({**scenarios[0], "policy": {"name": "static"}})
    doc = table4(scenario, labelled, first_s)
    cols: Columns = [
        ("policy", "policy", "s"),
        ("runs", "repetitions", "d"),
        (f"first {first_s:g} s ms", "first_rt_s", "ms"),
        ("cut %", "first_cut", "s"),
        ("after ms", "after_rt_s", "ms"),
        ("cut %", "after_cut", "s"),
        ("clean ms", "clean_rt_s", "ms"),
        ("detect s", "detect_latency_s", ".1f"),
        ("clear s", "clear_latency_s", ".1f"),
        ("reconf", "reconfigurations", "g"),
    ]
    if all("sent_rt_s" in row for row in doc["rows"].values()):
        # from the request log, by the time each request was sent (quell.studies.ic2.table4)
        cols += [
            ("sent ms", "sent_rt_s", "ms"),
            ("cut %", "sent_cut", "s"),
            (f"> {first_s:g} s", "sent_over_first_s", "d"),
        ]
    if all("sent_waited_s" in row for row in doc["rows"].values()):
        # every request sent, one without an answer at the workload's timeout
        cols += [
            (f"waited first {first_s:g} s ms", "sent_first_waited_s", "ms"),
            ("cut %", "first_waited_cut", "s"),
            ("waited after ms", "sent_after_waited_s", "ms"),
            ("cut %", "after_waited_cut", "s"),
            ("failed", "sent_failed", "d"),
        ]
    title = f"{doc['scenario']}: mean RT of the interfered instances under interference"
    rows = [{"policy": label, **row} for label, row in doc["rows"].items()]
    for row in rows:
        for part in ("first", "after", "sent", "first_waited", "after_waited"):
            row[f"{part}_cut"] = reduction_text(
                row.get(f"{part}_reduction_pct"), row.get(f"{part}_reduction_pct_se")
            )
    _print_rows(title, cols, rows)
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

    from quell.cli.console import emit_json
    from quell.scenario.model import Scenario
    from quell.store.run import RunStore
    from quell.studies.ic2.campaign import ablation, load_campaign

    campaign = load_campaign(spec_path)
    with contextlib.ExitStack() as stack:
        runs = []
        for d in run_dirs:
            store = stack.enter_context(RunStore.open(d))
            runs.append((store, Scenario.model_validate(_recorded_scenario(store, d))))
        rows = ablation(campaign, out, runs)
    cols: Columns = [
        ("test", "test", "s"),
        ("cost", "cost", "s"),
        ("method", "method", "s"),
        ("recall", "recall", ".3f"),
        ("prec", "precision", ".3f"),
        ("miss", "miss_rate", ".3f"),
        ("I as NI", "i_as_ni", "d"),
        ("NI as I", "ni_as_i", "d"),
        ("detect s", "detect_latency_s", ".1f"),
        ("clear s", "clear_latency_s", ".1f"),
    ]
    _print_rows("cost ablation: class I on runs the trees never saw", cols, rows)
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

    from quell.cli.console import emit_json
    from quell.studies.ic2.campaign import load_campaign, tree_sizes

    rows = tree_sizes(load_campaign(spec_path), out)
    for r in rows:
        r["size"] = f"{r['max_depth']} / {r['min_samples_leaf']}" + (" (spec)" if r["spec"] else "")
    cols: Columns = [
        ("depth / leaf", "size", "s"),
        ("cost", "cost", ".4f"),
        ("recall", "recall", ".3f"),
        ("prec", "precision", ".3f"),
    ]
    best = min(rows, key=lambda r: r["cost"])
    _print_rows(
        f"tree size, each of {rows[0]['held_out_runs']} runs held out in turn"
        f" (least cost: {best['size']})",
        cols,
        rows,
    )
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
    from quell.errors import InputError, Problem
    from quell.report.ic2_results import render

    if not data.is_dir():
        raise InputError(str(data), [Problem("", "not a directory")])
    try:
        page = render(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            str(data), [Problem("", f"a file is not of a known form: {exc}")]
        ) from None
    out.write_text(page)
    say(f"results page written to {out}")

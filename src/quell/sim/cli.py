"""``quell sim``: run a scenario in the simulator, report on a run, compare policies."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from quell.scenario.model import Scenario

if TYPE_CHECKING:
    from rich.console import Console

    from quell.core.environment import Policy

sim_app = typer.Typer(help="Run scenarios in the discrete-event simulator (virtual time).")

ScenarioPath = Annotated[Path, typer.Argument(help="Scenario YAML file.", dir_okay=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print a JSON document as the last line.")]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where run directories are created.")]


@sim_app.command("run")
def sim_run(
    path: ScenarioPath, as_json: JsonFlag = False, runs_dir: RunsDir = Path("runs")
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


COMPARISON_FILE = "comparison.json"
COMPARE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (header, key, format)
    ("policy", "policy", "s"),
    ("SLO %", "slo_pct", ".1f"),
    ("all %", "slo_all_pct", ".1f"),
    ("req %", "slo_req_pct", ".1f"),
    ("mean ms", "mean_rt_ms", ".0f"),
    ("p95 ms", "p95_rt_ms", ".0f"),
    ("inst-s", "instance_seconds", ".0f"),
    ("oracle", "oracle_instance_seconds", ".0f"),
    ("scaling", "scaling_actions", "d"),
    ("errors", "cycle_errors", "d"),
)


def comparison_row(
    policy: str, run_dir: Path, summary: dict[str, Any], slo: dict[str, Any]
) -> dict[str, Any]:
    def pct(x: float | None) -> float | None:
        return None if x is None else round(100.0 * x, 3)

    return {
        "policy": policy,
        "run_dir": str(run_dir),
        "slo_pct": pct(slo.get("slo_fraction")),
        "slo_all_pct": pct(slo.get("slo_fraction_all")),
        "slo_req_pct": pct(slo.get("slo_request_fraction")),
        "mean_rt_ms": slo.get("mean_rt_ms"),
        "p95_rt_ms": slo.get("p95_rt_ms"),
        "instance_seconds": slo.get("instance_seconds"),
        "oracle_instance_seconds": slo.get("oracle_instance_seconds"),
        "scaling_actions": slo.get("scaling_actions"),
        "cycle_errors": summary.get("cycle_errors", 0),
        "slo": slo,
    }


def print_comparison(doc: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    target = doc.get("target_rt_s")
    title = f"{doc['scenario']}: target mean RT {target * 1e3:g} ms" if target else doc["scenario"]
    table = Table(title=title, title_justify="left")
    for header, _, fmt in COMPARE_COLUMNS:
        table.add_column(header, justify="left" if fmt == "s" else "right")
    for row in doc["policies"]:
        table.add_row(
            *("-" if row.get(k) is None else format(row[k], f) for _, k, f in COMPARE_COLUMNS)
        )
    console.print(table)
    if target:
        console.print(
            f"SLO %: instance-intervals with mean RT <= target, leaving out {doc['settle_s']:g} s "
            "after each change (all %: none left out; req %: weighed by requests); inst-s: instance-seconds used; oracle: "
            "the fewest that could have met the target; errors: failed control cycles"
        )


def _scenario_yaml(scenario: Scenario) -> str:
    """The scenario a comparison run ran, as a loadable file (its policy always spelled out)."""
    import yaml

    data = scenario.model_dump(mode="json", exclude_defaults=True)
    data["policy"] = scenario.policy.model_dump(mode="json")
    data["load_balancer"] = scenario.load_balancer.model_dump(mode="json")
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(data, Dumper=dumper, sort_keys=False))


Seeds = Annotated[
    int,
    typer.Option(
        "--seeds",
        min=1,
        help="Run the whole comparison on this many seeds (the scenario's seed and the ones "
        "after it) and print each policy's spread and its paired difference from the first.",
    ),
]


@sim_app.command("compare")
def sim_compare(
    path: ScenarioPath,
    as_json: JsonFlag = False,
    runs_dir: RunsDir = Path("runs"),
    seeds: Seeds = 1,
) -> None:
    """Run the scenario once per policy (its `policy`, then each of `compare`) on the same load
    and neighbours; print SLO, response times, instance-seconds and the oracle's side by side.
    `lc` runs with the balancer's least-connections algorithm, the others as the scenario says.
    With --seeds N, every seed's comparison is written as it finishes (seed-S/comparison.json)."""
    from quell.cli import err_console, out_console, progress_bar
    from quell.experiment import new_run_dir
    from quell.report.seeds import print_seed_summary, seed_summary
    from quell.scenario import load_scenario

    scenario = load_scenario(path)
    base = path.parent
    first = _policies(scenario, base)  # bad params: exit before running
    cmp_dir = new_run_dir(runs_dir, scenario, "sim-compare")
    cmp_dir.mkdir(parents=True)
    seed_list = [scenario.seed + k for k in range(seeds)]
    per_run = scenario.duration_s * (1 + len(scenario.compare))
    docs: list[dict[str, Any]] = []
    with progress_bar(per_run * seeds, scenario.name) as progress:
        for k, seed in enumerate(seed_list):
            one = scenario if seeds == 1 else scenario.model_copy(update={"seed": seed})
            out = cmp_dir if seeds == 1 else cmp_dir / f"seed-{seed}"
            label = "" if seeds == 1 else f"seed {seed} "

            def step(
                done_s: float, what: str, offset: float = k * per_run, lab: str = label
            ) -> None:
                progress(offset + done_s, f"{lab}{what}")

            built = first if k == 0 else _policies(one, base)  # policies keep state: new ones
            doc = _compare_once(one, base, built, out, step)
            docs.append(doc)
            if seeds == 1:
                print_comparison(doc, out_console)
    if seeds == 1:
        doc = docs[0]
    else:
        doc = {
            "scenario": scenario.name,
            "comparison_dir": str(cmp_dir),
            "target_rt_s": docs[0]["target_rt_s"],
            "settle_s": docs[0]["settle_s"],
            "seeds": seed_list,
            "policies": seed_summary(docs),
            "per_seed": [d["comparison_dir"] for d in docs],
        }
        (cmp_dir / COMPARISON_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        print_seed_summary(scenario.name, seed_list, doc["policies"], out_console)
    err_console.print(f"comparison written to {cmp_dir / COMPARISON_FILE}")
    if as_json:
        sys.stdout.flush()
        print(json.dumps(doc, separators=(",", ":")))


def _policies(scenario: Scenario, base: Path) -> list[tuple[Scenario, Policy]]:
    """Each of the scenario's policies (``policy``, then ``compare``), built for its own run."""
    from quell.policy import build_policy, scenario_for_policy

    runs = [scenario_for_policy(scenario, spec) for spec in [scenario.policy, *scenario.compare]]
    return [(s, build_policy(s.policy, s, base)) for s in runs]


def _compare_once(
    scenario: Scenario,
    base: Path,
    runs: list[tuple[Scenario, Policy]],
    cmp_dir: Path,
    progress: Callable[[float, str], None],
) -> dict[str, Any]:
    """``runs`` (from ``_policies``) on one seed of ``scenario``, run into ``cmp_dir``; the
    comparison document, also written there."""
    from quell.experiment import prepare_run_dir, run_scenario
    from quell.report.slo import default_settle_s, slo_summary
    from quell.sim.environment import SimEnvironment
    from quell.sim.oracle import run_oracle
    from quell.sim.service import draw_sizes
    from quell.workload.schedule import build_schedule

    schedule = build_schedule(scenario, base)
    oracle = None
    if scenario.target is not None:
        sizes = draw_sizes(
            scenario.service.size if scenario.service else None,
            schedule.size_bytes,
            scenario.seed,
        )
        oracle = run_oracle(scenario, base, schedule, sizes)
    cmp_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (scn, policy) in enumerate(runs):
        name = scn.policy.key
        offset = k * scenario.duration_s

        def step(done_s: float, phase: str, offset: float = offset, name: str = name) -> None:
            progress(offset + done_s, f"{name}: {phase}")

        env = SimEnvironment(scn, base_dir=base, schedule=schedule)
        run_dir = cmp_dir / name
        store = prepare_run_dir(run_dir, scn, None, env.name)
        (run_dir / "scenario.yaml").write_text(_scenario_yaml(scn))
        try:
            summary = run_scenario(scn, env, policy, store, step)
            slo = slo_summary(store, scn, oracle=oracle, base_dir=base)
        finally:
            env.close()
            store.close()
        rows.append(comparison_row(name, run_dir, summary, slo))
    doc: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "comparison_dir": str(cmp_dir),
        "target_rt_s": scenario.target.mean_rt_s if scenario.target else None,
        "settle_s": default_settle_s(scenario),
        "oracle": oracle.to_dict() if oracle is not None else None,
        "policies": rows,
    }
    (cmp_dir / COMPARISON_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    return doc

"""Several policies on one scenario, each in a run of its own: in the simulator on the same
load and neighbours (with the oracle's fewest instances beside them, over one seed or many),
and in the lab (each policy run again while the machine's own CPU steal spoils a settled
window). Each comparison is written as a JSON document beside its runs as it finishes."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quell.core.environment import Policy
from quell.experiment.run import ProgressFn, least_stolen, new_run_dir, no_progress
from quell.scenario.model import Scenario
from quell.scenario.policy import build_policy, scenario_for_policy

if TYPE_CHECKING:
    from quell.models.oracle import OracleResult
    from quell.workload.schedule import RequestSchedule

COMPARISON_FILE = "comparison.json"


def policy_runs(scenario: Scenario, base_dir: Path) -> list[tuple[Scenario, Policy]]:
    """Each of the scenario's policies (``policy``, then ``compare``) with the scenario its
    run runs (``lc`` with the balancer's least-connections), built: every bad parameter is
    reported before the first run starts."""
    runs = [scenario_for_policy(scenario, spec) for spec in [scenario.policy, *scenario.compare]]
    return [(s, build_policy(s.policy, s, base_dir)) for s in runs]


def comparison_row(
    policy: str,
    run_dir: Path,
    summary: dict[str, Any],
    slo: dict[str, Any],
    users: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    def pct(x: float | None) -> float | None:
        return None if x is None else round(100.0 * x, 3)

    return {
        "policy": policy,
        "run_dir": str(run_dir),
        "slo_pct": pct(slo.get("slo_fraction")),
        "slo_all_pct": pct(slo.get("slo_fraction_all")),
        "slo_feasible_pct": pct(slo.get("slo_fraction_feasible")),
        "slo_req_pct": pct(slo.get("slo_request_fraction")),
        "settling_pct": pct(slo.get("settling_fraction")),
        "settling_own_pct": pct(slo.get("settling_own_fraction")),
        "mean_rt_ms": slo.get("mean_rt_ms"),
        "p95_rt_ms": slo.get("p95_rt_ms"),
        "instance_seconds": slo.get("instance_seconds"),
        "oracle_instance_seconds": slo.get("oracle_instance_seconds"),
        "scaling_actions": slo.get("scaling_actions"),
        "cycle_errors": summary.get("cycle_errors", 0),
        "users": users,
        "slo": slo,
    }


def scenario_yaml(scenario: Scenario) -> str:
    """The scenario a comparison run ran, as a loadable file (its policy always spelled out)."""
    import yaml

    data = scenario.model_dump(mode="json", exclude_defaults=True)
    data["policy"] = scenario.policy.model_dump(mode="json")
    data["load_balancer"] = scenario.load_balancer.model_dump(mode="json")
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(data, Dumper=dumper, sort_keys=False))


def _oracle(
    scenario: Scenario, base: Path, schedule: RequestSchedule | None
) -> OracleResult | None:
    """The fewest instances that could have met the target on this seed's load (``schedule``)
    and neighbours (none for closed-loop users: their load follows the service)."""
    if scenario.target is None or schedule is None:
        return None
    from quell.sim.headroom import run_oracle

    return run_oracle(scenario, base, schedule)


def compare_in_sim(
    scenario: Scenario,
    base: Path,
    runs: list[tuple[Scenario, Policy]],
    cmp_dir: Path,
    progress: ProgressFn = lambda done, what: None,
) -> dict[str, Any]:
    """``runs`` (from ``policy_runs``) on one seed of ``scenario``, each into ``cmp_dir``/its
    name; the comparison document, also written there."""
    from quell.experiment.run import prepare_run_dir, run_scenario
    from quell.report.felt import scenario_felt
    from quell.report.slo import default_settle_s, slo_summary
    from quell.scenario.schedule import build_schedule
    from quell.sim.environment import SimEnvironment

    # one schedule for every policy; closed-loop users have none: each run draws alike
    closed = scenario.workload.arrival.process == "closed"
    schedule = None if closed else build_schedule(scenario, base)
    oracle = _oracle(scenario, base, schedule)
    cmp_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (scn, policy) in enumerate(runs):
        name = scn.policy.key
        offset = k * scenario.duration_s

        def step(done_s: float, phase: str, offset: float = offset, name: str = name) -> None:
            progress(offset + done_s, f"{name}: {phase}")

        env = SimEnvironment(scn, base_dir=base, schedule=schedule)
        run_dir = cmp_dir / name
        store = prepare_run_dir(run_dir, scn, None, env.name, base)
        (run_dir / "scenario.yaml").write_text(scenario_yaml(scn))
        try:
            summary = run_scenario(scn, env, policy, store, step)
            slo = slo_summary(store, scn, oracle=oracle, base_dir=base)
            users = scenario_felt(store.request_arrays(), scn)
        finally:
            env.close()
            store.close()
        rows.append(comparison_row(name, run_dir, summary, slo, users))
    from quell.report.compare_page import write_comparison_page

    target = scenario.target.mean_rt_s if scenario.target else None
    page = write_comparison_page(
        f"{scenario.name} (seed {scenario.seed})",
        [(r["policy"], Path(r["run_dir"])) for r in rows],
        target,
        cmp_dir,
        {r["policy"]: r["users"] for r in rows},
        scenario.workload.timeout_s,
    )
    doc: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "comparison_dir": str(cmp_dir),
        "target_rt_s": scenario.target.mean_rt_s if scenario.target else None,
        "timeout_s": scenario.workload.timeout_s,
        "settle_s": default_settle_s(scenario),
        "oracle": oracle.to_dict() if oracle is not None else None,
        "page": str(page),
        "policies": rows,
    }
    return _written(cmp_dir / COMPARISON_FILE, doc)


def compare_seeds_in_sim(
    scenario: Scenario,
    base: Path,
    seeds: int,
    runs_dir: Path,
    progress: ProgressFn = lambda done, what: None,
    on_seed: Callable[[dict[str, Any]], None] = lambda doc: None,
    first: list[tuple[Scenario, Policy]] | None = None,
) -> dict[str, Any]:
    """The comparison on ``seeds`` seeds (the scenario's and the ones after it), each written
    as it finishes (``seed-S/comparison.json``; one seed: the comparison directory itself);
    with several, a document of each policy's spread and its paired difference from the
    first. ``progress`` counts simulated seconds over every run of every seed. ``first``: the
    first seed's ``policy_runs``, when the caller built them already."""
    from quell.report.seeds import seed_summary

    if first is None:
        first = policy_runs(scenario, base)  # bad params: nothing runs
    cmp_dir = new_run_dir(runs_dir, scenario, "sim-compare")
    cmp_dir.mkdir(parents=True)
    seed_list = [scenario.seed + k for k in range(seeds)]
    per_run = scenario.duration_s * (1 + len(scenario.compare))
    docs: list[dict[str, Any]] = []
    for k, seed in enumerate(seed_list):
        one = scenario if seeds == 1 else scenario.model_copy(update={"seed": seed})
        out = cmp_dir if seeds == 1 else cmp_dir / f"seed-{seed}"
        label = "" if seeds == 1 else f"seed {seed} "

        def step(done_s: float, what: str, offset: float = k * per_run, lab: str = label) -> None:
            progress(offset + done_s, f"{lab}{what}")

        built = first if k == 0 else policy_runs(one, base)  # policies keep state: new ones
        doc = compare_in_sim(one, base, built, out, step)
        docs.append(doc)
        on_seed(doc)
    if seeds == 1:
        return docs[0]
    summary = {
        "scenario": scenario.name,
        "comparison_dir": str(cmp_dir),
        "target_rt_s": docs[0]["target_rt_s"],
        "settle_s": docs[0]["settle_s"],
        "seeds": seed_list,
        "policies": seed_summary(docs),
        "per_seed": [d["comparison_dir"] for d in docs],
    }
    return _written(cmp_dir / COMPARISON_FILE, summary)


def compare_in_lab(
    scenario: Scenario,
    path: Path,
    runs_dir: Path,
    max_steal_pct: float,
    attempts: int,
    progress: Callable[[str], AbstractContextManager[ProgressFn]] = lambda label: no_progress(),
    on_refused: Callable[[str, Path], None] = lambda key, run_dir: None,
) -> tuple[dict[str, Any], Path]:
    """Each policy's lab run with its report, run again while the machine's CPU steal
    averaged over ``max_steal_pct`` in one of its settled windows (``attempts`` runs at most,
    the least stolen kept); the comparison document and the file it is written to.
    ``progress(label)`` opens the display of one run."""
    from quell.experiment.lab import run_lab
    from quell.report.compare import comparison, run_phases
    from quell.report.render import render_report
    from quell.signals.machine import read_machine

    runs_of = [s for s, _ in policy_runs(scenario, path.parent)]  # all build, or none runs
    runs: list[tuple[str, Path]] = []
    stolen: dict[str, list[str]] = {}
    for s in runs_of:
        key = s.policy.key

        def once(s: Scenario = s, key: str = key) -> Path:
            def show() -> AbstractContextManager[ProgressFn]:
                return progress(f"{scenario.name} ({key})")

            run_dir = Path(run_lab(s, path, runs_dir, show)["run_dir"])
            render_report(run_dir)
            return run_dir

        def steal_of(run_dir: Path, s: Scenario = s) -> float | None:
            steal: float | None = run_phases(s, run_dir)["max_steal_pct"]
            return steal

        def refused(run_dir: Path, key: str = key) -> None:
            on_refused(key, run_dir)

        run_dir, over = least_stolen(once, steal_of, max_steal_pct, attempts, on_refused=refused)
        runs.append((key, run_dir))
        if over:
            stolen[key] = [str(d) for d in over]
    from quell.report.compare_page import write_comparison_page

    result = comparison(scenario, runs) | {
        "max_steal_pct": max_steal_pct,
        "stolen": stolen,
        "machine": read_machine().as_dict(),
    }
    cmp_dir = new_run_dir(runs_dir, scenario, "lab-compare")
    cmp_dir.mkdir(parents=True)
    target = scenario.target.mean_rt_s if scenario.target else None
    from quell.report.compare import users_by_policy

    page = write_comparison_page(
        scenario.name,
        runs,
        target,
        cmp_dir,
        users_by_policy(result),
        scenario.workload.timeout_s,
    )
    result["page"] = str(page)
    out = cmp_dir / COMPARISON_FILE
    return _written(out, result), out


def compare_repeats_in_lab(
    scenario: Scenario,
    path: Path,
    runs_dir: Path,
    repeats: int,
    max_steal_pct: float,
    attempts: int,
    progress: Callable[[str], AbstractContextManager[ProgressFn]] = lambda label: no_progress(),
    on_refused: Callable[[str, Path], None] = lambda key, run_dir: None,
    on_repeat: Callable[[int, dict[str, Any]], None] = lambda k, doc: None,
) -> tuple[dict[str, Any], Path]:
    """The lab comparison ``repeats`` times, every policy once per repeat, each repeat written
    as it finishes (``repeat-K/…/comparison.json``), then each policy's spread per phase and
    its paired difference from the first policy (``report/repeats.py``) in the comparison
    directory's own ``comparison.json``. ``on_repeat(k, doc)`` sees each repeat's document."""
    from quell.report.repeats import repeat_summary
    from quell.signals.machine import read_machine

    policy_runs(scenario, path.parent)  # bad params: nothing runs
    cmp_dir = new_run_dir(runs_dir, scenario, "lab-compare")
    cmp_dir.mkdir(parents=True)
    docs: list[dict[str, Any]] = []
    files: list[str] = []
    for k in range(1, repeats + 1):

        def show(label: str, k: int = k) -> AbstractContextManager[ProgressFn]:
            return progress(f"repeat {k}/{repeats}: {label}")

        doc, out = compare_in_lab(
            scenario, path, cmp_dir / f"repeat-{k}", max_steal_pct, attempts, show, on_refused
        )
        docs.append(doc)
        files.append(str(out))
        on_repeat(k, doc)
    summary = {
        "scenario": scenario.name,
        "comparison_dir": str(cmp_dir),
        "target_rt_s": docs[0]["target_rt_s"],
        "settle_s": docs[0]["settle_s"],
        "repeats": repeats,
        "policies": repeat_summary(docs),
        "per_repeat": files,
        "stolen": _merged_stolen(docs),
        "machine": read_machine().as_dict(),
    }
    out = cmp_dir / COMPARISON_FILE
    return _written(out, summary), out


def _merged_stolen(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every run that the machine's CPU steal spoiled, per policy, over all repeats."""
    stolen: dict[str, list[str]] = {}
    for doc in docs:
        for key, dirs in doc["stolen"].items():
            stolen.setdefault(key, []).extend(dirs)
    return stolen


def _written(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc``, once written to ``path`` as indented JSON."""
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc

"""Recorded decision logs: every snapshot a policy saw in one run, in order, with the decision
it made, so a later version of the policy can be replayed against them.

A log is a gzipped JSON-lines file. Its first line names the scenario (relative to the
repository root) and the policy spec the run used; each further line is one tick:
``{"snapshot": {...}, "decision": {...}}``. Snapshots keep their instances in the order the
environment reported them (sums over instances depend on it). Decisions are stored as the run
store stores them: actions as dicts, the reason, and the detail as JSON with sorted keys.

Record from the simulator (``python -m tests.policy.decision_log sim SCENARIO OUT
[--params JSON] [--duration S]``) or from a lab run directory's ``run.db`` (``lab RUN_DIR
SCENARIO OUT``), whose observations are read back in the order they were written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quell.core.action import Decision
from quell.core.observation import OBSERVATION_FIELDS, Observation, Snapshot
from quell.store.run import action_dict

ROOT = Path(__file__).resolve().parents[2]


def decision_dict(d: Decision) -> dict[str, Any]:
    """A decision as the run store keeps it (detail through JSON, floats as floats)."""
    return {
        "actions": [action_dict(a) for a in d.actions],
        "reason": d.reason,
        "detail": json.loads(json.dumps(d.detail, sort_keys=True, default=float)),
    }


def snapshot_dict(s: Snapshot) -> dict[str, Any]:
    return {
        "time_s": s.time_s,
        "environment": s.environment,
        "instances": [o.to_dict() for o in s.instances.values()],
    }


def snapshot_of(d: dict[str, Any]) -> Snapshot:
    obs = [Observation.from_dict(o) for o in d["instances"]]
    return Snapshot(d["time_s"], d["environment"], {o.instance_id: o for o in obs})


def write_log(
    out: Path, header: dict[str, Any], ticks: list[tuple[Snapshot, Decision | None]]
) -> None:
    with gzip.open(out, "wt") as f:
        f.write(json.dumps(header) + "\n")
        for snap, dec in ticks:
            line = {
                "snapshot": snapshot_dict(snap),
                "decision": None if dec is None else decision_dict(dec),
            }
            f.write(json.dumps(line) + "\n")


def read_log(path: Path) -> tuple[dict[str, Any], Iterator[tuple[Snapshot, dict[str, Any]]]]:
    """The header and, lazily, each tick's snapshot and recorded decision (``None``: the policy
    returned an empty decision)."""
    f = gzip.open(path, "rt")  # noqa: SIM115 (closed by the generator)
    header = json.loads(f.readline())

    def ticks() -> Iterator[tuple[Snapshot, dict[str, Any]]]:
        with f:
            for line in f:
                d = json.loads(line)
                yield snapshot_of(d["snapshot"]), d["decision"]

    return header, ticks()


def record_sim(
    scenario_path: Path, out: Path, params: dict[str, Any], duration_s: float | None
) -> None:
    """Run the scenario's policy (its params updated with ``params``) in the simulator and
    record every tick."""
    from quell.experiment.run import scenario_loop
    from quell.scenario import load_scenario
    from quell.scenario.policy import build_policy
    from quell.sim.environment import SimEnvironment

    scenario = load_scenario(scenario_path)
    spec = scenario.policy.model_copy(update={"params": {**scenario.policy.params, **params}})
    update: dict[str, Any] = {"policy": spec, "compare": []}
    if duration_s is not None:
        update["duration_s"] = duration_s
        update["events"] = [e for e in scenario.events if e.at_s < duration_s]
    scenario = scenario.model_copy(update=update)
    inner = build_policy(scenario.policy, scenario, scenario_path.parent)
    env = SimEnvironment(scenario, base_dir=scenario_path.parent)
    ticks: list[tuple[Snapshot, Decision | None]] = []

    class Recorder:
        name = inner.name

        def decide(self, snapshot: Snapshot) -> Decision:
            d = inner.decide(snapshot)
            ticks.append((snapshot, d))
            return d

    scenario_loop(scenario, env, Recorder()).run()
    header = {
        "scenario": str(scenario_path.resolve().relative_to(ROOT)),
        "environment": "sim",
        "policy": spec.model_dump(mode="json"),
        "duration_s": scenario.duration_s,
    }
    write_log(out, header, ticks)


def record_lab(run_dir: Path, scenario_path: Path, out: Path) -> None:
    """The ticks of a finished lab run, from its store: observations in the order written,
    decisions at their snapshot's time."""
    conn = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True)
    cols = ", ".join(OBSERVATION_FIELDS)
    by_time: dict[float, list[Observation]] = {}
    for row in conn.execute(f"SELECT {cols}, extra FROM observations ORDER BY rowid"):
        d = dict(zip(OBSERVATION_FIELDS, row[:-1], strict=True))
        d["extra"] = json.loads(row[-1])
        o = Observation.from_dict(d)
        by_time.setdefault(o.time_s, []).append(o)
    decisions = {
        t: {"actions": json.loads(a), "reason": r, "detail": json.loads(dt)}
        for t, r, a, dt in conn.execute("SELECT time_s, reason, actions, detail FROM decisions")
    }
    meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    conn.close()
    policy = meta["scenario_json"]["policy"]
    header = {
        "scenario": str(scenario_path.resolve().relative_to(ROOT)),
        "environment": "lab",
        "policy": policy,
        "duration_s": meta["duration_s"],
    }
    with gzip.open(out, "wt") as f:
        f.write(json.dumps(header) + "\n")
        for t in sorted(by_time):
            snap = Snapshot(t, "lab", {o.instance_id: o for o in by_time[t]})
            f.write(
                json.dumps({"snapshot": snapshot_dict(snap), "decision": decisions.get(t)}) + "\n"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    s = sub.add_parser("sim")
    s.add_argument("scenario", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--params", default="{}")
    s.add_argument("--duration", type=float, default=None)
    lab = sub.add_parser("lab")
    lab.add_argument("run_dir", type=Path)
    lab.add_argument("scenario", type=Path)
    lab.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.kind == "sim":
        record_sim(args.scenario, args.out, json.loads(args.params), args.duration)
    else:
        record_lab(args.run_dir, args.scenario, args.out)


if __name__ == "__main__":
    main()

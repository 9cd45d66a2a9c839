"""Build ``apache-bundle.json``: PRIMA's models for the apache instance of ``sim-fleet.yaml``.

``quell prima profile`` profiles a service on a host link against an iperf3 neighbour; this
instance's bottleneck is its own CPU and its neighbour a stress-ng cache antagonist, so the
cells are run here the same way: the instance alone (2 cores, closed-loop users on kept-alive
connections), at each load (users) against 0, 1 and 2 stress-ng workers, by the simulator with
the static policy. U is the instance's CPU share (``util_pct``); the probe (10 kB every 5 s)
queues behind the service's own requests; R_iso(U) is the clean cells' probe mean; SF is Eq. 1
against it; a neighbour's load U_int is the share of the CPU its slowdown takes,
100 × (1 − 1 / (1 + 0.5 × workers)) (``service.stress_ng_slowdown_per_worker``).

Run from the repository: ``python scenarios/defence/profile_apache.py OUT_DIR`` (about 2 CPU
minutes); it writes ``OUT_DIR/apache-bundle.json`` and the cells it measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

from quell.experiment.sim import run_sim
from quell.models.bundle import BundleMeta, build_bundle
from quell.probe.severity import probe_samples, severity_factor
from quell.probe.table import ProbeTable, TrainingLevel
from quell.scenario.load import parse_scenario
from quell.store import RunStore

HERE = Path(__file__).resolve().parent
USERS = [40, 100, 160, 220, 280, 340, 400, 460]
WORKERS = [0, 1, 2]
CELL_S = 200.0
WARMUP_S = 20.0
SLOWDOWN_PER_WORKER = 0.5
SATURATED_RT_S = 0.5
"""A cell whose mean response time exceeds this (10 R_th) is saturated: its U falls as its
workers thrash, and it enters no model (``quell prima profile`` skips such cells too)."""


def cell(users: int, workers: int) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((HERE / "sim-fleet.yaml").read_text())
    data["name"] = f"apache-profile-u{users}-w{workers}"
    data["seed"] = 500 + users + 7 * workers
    data["duration_s"] = WARMUP_S + CELL_S
    data["instances"] = [data["instances"][0]]  # type: ignore[index]
    data["hosts"] = [data["hosts"][0]]  # type: ignore[index]
    wl = data["workload"]
    wl["arrival"] = {**wl["arrival"], "users": users}  # type: ignore[index]
    data.pop("scaling", None)
    data["policy"] = {"name": "static"}
    data["compare"] = []
    data["events"] = []
    host = data["hosts"][0]["id"]  # type: ignore[index]
    data["antagonists"] = (
        [
            {
                "id": "thrash",
                "kind": "stress-ng",
                "host": host,
                "stressor": "cache",
                "workers": workers,
            }
        ]
        if workers
        else []
    )
    if workers:
        data["events"] = [{"at_s": 0.0, "start": ["thrash"]}]
    return data


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for w in WORKERS:
        for u in USERS:
            data = cell(u, w)
            sc = parse_scenario(data, data["name"], HERE)  # type: ignore[arg-type]
            summary = run_sim(sc, HERE / "sim-fleet.yaml", out / "runs")
            with RunStore.open(Path(summary["run_dir"])) as store:
                obs = [o for o in store.observations() if o.time_s > WARMUP_S]
            util = float(np.mean([o.util_pct or 0.0 for o in obs]))
            n = sum(o.requests for o in obs if o.mean_rt_seconds is not None)
            rt = sum((o.mean_rt_seconds or 0.0) * o.requests for o in obs) / n
            probes = probe_samples(o.extra for o in obs)
            rows.append({"users": u, "workers": w, "util_pct": util, "rt_s": rt, "probe_s": probes})
            print(u, w, round(util, 1), round(rt, 4), round(float(np.mean(probes)), 5), flush=True)
    (out / "cells.json").write_text(json.dumps(rows))
    clean = [r for r in rows if r["workers"] == 0 and r["rt_s"] <= SATURATED_RT_S]
    table = ProbeTable().fit([TrainingLevel(r["util_pct"], tuple(r["probe_s"])) for r in clean])
    rtm, im = [], []
    level = {r["users"]: r["util_pct"] for r in clean}
    for r in rows:
        if r["rt_s"] > SATURATED_RT_S:
            continue
        sf = float(severity_factor(np.mean(r["probe_s"]), table.predict(r["util_pct"])))
        u_int = 100.0 * (1.0 - 1.0 / (1.0 + SLOWDOWN_PER_WORKER * r["workers"]))
        rtm.append((r["util_pct"], 0.0 if r["workers"] == 0 else sf, r["rt_s"]))
        im.append(
            (
                r["util_pct"] + u_int,
                0.0 if r["workers"] == 0 else sf,
                r["util_pct"],
                level[r["users"]],
            )
        )
    meta = BundleMeta(
        workload="defence-sim-apache",
        instance_type="sim-apache-2core",
        environment="sim",
        created="profile_apache.py",
        probe_period_s=5.0,
        probe_size_bytes=10000,
        source="scenarios/defence/profile_apache.py",
    )
    bundle = build_bundle(meta, table, rtm, im)
    bundle.save(out / "apache-bundle.json")
    print("wrote", out / "apache-bundle.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""A consolidation study's points measured in the lab on one lab for many points:
``python bench/consolidation_lab.py SPEC.yaml RUNS_DIR``.

The spec is ``quell study consolidation``'s (``quell.studies.consolidation.spec``) and each point
goes where that command puts it (``RUNS_DIR/lab/<key>/seed<k>/``), so the command reads them back
afterwards and writes the study record and figures. The difference: ``quell study consolidation
--env lab`` brings both systems up for every point (about a minute each with the full data);
this brings them up once per hold. Points are measured in holds of the lab lock (``/tmp/quell-lab.lock``) of at most ``--hold-seconds``: each hold brings
the lab up, measures the points that fit, tears it down and releases the lock. A point whose
``measurement.json`` exists is skipped (the sweep resumes). A point spoiled by the machine
(steal above 5 %, or more than half of CPU 1 used by anything but the two database tiers) is
measured once more, and the second measurement kept either way (``lab.json`` says how spoiled
it was). Only ``measurement.json`` and ``lab.json`` are kept per point."""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from quell.studies.consolidation.lab import ConsolidationLab
from quell.studies.consolidation.point import ConsolidationPoint
from quell.studies.consolidation.spec import load_study

SPOILED_STEAL_PCT = 5.0
SPOILED_CPU1_OTHER_PCT = 50.0


def spoiled(lab_json: dict[str, Any], steal_pct: float | None) -> bool:
    """Steal above 5 %, or CPU 1 mostly someone else's (the tiers' ten-fold shares keep other
    processes off it while the tiers want it; what they use in the tiers' idle time does not
    spoil a point)."""
    return (steal_pct or 0.0) > SPOILED_STEAL_PCT or float(
        lab_json["cpu1_other_pct"]
    ) > SPOILED_CPU1_OTHER_PCT


def point_seconds(p: ConsolidationPoint) -> float:
    return p.ramp_seconds + p.measure_seconds + 20.0  # idle wait, warm-up, stop


def keep_only_results(run_dir: Path) -> None:
    for f in run_dir.iterdir():
        if f.name not in ("measurement.json", "lab.json"):
            if f.is_dir():
                shutil.rmtree(f)
            else:
                f.unlink()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", type=Path, help="a quell study consolidation spec")
    ap.add_argument("out", type=Path, help="its runs directory")
    ap.add_argument("--hold-seconds", type=float, default=540.0)
    ap.add_argument("--comments", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    study = load_study(args.scenario)
    todo = [
        (pp.key + f"/seed{pp.point.seed}", pp.point)
        for pp in study.points("lab")
        if not (pp.run_dir(args.out) / "measurement.json").exists()
    ]
    print(f"{len(todo)} points to measure", flush=True)
    while todo:
        with open("/tmp/quell-lab.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            held_at = time.monotonic()
            with ConsolidationLab(
                comments_total=args.comments, status=lambda m: print(f"  {m}", flush=True)
            ) as lab:
                while todo:
                    name, p = todo[0]
                    left = args.hold_seconds - (time.monotonic() - held_at)
                    if left < 2 * point_seconds(p) + 15.0:  # room for one re-measurement
                        break
                    run_dir = args.out / "lab" / name
                    for attempt in (1, 2):
                        m = lab.measure(p, run_dir)
                        extra = json.loads((run_dir / "lab.json").read_text())
                        extra["attempt"] = attempt
                        (run_dir / "lab.json").write_text(json.dumps(extra, indent=2))
                        bad = spoiled(extra, m.steal_pct)
                        c, i = m.systems["const"], m.systems["inc"]
                        print(
                            f"{name}: const {c.mean_rt_seconds * 1e3:.1f} ms {c.db_cpu_pct:.1f} %"
                            f" thr {c.throttled_periods_total}; inc {i.mean_rt_seconds * 1e3:.1f}"
                            f" ms {i.db_cpu_pct:.1f} % thr {i.throttled_periods_total};"
                            f" cpu0 {extra['cpu0_util_pct']:.0f} % (ours"
                            f" {extra['front_cpu_pct'] + extra['client_cpu_pct']:.0f} %) cpu1-other"
                            f" {extra['cpu1_other_pct']:.1f} % steal {m.steal_pct:.1f} %"
                            + (" SPOILED" if bad else ""),
                            flush=True,
                        )
                        if not bad:
                            break
                    keep_only_results(run_dir)
                    todo.pop(0)
        time.sleep(5.0)  # let other lab users take the lock
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

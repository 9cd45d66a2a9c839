"""What the cost matrix and the bootstrap do, measured on the synthetic server.

``cost_ablation``: trees trained on IC2-off runs with cache antagonists only (the paper trained
on Dcopy only), tested on other IC2-off runs with cache and CPU antagonists (the paper tested
on Dcopy and LLCProbe), for each feature set (the paper's three attributes, or every tenant
feature), cost method and cost matrix (1 : 1 : 1 against 5 : 1 : 10). Per interval: recall,
precision, miss rate and I missed (I predicted NI); through the five-state chain: median
detection and clearing latency.

``bootstrap_study``: the three phases on the synthetic runner, then each phase's tree driving
IC2 on held-out runs: how often it reconfigures, its latencies, and the mean response time
under interference against IC2 off.

``python -m quell.studies.ic2.ablation`` prints both as JSON.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

import numpy as np

from quell.detect.dataset import Dataset, bootstrap, concat, from_run
from quell.detect.evaluate import latencies
from quell.detect.features import DEFAULT_FEATURES, PAPER_FEATURES
from quell.detect.labels import I, Period, Timeline
from quell.detect.tree import CostMatrix, CostMethod, CostSensitiveTree
from quell.policy.ic2 import Ic2Policy
from quell.studies.ic2.runs import SyntheticRun, run_synthetic, synthetic_runner
from quell.studies.ic2.scoring import median_s, score_tree
from quell.studies.ic2.synthetic import periodic_timeline

COSTS = {"1:1:1": CostMatrix.uniform(), "5:1:10": CostMatrix()}
METHODS: tuple[CostMethod, ...] = ("weights", "expected")
FEATURE_SETS = {"paper": PAPER_FEATURES, "tenant": DEFAULT_FEATURES}
TEST_INTENSITIES = (0.35, 0.7, 0.5, 0.9)
TEST_KINDS = ("cache", "cpu")
"""Cache antagonists as in training, at other intensities; CPU ones, which training never
showed (the paper's tests added LLCProbe, another cache antagonist)."""


def test_timeline(duration_s: float, kind: str = "cache") -> Timeline:
    """Held-out runs: antagonists of ``kind`` at intensities the training did not use."""
    return periodic_timeline(duration_s, kinds=(kind,), intensities=TEST_INTENSITIES)


def _shifted(
    runs: Sequence[tuple[Dataset, Timeline]], duration_s: float
) -> tuple[Dataset, Timeline]:
    """The runs end to end on one clock (run k shifted by k × ``duration_s``)."""
    parts, periods = [], []
    for k, (d, tl) in enumerate(runs):
        off = k * duration_s
        parts.append(Dataset(d.features, d.x, d.y, d.time_s + off, d.run + k, d.source))
        periods += [
            Period(p.start_s + off, p.stop_s + off, p.kind, p.intensity) for p in tl.periods
        ]
    return concat(parts, "test"), Timeline(tuple(periods))


def cost_ablation(
    seed: int = 1, train_runs: int = 8, test_runs: int = 4, duration_s: float = 3600.0
) -> dict[str, object]:
    """Every test kind × feature set × method × cost on the same train and test runs (module
    docstring)."""
    runner = synthetic_runner(seed, train_runs, duration_s, DEFAULT_FEATURES)
    train = runner("I", None)
    rows, tested = [], {}
    for kind in TEST_KINDS:
        runs = []
        for r in range(test_runs):
            tl = test_timeline(duration_s, kind)
            done = run_synthetic(seed, f"test/{kind}/{r}", tl, duration_s)
            runs.append((from_run(done.observations, tl, DEFAULT_FEATURES, run=r), tl))
        test, timeline = _shifted(runs, duration_s)
        tested[kind] = test.summary()
        for fname, names in FEATURE_SETS.items():
            tr, te = _columns(train, names), _columns(test, names)
            for method in METHODS:
                for label, cost in COSTS.items():
                    tree = CostSensitiveTree(names, cost, method, random_state=seed)
                    tree.fit(tr.x, tr.y)
                    row = {"test": kind, "features": fname, "method": method, "cost": label}
                    rows.append({**row, **score_tree(tree, te, timeline)})
    return {"train": train.summary(), "test": tested, "rows": rows}


def _columns(d: Dataset, names: tuple[str, ...]) -> Dataset:
    cols = [d.features.index(n) for n in names]
    return Dataset(names, d.x[:, cols], d.y, d.time_s, d.run, d.source)


def _interference_rt(run: SyntheticRun) -> float:
    """Mean response time over the intervals labelled I (interference steady)."""
    d = from_run(run.observations, run.timeline, PAPER_FEATURES)
    rt = d.x[:, PAPER_FEATURES.index("rt_s")]
    return float(np.nanmean(rt[d.y == I]))


def bootstrap_study(
    seed: int = 2, runs: int = 6, test_runs: int = 3, duration_s: float = 3600.0
) -> dict[str, object]:
    """The three phases, then each phase's tree driving IC2 on held-out runs (module
    docstring)."""
    features = DEFAULT_FEATURES
    result = bootstrap(
        synthetic_runner(seed, runs, duration_s, features),
        lambda: CostSensitiveTree(features, CostMatrix(), "weights", random_state=seed),
        seed,
    )
    from quell.studies.ic2.runs import ic2_params

    timelines = [test_timeline(duration_s) for _ in range(test_runs)]
    off = [run_synthetic(seed, f"held-out/{r}", tl, duration_s) for r, tl in enumerate(timelines)]
    rt_off = statistics.mean(_interference_rt(r) for r in off)
    phases = []
    for ph in result.phases:
        on = [
            run_synthetic(
                seed, f"held-out/{r}", tl, duration_s, Ic2Policy(ph.detector, ic2_params())
            )
            for r, tl in enumerate(timelines)
        ]
        detect, clear, missed = [], [], 0
        for run in on:
            d, dm, c, _ = latencies(run.timeline, run.switches)
            detect += d
            clear += c
            missed += dm
        rt_on = statistics.mean(_interference_rt(r) for r in on)
        phases.append(
            {
                "phase": ph.phase,
                "trained_on": ph.trained_on.summary(),
                "reconfigurations": sum(len(r.switches) for r in on),
                "onsets": sum(len(r.timeline.union()) for r in on),
                "detect_missed": missed,
                "detect_latency_s": median_s(detect),
                "clear_latency_s": median_s(clear),
                "interference_rt_s": round(rt_on, 4),
                "rt_change_pct": round(100 * (rt_on - rt_off) / rt_off, 1),
            }
        )
    return {"ic2_off_interference_rt_s": round(rt_off, 4), "phases": phases}


if __name__ == "__main__":
    print(json.dumps({"cost_ablation": cost_ablation(), "bootstrap": bootstrap_study()}, indent=1))

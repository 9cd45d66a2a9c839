"""IC2 detector cost per instance-interval (goal: <= 50 µs for features + verdict).

A tree is trained on synthetic IC2-off runs (8 one-hour runs, every tenant feature, the
paper's 5:1:10 costs), written as a bundle and read back; then 20,000 synthetic observations
are classified one at a time as the policy does: ``feature_row`` + ``predict_one``. Peers, in
the same run on the same observations: a trivial feature read (the three fields the paper's
attributes come from, into a tuple), and scikit-learn's own ``predict`` on one row (what
predicting through the library would cost per call) and on all rows at once (per row). Last,
the ``ic2`` policy's decision on a snapshot of 1,000 instances, per instance (state machine,
clean medians and detail included) against the round-robin policy's on the same snapshot."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quell.core.observation import Observation, Snapshot
from quell.core.rng import component_rng
from quell.detect.bundle import DetectorMeta, build_detector_bundle, load_detector
from quell.detect.features import DEFAULT_FEATURES, feature_row
from quell.detect.tree import CostMatrix, CostSensitiveTree
from quell.policy import PolicyContext, policy_class
from quell.policy.ic2 import Ic2Policy
from quell.studies.ic2.runs import BASELINE, ic2_params, synthetic_runner
from quell.studies.ic2.synthetic import SyntheticServer, periodic_timeline

N = 20_000
REPEATS = 5
FLEET = 1_000


def _observations() -> list[Observation]:
    server = SyntheticServer(component_rng(9, "bench"), periodic_timeline(N * 5.0), BASELINE)
    return [server.observe(5.0 * k, 5.0) for k in range(1, N + 1)]


def _best_us(fn: Callable[[], object], count: int) -> float:
    """Median over REPEATS of the time per item, in µs."""
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) / count * 1e6)
    return statistics.median(times)


def run() -> dict:
    from sklearn.tree import DecisionTreeClassifier

    train = synthetic_runner(1, 8, 3600.0, DEFAULT_FEATURES)("I", None)
    tree = CostSensitiveTree(DEFAULT_FEATURES, CostMatrix(), "weights").fit(train.x, train.y)
    meta = DetectorMeta(workload="bench", environment="synthetic", created="bench")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.json"
        build_detector_bundle(tree, meta).save(path)
        size = path.stat().st_size
        t0 = time.perf_counter()
        det = load_detector(path).detector
        load_ms = (time.perf_counter() - t0) * 1e3
    obs = _observations()
    names = det.features

    def ours() -> None:
        for o in obs:
            det.predict_one(feature_row(o, names))

    def trivial() -> None:
        read = []
        for o in obs:
            read.append((o.mean_rt_seconds, o.throughput_rps, o.cpu_util))

    x = np.array([feature_row(o, names) for o in obs])
    sk = DecisionTreeClassifier(criterion="entropy", max_depth=6, min_samples_leaf=10)
    sk.fit(train.x, train.y, sample_weight=tree.sample_weights(train.y))
    rows = [x[k : k + 1] for k in range(2000)]

    def sk_one() -> None:
        for r in rows:
            sk.predict(r)

    def sk_all() -> None:
        sk.predict(x)

    ours_us = _best_us(ours, N)
    trivial_us = _best_us(trivial, N)
    sk_one_us = _best_us(sk_one, len(rows))
    sk_all_us = _best_us(sk_all, N)

    fleet = Snapshot(
        5.0,
        "bench",
        {
            f"i{k}": Observation(**{**obs[k].to_dict(), "instance_id": f"i{k}"})
            for k in range(FLEET)
        },
    )
    policy = Ic2Policy(det, ic2_params())
    rr = policy_class("rr").build({}, PolicyContext(interval_s=5.0, initial_instances={}))
    policy.decide(fleet)
    rr.decide(fleet)
    ic2_us = _best_us(lambda: policy.decide(fleet), FLEET)
    rr_us = _best_us(lambda: rr.decide(fleet), FLEET)
    return {
        "benchmark": "IC2 detector per instance-interval: features + verdict",
        "observations": N,
        "tree_nodes": len(det.tree_.children_left),
        "bundle_bytes": size,
        "bundle_load_ms": round(load_ms, 2),
        "features_and_verdict_us": round(ours_us, 2),
        "goal_us": 50.0,
        "goal_met": ours_us <= 50.0,
        "peer_trivial_read_us": round(trivial_us, 3),
        "peer_sklearn_predict_one_row_us": round(sk_one_us, 1),
        "peer_sklearn_predict_batch_per_row_us": round(sk_all_us, 3),
        "ratio_sklearn_one_row_over_ours": round(sk_one_us / ours_us, 1),
        "ic2_decide_per_instance_us": round(ic2_us, 2),
        "rr_decide_per_instance_us": round(rr_us, 2),
        "fleet": FLEET,
    }

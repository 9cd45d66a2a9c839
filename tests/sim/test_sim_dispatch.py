"""The load balancer: weighted round robin shares and smoothness, plain round robin, least
connections."""

from __future__ import annotations

import numpy as np

from quell.sim.core import EventCore


def _fleet(algorithm: str, weights: list[float], capacity: list[float]) -> EventCore:
    core = EventCore(algorithm)  # type: ignore[arg-type]
    for w, c in zip(weights, capacity, strict=True):
        core.add_instance(core.add_resource(c), weight=w)
    return core


def test_weighted_rr_shares_match_weights_and_are_smooth() -> None:
    weights = [1.0, 2.0, 5.0, 12.0]
    core = _fleet("weighted_rr", weights, [1e9] * 4)
    n = 20_000
    t = np.arange(n) * 1e-3
    rec = core.run(30.0, t, np.ones(n))
    order = np.argsort(rec.start_s, kind="stable")
    inst = rec.instance[order]
    share = np.asarray(weights) / sum(weights)
    counts = np.bincount(inst, minlength=4)
    assert np.all(np.abs(counts - n * share) <= 1)
    # every prefix of the sequence stays within 2 requests of the ideal share (smooth WRR)
    running = np.cumsum(np.eye(4, dtype=np.int64)[inst], axis=0)
    ideal = np.arange(1, n + 1)[:, None] * share[None, :]
    assert np.abs(running - ideal).max() <= 2.0


def test_weight_change_moves_share() -> None:
    core = _fleet("weighted_rr", [100.0, 100.0], [1e9, 1e9])
    core.run(10.0, np.arange(1000) * 1e-2, np.ones(1000))
    core.set_weight(1, 300.0)
    rec = core.run(20.0, 10.0 + np.arange(4000) * 1e-3, np.ones(4000))
    counts = np.bincount(rec.instance, minlength=2)
    assert abs(counts[1] / counts.sum() - 0.75) < 0.01
    core.set_weight(0, 0.0)
    rec = core.run(30.0, 20.0 + np.arange(100) * 1e-3, np.ones(100))
    assert set(rec.instance.tolist()) == {1}


def test_plain_rr_ignores_weights() -> None:
    core = _fleet("plain_rr", [1.0, 9.0], [1e9, 1e9])
    rec = core.run(10.0, np.arange(1000) * 1e-3, np.ones(1000))
    assert np.bincount(rec.instance).tolist() == [500, 500]


def test_leastconn_sends_less_to_the_slow_instance() -> None:
    # equal weights; instance 1 is 10x slower, so it holds connections longer and gets fewer
    core = _fleet("leastconn", [100.0, 100.0], [10.0, 1.0])
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1 / 5.0, 20_000))
    rec = core.run(float(t[-1]) + 1e6, t, rng.exponential(1.0, t.size))
    counts = np.bincount(rec.instance, minlength=2)
    assert counts[0] > 3 * counts[1]


def test_no_eligible_server_refuses() -> None:
    core = _fleet("weighted_rr", [100.0], [1.0])
    core.set_eligible(0, False)
    rec = core.run(1.0, np.array([0.5]), np.ones(1))
    assert rec.instance.tolist() == [-1] and rec.rt_s.tolist() == [-1.0]

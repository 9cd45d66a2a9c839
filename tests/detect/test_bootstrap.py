"""The three-phase bootstrap over an injected runner: what each phase is run with and what
each tree is trained on."""

from __future__ import annotations

import numpy as np

from quell.detect.dataset import Dataset, bootstrap, half_and_half
from quell.detect.features import PAPER_FEATURES
from quell.detect.tree import CostSensitiveTree


def _data(n: int, source: str, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.normal(0.0, 1.0, (n, 3)) + y[:, None]
    return Dataset(PAPER_FEATURES, x, y, np.arange(n) * 5.0, np.zeros(n, dtype=np.int64), source)


def test_each_phase_runs_with_the_last_phases_tree_and_trains_on_the_papers_mix() -> None:
    calls: list[tuple[str, CostSensitiveTree | None]] = []
    sizes = {"I": 400, "II": 240, "III": 300}

    def runner(phase: str, tree: CostSensitiveTree | None) -> Dataset:
        calls.append((phase, tree))
        return _data(sizes[phase], f"phase {phase}", len(calls))

    out = bootstrap(runner, lambda: CostSensitiveTree(PAPER_FEATURES), seed=3)  # type: ignore[arg-type]
    assert [p for p, _ in calls] == ["I", "II", "III"]
    assert calls[0][1] is None  # phase I: IC2 off
    assert calls[1][1] is out.phases[0].detector
    assert calls[2][1] is out.phases[1].detector
    assert out.detector is out.phases[2].detector
    one, two, three = out.phases
    assert len(one.trained_on) == 400 and one.trained_on is one.collected
    # phase II: half the smaller phase's rows from each, 120 + 120
    assert len(two.trained_on) == 240
    assert two.trained_on.source == "half of (phase I) + half of (phase II)"
    assert sorted(set(two.trained_on.run.tolist())) == [0, 1]
    assert (two.trained_on.run == 0).sum() == (two.trained_on.run == 1).sum() == 120
    assert three.trained_on is three.collected and len(three.trained_on) == 300
    prov = out.provenance()
    assert [p["phase"] for p in prov] == ["I", "II", "III"]
    assert prov[1]["trained_on"]["samples"] == 240  # type: ignore[index]


def test_half_and_half_draws_without_replacement_in_order() -> None:
    a, b = _data(10, "a", 1), _data(7, "b", 2)
    mix = half_and_half(a, b, seed=0)
    assert len(mix) == 6
    ta = mix.time_s[mix.run == 0]
    assert len(set(ta.tolist())) == 3 and (np.diff(ta) > 0).all()


def test_the_final_tree_may_learn_from_every_phase() -> None:
    sizes = {"I": 400, "II": 240, "III": 300}
    data = {p: _data(n, f"phase {p}", k) for k, (p, n) in enumerate(sizes.items())}

    def runner(phase: str, tree: CostSensitiveTree | None) -> Dataset:
        return data[phase]

    make = lambda: CostSensitiveTree(PAPER_FEATURES)  # noqa: E731
    paper = bootstrap(runner, make, seed=3)  # type: ignore[arg-type]
    out = bootstrap(runner, make, seed=3, final_training="all_phases")  # type: ignore[arg-type]
    one, two, three = out.phases
    # phases I and II as the paper's; III learns from all 940 collected rows, in phase order
    assert one.detector.tree_ == paper.phases[0].detector.tree_
    assert two.detector.tree_ == paper.phases[1].detector.tree_
    assert three.collected is data["III"] and len(three.trained_on) == 940
    assert three.trained_on.source == "phase I + phase II + phase III"
    assert np.array_equal(three.trained_on.x[400:640], data["II"].x)
    assert sorted(set(three.trained_on.run.tolist())) == [0, 1, 2]
    assert out.detector.tree_ != paper.detector.tree_

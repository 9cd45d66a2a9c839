"""Arrival processes against their closed forms (seeded; tolerances stated per test)."""

from __future__ import annotations

import numpy as np
import pytest

from quell.core.rng import component_rng
from quell.workload.arrival import Deterministic, Poisson, RateSchedule


def test_poisson_counts_and_gaps() -> None:
    """Rate within 1 % over 200k arrivals; gaps exponential (CV 1 within 2 %)."""
    t = Poisson(100.0).times(2000.0, component_rng(1, "t"))
    assert t.size / 2000.0 == pytest.approx(100.0, rel=0.01)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)
    assert np.all(gaps >= 0) and t[0] >= 0 and t[-1] < 2000.0


def test_deterministic_is_exact() -> None:
    t = Deterministic(4.0).times(2.0, component_rng(1, "t"))
    assert t.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]


def test_rate_steps_follow_the_schedule() -> None:
    """Counts per step within 3 % of rate × length."""
    sched = RateSchedule(at_s=(0.0, 100.0), rate_rps=(50.0, 200.0))
    t = sched.times(200.0, component_rng(2, "t"))
    assert (t < 100).sum() == pytest.approx(5000, rel=0.03)
    assert (t >= 100).sum() == pytest.approx(20000, rel=0.03)


def test_ramp_matches_the_integral_of_the_rate() -> None:
    """A linear ramp 0 → 400/s over 100 s: N(t) ≈ 2 t², within 3 % at every quarter."""
    sched = RateSchedule(at_s=(0.0, 100.0), rate_rps=(0.0, 400.0), ramp=True)
    t = sched.times(100.0, component_rng(3, "t"))
    for q in (25.0, 50.0, 75.0, 100.0):
        assert (t < q).sum() == pytest.approx(2.0 * q * q, rel=0.03)
    assert np.all(np.diff(t) >= 0)


def test_same_seed_same_schedule_and_streams_are_independent() -> None:
    a = Poisson(10.0).times(100.0, component_rng(5, "x"))
    b = Poisson(10.0).times(100.0, component_rng(5, "x"))
    c = Poisson(10.0).times(100.0, component_rng(5, "y"))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)

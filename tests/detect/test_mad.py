"""Eq. 1 on windows computed by hand, the constant C, missing values and the streaming form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.detect.mad import C_GAUSS_3SIGMA, MadRule, mad_flag, mad_outliers
from quell.errors import InputError


def test_the_constant_is_three_gaussian_sigmas() -> None:
    # MAD of N(0, σ²) is σ Φ⁻¹(3/4) = 0.6744897...σ, so C × MAD = 3σ
    assert pytest.approx(3 / 0.6744897501960817, rel=1e-12) == C_GAUSS_3SIGMA
    assert pytest.approx(4.4478, abs=1e-4) == C_GAUSS_3SIGMA


def test_a_hand_computed_window() -> None:
    # window 1 2 3 4 100: median 3, |x - 3| = 2 1 0 1 97, MAD = 1
    w = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    assert mad_flag(w, 4.4478)  # 97 > 4.45
    # window 1 2 3 4 7: |7 - 3| = 4, MAD = 1: 4 > 3.9 but not > 4.4478
    w = np.array([1.0, 2.0, 3.0, 4.0, 7.0])
    assert mad_flag(w, 3.9) and not mad_flag(w, C_GAUSS_3SIGMA)


def test_rolling_windows_flag_the_jump_and_only_once_full() -> None:
    x = np.array([10.0, 11.0, 9.0, 10.0, 30.0, 10.0, 11.0])
    got = mad_outliers(x, window_n=4)
    # index 4: window 9 10 30 ... = [11, 9, 10, 30]: median 10.5, deviations .5 1.5 .5 19.5,
    # MAD 1.0 → 19.5 > 4.45; index 5: [9, 10, 30, 10]: median 10, MAD 0.5, |10-10| = 0
    assert got.tolist() == [False, False, False, False, True, False, False]


def test_zero_mad_flags_any_departure_as_eq_1_says() -> None:
    assert mad_outliers(np.array([5.0, 5.0, 5.0, 5.1]), 4).tolist() == [False] * 3 + [True]
    assert mad_outliers(np.array([5.0, 5.0, 5.0, 5.0]), 4).tolist() == [False] * 4


def test_missing_values_are_neither_judged_nor_counted() -> None:
    x = np.array([10.0, math.nan, 11.0, 9.0, math.nan, 30.0])
    # the measured values 10 11 9 30: the window of 4 ends at 30
    assert mad_outliers(x, 4).tolist() == [False, False, False, False, False, True]
    rule = MadRule(4)
    assert [rule.update(v) for v in [10.0, None, 11.0, 9.0, math.nan, 30.0]] == [
        False,
        False,
        False,
        False,
        False,
        True,
    ]


def test_the_streaming_rule_agrees_with_the_batch_one() -> None:
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 0.3, 500)
    x[rng.choice(500, 10, replace=False)] *= 5
    rule = MadRule(20)
    assert [rule.update(float(v)) for v in x] == mad_outliers(x, 20).tolist()


def test_gaussian_noise_is_flagged_at_about_the_three_sigma_rate() -> None:
    rng = np.random.default_rng(7)
    flags = mad_outliers(rng.normal(0.0, 1.0, 40_000), window_n=201)
    # two-sided 3σ: 0.27 %; the window's MAD is itself a noisy estimate, so a little more
    assert 0.0015 < flags[200:].mean() < 0.0045


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(InputError) as info:
        MadRule(2, c=-1.0)
    assert "window_n" in str(info.value) and "positive" in str(info.value)

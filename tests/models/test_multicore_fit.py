"""Estimation (Section 4.3) on measurements made from a known model: μ1 and p come back
exactly from noise-free utilisations, μ2 from noisy mean response times within its reported
uncertainty."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.core.rng import component_rng
from quell.errors import InputError
from quell.models.multicore import MulticoreModel
from quell.models.multicore_fit import MulticoreEstimator, RatePoint

TRUE = {"mu1": 8000.0, "mu2": 6000.0, "p": 0.4}
RATES = (500.0, 1500.0, 2500.0, 3500.0, 4500.0, 5500.0)


def synthetic_points(noise: bool, seed: int = 3, n_resp: int = 20_000) -> list[RatePoint]:
    model = MulticoreModel(2, 1, TRUE["mu1"], TRUE["mu2"], TRUE["p"], 256)
    rng = component_rng(seed, "test/fit")
    points = []
    for pr in model.predict(RATES):
        sd = pr.mean_response_s  # exponential-like spread
        rt = pr.mean_response_s + (rng.normal(0, sd / math.sqrt(n_resp)) if noise else 0.0)
        points.append(
            RatePoint(
                rate_rps=pr.rate_rps,
                throughput_rps=pr.throughput_rps,
                mean_response_s=rt,
                response_sd_s=sd,
                responses=n_resp,
                util_per_core=pr.util_per_core,
                softirq_per_core=(pr.throughput_rps / TRUE["mu1"], 0.0),
            )
        )
    return points


def test_noise_free_measurements_give_the_true_parameters() -> None:
    est = MulticoreEstimator(2, 1, 256).fit(synthetic_points(noise=False))
    assert est.mu1_ == pytest.approx(TRUE["mu1"], rel=1e-12)
    assert est.mu1_se_ == pytest.approx(0.0, abs=1e-6)
    assert est.p_ == pytest.approx(TRUE["p"], rel=1e-12)
    assert est.mu2_ == pytest.approx(TRUE["mu2"], rel=1e-6)
    assert est.chi2_ == pytest.approx(0.0, abs=1e-6)


def test_mu2_within_its_uncertainty_under_noise() -> None:
    misses = []
    for seed in range(5):
        est = MulticoreEstimator(2, 1, 256).fit(synthetic_points(noise=True, seed=seed))
        assert est.mu2_se_ > 0
        assert est.mu2_se_ < 0.05 * est.mu2_
        misses.append(abs(est.mu2_ - TRUE["mu2"]) / est.mu2_se_)
        assert not est.at_bound_
    assert max(misses) < 3.5  # no estimate more than 3.5 standard errors out
    assert np.mean(np.square(misses)) < 4  # and the errors are about the size claimed


def test_blind_prediction_uses_the_fitted_rates_on_all_cores() -> None:
    est = MulticoreEstimator(2, 1, 256).fit(synthetic_points(noise=False))
    spread = est.model(interrupt_cores=2)
    assert spread.p_effective == 1.0
    assert spread.mu1_rps == est.mu1_ and spread.mu2_rps == est.mu2_


def test_bad_measurements_are_rejected_with_every_problem() -> None:
    good = synthetic_points(noise=False)
    bad = RatePoint(100.0, 0.0, 0.0, 0.0, 0, (0.1,), (0.0,))
    with pytest.raises(InputError) as info:
        MulticoreEstimator(2, 1).fit([bad])
    text = str(info.value)
    assert "at least 2" in text and "2 cores" in text and "no successful responses" in text
    no_soft = [
        RatePoint(
            p.rate_rps, p.throughput_rps, p.mean_response_s, 1e-4, 10, p.util_per_core, (0.0, 0.0)
        )
        for p in good
    ]
    with pytest.raises(InputError, match="no soft-interrupt time"):
        MulticoreEstimator(2, 1).fit(no_soft)
    with pytest.raises(InputError, match="interrupt_cores"):
        MulticoreEstimator(2, 3).fit(good)

"""``service.size``: each distribution the schema allows is an object that states its mean and
variance (``tests/sim/test_sim_theory.py`` holds the draws and the queue to them); without
``mean_bytes`` each request keeps its own file's size as its mean; the schema refuses a key the
distribution does not take, naming it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from quell.errors import InputError
from quell.scenario import parse_scenario
from quell.scenario.service import ServiceModel
from quell.sim.service import (
    Deterministic,
    Empirical,
    Exponential,
    Lognormal,
    draw_sizes,
    size_distribution,
)

SCENARIO: dict[str, Any] = {
    "name": "sizes",
    "seed": 1,
    "duration_s": 10,
    "interval_s": 1,
    "hosts": [{"id": "h", "link_mbit": 100}],
    "instances": [{"id": "i", "host": "h"}],
    "files": [{"path": "/f", "size_bytes": 1000}],
    "workload": {"arrival": {"process": "poisson", "rate_rps": 5}, "requests": [{"path": "/f"}]},
}


@pytest.mark.parametrize(
    ("size", "kind", "mean", "variance"),
    [
        ({"distribution": "exponential", "mean_bytes": 2000}, Exponential, 2000, 2000**2),
        ({"distribution": "deterministic", "mean_bytes": 500}, Deterministic, 500, 0),
        (
            {"distribution": "lognormal", "mean_bytes": 1000, "sigma": 0.5},
            Lognormal,
            1000,
            1000**2 * (math.exp(0.25) - 1),
        ),
        ({"distribution": "empirical", "values_bytes": [100, 300]}, Empirical, 200, 100**2),
        ({"distribution": "exponential"}, Exponential, 1, 1),  # a spread around each file's
    ],
)
def test_each_distribution_of_the_schema_is_an_object_with_its_moments(
    size: dict[str, Any], kind: type, mean: float, variance: float
) -> None:
    model = ServiceModel.model_validate({"size": size}).size
    assert model is not None
    dist = size_distribution(model)
    assert isinstance(dist, kind)
    assert dist.mean == pytest.approx(mean, rel=1e-12)
    assert dist.variance == pytest.approx(variance, rel=1e-12)


def test_without_mean_bytes_each_request_keeps_its_own_size_as_the_mean() -> None:
    nominal = np.repeat(np.array([1_000, 50_000], dtype=np.int64), 100_000)
    for spec in ({"distribution": "exponential"}, {"distribution": "lognormal", "sigma": 0.8}):
        model = ServiceModel.model_validate({"size": spec}).size
        sizes = draw_sizes(model, nominal, seed=4)
        sd = math.sqrt(size_distribution(model).variance)  # of a draw of mean 1
        for v in (1_000, 50_000):
            mine = sizes[nominal == v]
            assert abs(mine.mean() - v) <= 3 * v * sd / math.sqrt(mine.size)
    deterministic = ServiceModel.model_validate({"size": {"distribution": "deterministic"}}).size
    assert draw_sizes(deterministic, nominal, seed=4).tolist() == nominal.tolist()


@pytest.mark.parametrize(
    ("size", "where"),
    [
        ({"distribution": "empirical"}, "service.size.empirical.values_bytes"),
        ({"distribution": "exponential", "sigma": 2}, "service.size.exponential.sigma"),
        (
            {"distribution": "empirical", "values_bytes": [1], "mean_bytes": 3},
            "service.size.empirical.mean_bytes",
        ),
    ],
)
def test_the_schema_refuses_what_a_distribution_does_not_take(
    size: dict[str, Any], where: str
) -> None:
    with pytest.raises(InputError) as bad:
        parse_scenario(SCENARIO | {"service": {"size": size}})
    assert [p.location for p in bad.value.problems] == [where]

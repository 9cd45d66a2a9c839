"""One shared check over every estimator (``quell.core.estimator``): each class of
``quell.models``, ``quell.detect``, ``quell.attribute`` and ``quell.probe`` with a ``fit`` has
a case here, and every check runs over every case. A new estimator without a case fails
``test_every_estimator_has_a_case``. Below them, an estimator with one flaw per check, which
that check must catch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from quell.attribute.features import RUNQ_WAIT
from quell.attribute.models import (
    BoostingBaseline,
    ExactGP,
    LinearBaseline,
    OtherCgroupWaitBaseline,
    RunQueueBaseline,
    SparseGP,
)
from quell.core.estimator import CHECKS, EstimatorCase, FitArgs, run_checks
from quell.detect.features import DEFAULT_FEATURES
from quell.detect.tree import CostMatrix, CostSensitiveTree
from quell.errors import EstimatorCheckError, InputError, Problem
from quell.models.capacity import CapacityModel, InterferenceModel, ResponseTimeModel
from quell.models.multicore import MulticoreModel
from quell.models.multicore_fit import MulticoreEstimator, RatePoint
from quell.probe.table import ProbeTable, TrainingLevel
from tests.prima.bundles import X0, A, B, C, K, rt


def _args(*args: Any, **kwargs: Any) -> FitArgs:
    return args, kwargs


# -- the cases -------------------------------------------------------------------------------
_U = np.repeat(np.arange(0.0, 101.0, 10.0), 9)
_SF = np.tile(np.arange(0.0, 8.01, 1.0), 11)


def _rtm_data(k: int) -> FitArgs:
    return _args(_U, _SF, np.array([rt(u, s) for u, s in zip(_U, _SF, strict=True)]) * (1 + k))


_TOTALS = np.arange(0.0, 121.0, 5.0)


def _im_data(k: int) -> FitArgs:
    return _args(_TOTALS, np.maximum(0.0, K * (_TOTALS - X0 - 20.0 * k)))


_CAPACITY_PARAMS = {
    "rtm": ResponseTimeModel().fit(*_rtm_data(0)[0]),
    "im": InterferenceModel(resolution_pct=5.0).fit(*_im_data(0)[0]),
    "target_rt_s": A + 50 * B + C * 2,
    "u_step_pct": 0.5,
}


def _multicore_points(k: int) -> FitArgs:
    mu1, mu2, p = (8000.0, 6000.0, 0.4) if k == 0 else (9000.0, 5000.0, 0.3)
    model = MulticoreModel(2, 1, mu1, mu2, p, 256)
    points = [
        RatePoint(
            rate_rps=pr.rate_rps,
            throughput_rps=pr.throughput_rps,
            mean_response_s=pr.mean_response_s,
            response_sd_s=pr.mean_response_s,
            responses=20_000,
            util_per_core=pr.util_per_core,
            softirq_per_core=(pr.throughput_rps / mu1, 0.0),
        )
        for pr in model.predict((500.0, 1500.0, 2500.0, 3500.0, 4500.0))
    ]
    return _args(points)


def _tree_data(k: int) -> FitArgs:
    rng = np.random.default_rng(20 + k)
    n = 300
    y = rng.integers(0, 3, n)
    x = rng.normal(0.0, 1.0, (n, len(DEFAULT_FEATURES))) + y[:, None] * (1.0 + k)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[:, :3] = np.abs(x[:, :3]) + y[:, None]  # the core features are measured in every row
    return _args(x, y)


def _levels(k: int) -> FitArgs:
    return _args(
        [
            TrainingLevel(u, tuple(0.08 + 0.0004 * u * (1 + k) + d for d in (-1e-4, 0.0, 1e-4)))
            for u in range(10, 100, 10)
        ]
    )


_REQUEST_FEATURES = ("cpu_seconds", RUNQ_WAIT, "other_cgroup", "runq_wait_other_cgroup_seconds")


def _requests(k: int, n: int = 60) -> FitArgs:
    rng = np.random.default_rng(40 + k)
    x = rng.exponential(1e-3, (n, len(_REQUEST_FEATURES)))
    y = 0.7 * x[:, 1] + 0.2 * x[:, 0] * (1 + k) + rng.normal(0.0, 1e-5, n)
    return _args(x, y)


def _excess(est: Any) -> Any:
    x = _requests(1, 40)[0][0] * 1.3
    return est.predict(x)


_BAD_XY = (
    ("x not a matrix", _args(np.ones(5), np.ones(5))),
    ("x with NaN", _args(np.full((5, 4), np.nan), np.ones(5))),
    ("y one short", _args(np.ones((5, 4)), np.ones(4))),
)

CASES: dict[str, EstimatorCase] = {
    "ResponseTimeModel": EstimatorCase(
        "ResponseTimeModel",
        ResponseTimeModel,
        _rtm_data,
        lambda m: m.predict(np.array([5.0, 55.0, 130.0]), np.array([0.5, 3.3, 9.0])),
        bad=(
            ("lengths differ", _args([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0], [1.0] * 4)),
            ("3 points", _args([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [1.0] * 3)),
            ("NaN", _args([1.0, np.nan, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0], [1.0] * 4)),
            ("R ≤ 0", _args([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 1.0, 1.0])),
            ("no SF span", _args([1.0, 2.0, 3.0, 4.0], [1.0] * 4, [1.0] * 4)),
        ),
    ),
    "InterferenceModel": EstimatorCase(
        "InterferenceModel",
        InterferenceModel,
        _im_data,
        lambda m: (m.predict(np.array([10.0, 47.0, 99.0, 150.0])), m.inverse(np.array([0.5]), 0.0)),
        params={"resolution_pct": 5.0},
        bad=(
            ("lengths differ", _args([1.0, 2.0], [0.0])),
            ("NaN", _args([1.0, np.nan], [0.0, 1.0])),
            ("U without its level", _args([1.0, 2.0], [0.0, 1.0], util_pct=[1.0, 1.0])),
            ("one total", _args([10.0, 10.0], [0.0, 1.0])),
        ),
    ),
    "CapacityModel": EstimatorCase(
        "CapacityModel",
        CapacityModel,
        lambda k: _args(),
        lambda m: m.capacity_for(np.array([0.0, 20.0, 45.0, 80.0])),
        params=_CAPACITY_PARAMS,
        bad_params=(
            ("R_th ≤ 0", {**_CAPACITY_PARAMS, "target_rt_s": 0.0}),
            ("U step ≤ 0", {**_CAPACITY_PARAMS, "u_step_pct": -0.5}),
            ("U_int step NaN", {**_CAPACITY_PARAMS, "u_int_step_pct": float("nan")}),
            ("RTM not fitted", {**_CAPACITY_PARAMS, "rtm": ResponseTimeModel()}),
        ),
        data_sets=1,
    ),
    "MulticoreEstimator": EstimatorCase(
        "MulticoreEstimator",
        MulticoreEstimator,
        _multicore_points,
        lambda m: (m.mu1_, m.mu2_, m.p_),
        params={"cores": 2, "interrupt_cores": 1, "capacity": 256},
        bad=(
            ("one rate", _args(_multicore_points(0)[0][0][:1])),
            (
                "a point of one core",
                _args([RatePoint(100.0, 100.0, 0.01, 0.01, 10, (0.1,), (0.0,))] * 2),
            ),
        ),
    ),
    "CostSensitiveTree": EstimatorCase(
        "CostSensitiveTree",
        CostSensitiveTree,
        _tree_data,
        lambda m: (m.predict(_tree_data(1)[0][0]), m.predict_proba(_tree_data(1)[0][0])),
        params={"cost": CostMatrix(), "max_depth": 4, "random_state": 3},
        bad=(
            ("one feature short", _args(np.ones((20, len(DEFAULT_FEATURES) - 1)), np.zeros(20))),
            ("labels short", _args(np.ones((20, len(DEFAULT_FEATURES))), np.zeros(19))),
            ("infinite", _args(np.full((20, len(DEFAULT_FEATURES)), np.inf), np.zeros(20))),
            ("class 7", _args(np.ones((20, len(DEFAULT_FEATURES))), np.full(20, 7))),
        ),
    ),
    "ProbeTable": EstimatorCase(
        "ProbeTable",
        ProbeTable,
        _levels,
        lambda m: (m.predict(np.array([0.0, 35.0, 99.0])), m.spread_levels()),
        params={"rel_width": 0.05},
        bad=(
            ("one level", _args([TrainingLevel(10.0, (0.1, 0.1))])),
            ("no samples", _args([TrainingLevel(10.0, ()), TrainingLevel(20.0, (0.1,))])),
            ("time ≤ 0", _args([TrainingLevel(10.0, (0.0,)), TrainingLevel(20.0, (0.1,))])),
        ),
    ),
    "SparseGP": EstimatorCase(
        "SparseGP",
        SparseGP,
        _requests,
        _excess,
        params={"n_inducing": 8, "max_iters": 3, "seed": 2},
        bad=_BAD_XY,
    ),
    "ExactGP": EstimatorCase(
        "ExactGP", ExactGP, _requests, _excess, params={"max_points": 40, "seed": 2}, bad=_BAD_XY
    ),
    "RunQueueBaseline": EstimatorCase(
        "RunQueueBaseline",
        RunQueueBaseline,
        _requests,
        _excess,
        params={"features": _REQUEST_FEATURES},
        bad=_BAD_XY,
        data_sets=1,
    ),
    "OtherCgroupWaitBaseline": EstimatorCase(
        "OtherCgroupWaitBaseline",
        OtherCgroupWaitBaseline,
        _requests,
        _excess,
        params={"features": _REQUEST_FEATURES},
        bad=_BAD_XY,
        data_sets=1,
    ),
    "LinearBaseline": EstimatorCase(
        "LinearBaseline", LinearBaseline, _requests, _excess, bad=_BAD_XY
    ),
    "BoostingBaseline": EstimatorCase(
        "BoostingBaseline",
        BoostingBaseline,
        _requests,
        _excess,
        params={"seed": 1, "max_iter": 20},
        bad=_BAD_XY,
    ),
}


def _estimator_classes() -> set[str]:
    found = set()
    for name in ("quell.models", "quell.detect", "quell.attribute", "quell.probe"):
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            module = importlib.import_module(info.name)
            for attr, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and obj.__module__ == module.__name__
                    and callable(getattr(obj, "fit", None))
                    and not getattr(obj, "_is_protocol", False)
                ):
                    found.add(attr)
    return found


def test_every_estimator_has_a_case() -> None:
    assert _estimator_classes() == set(CASES)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("case", CASES.values(), ids=lambda c: c.name)
def test_estimator_keeps_the_rule(
    case: EstimatorCase, check: Callable[[EstimatorCase], str | None]
) -> None:
    outcome = check(case)
    # Refitting an estimator that learns from no data (CapacityModel: from its parameters; the
    # run-queue baselines: nothing) is checked against one fit, and says so.
    assert outcome is None or outcome.startswith("fit takes no data"), outcome


def test_run_checks_reports_each_check() -> None:
    results = run_checks(CASES["ProbeTable"])
    assert [r.check for r in results] == [c.__name__ for c in CHECKS]
    assert {r.outcome for r in results} == {"passed"}


# -- each check catches the flaw it guards against -------------------------------------------
class _Mean:
    """A sound estimator: the mean of ``y``, plus ``shift``."""

    def __init__(self, shift: float = 0.0, seed: int = 0) -> None:
        self.shift = shift
        self.seed = seed

    def _check(self, y: Any) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
            raise InputError("mean", [Problem("y", "needs finite values")])
        return y

    def fit(self, y: Any) -> Any:
        y = self._check(y)
        self.mean_ = float(y.mean()) + self.shift
        return self

    def predict(self) -> float:
        return self.mean_


class _Copies(_Mean):
    def __init__(self, shift: float = 0.0, seed: int = 0) -> None:
        super().__init__(float(shift) + 0.0, seed)
        self.shift = abs(shift)  # stored as changed


class _NoUnderscore(_Mean):
    def fit(self, y: Any) -> Any:
        super().fit(y)
        self.mean = self.mean_
        return self


class _ReturnsNone(_Mean):
    def fit(self, y: Any) -> Any:
        super().fit(y)
        return None


class _Unseeded(_Mean):
    draws = iter(range(1_000_000))

    def fit(self, y: Any) -> Any:
        super().fit(y)
        self.noise_ = next(self.draws)
        return self


class _Remembers(_Mean):
    def fit(self, y: Any) -> Any:
        if hasattr(self, "mean_"):
            self.previous_ = self.mean_
        return super().fit(y)


class _ValueError(_Mean):
    def _check(self, y: Any) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if not np.all(np.isfinite(y)):
            raise ValueError("NaN")
        return y


class _Spoils(_Mean):
    def fit(self, y: Any) -> Any:
        self.mean_ = float("nan")
        return super().fit(y)


def _case(cls: type) -> EstimatorCase:
    return EstimatorCase(
        cls.__name__,
        cls,
        lambda k: _args(np.arange(5.0) + 10 * k),
        lambda m: m.predict(),
        params={"shift": -1.5},
        bad=(("NaN", _args([1.0, np.nan])),),
    )


def test_a_sound_estimator_passes_every_check() -> None:
    assert {r.outcome for r in run_checks(_case(_Mean))} == {"passed"}


@pytest.mark.parametrize(
    ("cls", "check", "found"),
    [
        (_Copies, "check_parameters_as_given", "shift: stored as 1.5, given -1.5"),
        (_NoUnderscore, "check_learned_state", "mean: learned by fit but its name has no"),
        (_ReturnsNone, "check_learned_state", "fit: returns NoneType"),
        (_Unseeded, "check_same_seed", "noise_: 0 against 1"),
        (_Remembers, "check_refit_forgets", "attribute previous_ only in one"),
        (_ValueError, "check_bad_input", "NaN: ValueError, not InputError"),
        (_Spoils, "check_bad_input", "NaN, after the refusal: prediction"),
    ],
)
def test_each_check_catches_its_flaw(cls: type, check: str, found: str) -> None:
    chosen = next(c for c in CHECKS if c.__name__ == check)
    with pytest.raises(EstimatorCheckError) as caught:
        chosen(_case(cls))
    assert caught.value.check == check
    assert found in str(caught.value)

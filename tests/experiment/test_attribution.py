"""Fitting the attribution model on runs (``quell.experiment.attribution``): which requests the
training set holds and with what labels, the calibrated interval, the provider floor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from quell.attribute.records import check_records
from quell.errors import InputError
from quell.experiment.attribution import split, training_set
from quell.report.records import Run
from tests.attribute.synth import schedule_records


def _run(seed: int, workers: int, run_seed: int, n: int = 400) -> Run:
    name = f"s{seed}-w{workers}-r{run_seed}"
    return Run(name, check_records(schedule_records(seed, n, workers, run_seed=run_seed), name))


def test_the_uncontended_requests_join_at_excess_zero_and_label_kinds_differ() -> None:
    clean, loaded = _run(1, 0, 0), _run(1, 2, 1)
    with_clean = training_set(clean, [loaded])
    assert len(with_clean.y) == 800
    np.testing.assert_array_equal(with_clean.y[:400], np.zeros(400))
    only = training_set(clean, [loaded], include_uncontended=False)
    np.testing.assert_array_equal(only.y, with_clean.y[400:])
    paired = training_set(clean, [loaded], "paired", include_uncontended=False)
    np.testing.assert_allclose(paired.y, loaded.records.wall_seconds - clean.records.wall_seconds)
    (agreement,) = only.agreement
    diff = only.y - paired.y
    assert agreement["n_paired"] == 400
    assert agreement["mae_seconds"] == pytest.approx(np.abs(diff).mean())
    assert only.features.names[-2:] == ("class=/php", "class=/static")


def test_no_contended_run_is_refused_and_the_split_is_seeded() -> None:
    with pytest.raises(InputError, match="no contended run"):
        training_set(_run(1, 0, 0), [], include_uncontended=False)
    clean_only = training_set(_run(1, 0, 0), [])  # a service load with no tenant: excess 0
    np.testing.assert_array_equal(clean_only.y, np.zeros(400))
    train, test = split(10, 0.2, 3)
    assert len(test) == 2 and sorted([*train, *test]) == list(range(10))
    np.testing.assert_array_equal(split(10, 0.2, 3)[1], test)


def test_the_interval_is_calibrated_on_training_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """fit_attribution calibrates on the training rows of the contended runs it is told are one
    group (here by kind), never on its held-out share or on held-out runs; the bundle keeps the
    scale and the class scales, and the held-out scores carry the uncalibrated GP beside."""
    from quell.experiment import attribution

    clean = _run(1, 0, 0)
    contended = [_run(1, w, r) for w, r in ((1, 1), (2, 2), (3, 3), (2, 4))]
    data = attribution.combine([training_set(clean, contended)])
    test_set = training_set(_run(2, 0, 9), [_run(2, 2, 9)], include_uncontended=False)
    seen: list[tuple[np.ndarray, np.ndarray, list[str]]] = []
    real = attribution.calibrate_by_group

    def spy(make, x, y, groups, names, **kw):  # type: ignore[no-untyped-def]
        seen.append((x, groups, list(names)))
        return real(make, x, y, groups, names, **kw)

    monkeypatch.setattr(attribution, "calibrate_by_group", spy)
    kinds = {r.name: ("a" if i < 2 else "b") for i, r in enumerate(contended)}
    settings = attribution.FitSettings(
        n_inducing=15, max_iters=15, exact_points=50, baselines=False
    )
    result = attribution.fit_attribution(
        data, settings, held_out=[("other", test_set)], calibration_groups=kinds
    )
    ((x, groups, names),) = seen
    train, _ = split(len(data.y), settings.holdout, settings.seed)
    np.testing.assert_array_equal(x, data.features.x[train])
    assert names == ["a", "b"]
    assert set(groups.tolist()) == {"a", "b", clean.name}  # the clean run: in every fold
    cal = result.model.data.calibration
    assert cal is not None and cal.method == "leave-one-group-out"
    assert result.calibration is not None and cal.scale == result.calibration.scale
    assert set(cal.class_scales) == {"/php", "/static"}
    assert [g.group for g in cal.groups] == ["a", "b"]
    scored = [s.model for s in result.held_out["other"]]
    assert scored == ["sparse_gp", "sparse_gp_uncalibrated"]
    by = {s.model: s for s in result.held_out["other"]}
    assert (
        by["sparse_gp"].mean_interval_width_seconds
        != by["sparse_gp_uncalibrated"].mean_interval_width_seconds
    )
    # the bundle's GP predicts the calibrated interval that was scored
    std = result.model.gp.predict(test_set.features.x).std_seconds
    assert std is not None
    width = float(np.mean(2 * 1.959963984540054 * std))
    assert width == pytest.approx(by["sparse_gp"].mean_interval_width_seconds, rel=1e-9)


def test_the_provider_floor_is_read_from_the_uncontended_runs_and_applied() -> None:
    """The bundle's floor is the 99.5 % quantile of the GP's predictions over every request of
    the uncontended training runs (and of no other); attributing a run gives no provider part at
    or below it and the prediction above it; without a quantile or an uncontended run, none."""
    from quell.attribute.apply import attribute
    from quell.experiment import attribution

    clean = _run(1, 0, 0)
    contended = [_run(1, 2, 1), _run(1, 3, 2)]
    data = attribution.combine([training_set(clean, contended)])
    settings = attribution.FitSettings(
        n_inducing=15, max_iters=15, exact_points=50, baselines=False, calibrate=False
    )
    model = attribution.fit_attribution(data, settings).model
    floor = model.data.floor
    assert floor is not None and floor.method == "uncontended-quantile"
    assert (floor.quantile, floor.requests, floor.runs) == (0.995, 400, [clean.name])
    predicted = model.gp.predict(data.features.x[:400]).mean_seconds  # the clean run's rows
    assert floor.seconds == pytest.approx(np.quantile(predicted, 0.995), rel=1e-12)
    assert floor.seconds > 0
    a = attribute(model, contended[0].records)
    above = a.excess_seconds > floor.seconds
    assert 0 < above.sum() < len(above)
    np.testing.assert_array_equal(a.provider_seconds[~above], 0.0)
    np.testing.assert_allclose(
        a.provider_seconds[above], np.clip(a.excess_seconds, 0, a.wall_seconds)[above]
    )
    np.testing.assert_array_equal(
        a.provider_seconds_without_floor, np.clip(a.excess_seconds, 0, a.wall_seconds)
    )
    none = attribution.fit_attribution(data, replace(settings, floor_quantile=None)).model
    assert none.data.floor is not None and none.data.floor.method == "none"
    no_clean = training_set(clean, contended, include_uncontended=False)
    assert attribution.fit_attribution(no_clean, settings).model.floor_seconds == 0.0

"""The attribution training set: which requests it holds and with what labels."""

from __future__ import annotations

import numpy as np
import pytest

from quell.attribute.records import check_records
from quell.errors import InputError
from quell.studies.attribution.pipeline import Run, split, training_set
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
        training_set(_run(1, 0, 0), [])
    train, test = split(10, 0.2, 3)
    assert len(test) == 2 and sorted([*train, *test]) == list(range(10))
    np.testing.assert_array_equal(split(10, 0.2, 3)[1], test)

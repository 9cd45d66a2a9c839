"""Labels: percentile matching and paired labels on constructed cases with exact excesses."""

from __future__ import annotations

import numpy as np
import pytest

from quell.attribute.labels import compare_labels, paired_labels, percentile_labels
from quell.errors import InputError


def test_percentile_matching_matches_rank_to_rank_within_each_class() -> None:
    u = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    u_cls = np.array(["a", "a", "a", "a", "b", "b"])
    c = np.array([5.0, 2.0, 15.0, 7.0, 16.0, 3.0, 30.0, 40.0])
    c_cls = np.array(["a", "a", "b", "a", "b", "a", "b", "b"])
    excess = percentile_labels(u, u_cls, c, c_cls)
    # Class a, as many on both sides: sorted 2, 3, 5, 7 against 1, 2, 3, 4.
    # Class b, 4 against 2: percentiles 12.5, 37.5, 62.5, 87.5 % fall on 10, 10, 20, 20.
    np.testing.assert_array_equal(excess, [2.0, 1.0, 5.0, 3.0, 6.0, 1.0, 10.0, 20.0])


def test_percentile_matching_of_a_run_against_itself_is_zero() -> None:
    rng = np.random.default_rng(3)
    lat = rng.exponential(1.0, 501)
    cls = rng.choice(np.array(["x", "y", "z"]), 501)
    np.testing.assert_array_equal(percentile_labels(lat, cls, lat, cls), np.zeros(501))


def test_a_class_never_seen_uncontended_is_refused() -> None:
    with pytest.raises(InputError, match="no uncontended request of class"):
        percentile_labels(np.ones(2), np.array(["a", "a"]), np.ones(1), np.array(["b"]))


def test_paired_labels_subtract_the_same_request_and_skip_what_does_not_pair() -> None:
    u_id = np.array([1, 2, 3, 4, -1, 7, 7])
    u = np.array([1.0, 2.0, 3.0, 4.0, 9.0, 1.0, 1.0])
    c_id = np.array([4, 1, 2, 3, -1, 5, 7])
    c = np.array([4.5, 5.0, 2.5, 3.5, 9.5, 1.0, 2.0])
    np.testing.assert_array_equal(
        paired_labels(u_id, u, c_id, c), [0.5, 4.0, 0.5, 0.5, np.nan, np.nan, np.nan]
    )


def test_percentile_and_paired_labels_differ_where_contention_reorders_requests() -> None:
    # Request 1 was the fastest uncontended and is the slowest contended: percentile matching
    # gives it the slowest uncontended latency (excess 1) and the others 1.5 each, while its own
    # excess was 4 and theirs 0.5.
    ids = np.array([1, 2, 3, 4])
    u = np.array([1.0, 2.0, 3.0, 4.0])
    c = np.array([5.0, 2.5, 3.5, 4.5])
    cls = np.array(["a"] * 4)
    pct = percentile_labels(u, cls, c, cls)
    par = paired_labels(ids, u, ids, c)
    np.testing.assert_array_equal(pct, [1.0, 1.5, 1.5, 1.5])
    np.testing.assert_array_equal(par, [4.0, 0.5, 0.5, 0.5])
    agreement = compare_labels(pct, par)
    assert agreement.n_paired == 4
    assert agreement.mean_difference_seconds == pytest.approx(0.0)
    assert agreement.mae_seconds == pytest.approx(1.5)
    assert agreement.correlation == pytest.approx(-1.0)


def test_without_reordering_the_two_label_kinds_agree_exactly() -> None:
    rng = np.random.default_rng(5)
    u = np.sort(rng.exponential(1.0, 200))
    c = u * 1.5 + 0.2  # order kept
    ids = np.arange(200)
    cls = np.array(["a"] * 200)
    agreement = compare_labels(percentile_labels(u, cls, c, cls), paired_labels(ids, u, ids, c))
    assert agreement.mae_seconds == pytest.approx(0.0, abs=1e-12)
    assert agreement.correlation == pytest.approx(1.0)

"""The oracle's closed forms against hand-computed cases: λ_max of one M/G/1-PS host, the
fewest hosts for a load, the capacity neighbours leave, its mean over intervals, and a whole
run of intervals whose capacities and load are known; every bad argument named."""

from __future__ import annotations

import numpy as np
import pytest

from quell.errors import InputError
from quell.models.oracle import (
    capacity_left,
    fewest_instances,
    interval_means,
    max_rate_rps,
    oracle,
)

LINK = 100e6 / 8.0
"""A 100 Mbit/s link."""
MB = 1e6


def test_max_rate_is_where_the_mean_response_time_reaches_the_target() -> None:
    # (C - S / R) / S = 12.5 - 1 / 0.16 = 6.25 req/s
    assert max_rate_rps(LINK, MB, 0.16) == pytest.approx(6.25)
    lam = 6.25
    assert (MB / LINK) / (1.0 - lam * MB / LINK) == pytest.approx(0.16)  # M/G/1-PS mean RT
    # a host whose idle service time already exceeds R_th carries nothing; NaN is no host
    assert max_rate_rps(np.array([5e6, np.nan]), MB, 0.16).tolist() == [0.0, 0.0]


def test_fewest_instances_take_the_largest_capacities_first() -> None:
    caps = np.tile([LINK, 7.5e6, LINK], (7, 1))  # λ_max: 6.25, 1.25, 6.25
    rate = np.array([0.0, 6.25, 6.26, 12.5, 13.0, 13.75, 14.0])
    count, short = fewest_instances(caps, rate, MB, 0.16)
    assert count.tolist() == [1, 1, 2, 2, 3, 3, 3]
    assert short.tolist() == [False] * 6 + [True]
    count, _ = fewest_instances(caps, rate, MB, 0.16, min_instances=2)
    assert count.tolist() == [2, 2, 2, 2, 3, 3, 3]


def test_neighbours_take_at_most_their_share_and_unlimited_streams_split_the_rest() -> None:
    taken = np.array([0.0, 3.75e6, 20e6, 0.0])
    streams = np.array([0.0, 0.0, 0.0, 3.0])
    left = capacity_left(LINK, taken, streams, 0.95)
    assert left.tolist() == pytest.approx([LINK, 8.75e6, 0.05 * LINK, LINK / 4])


def test_interval_means_average_a_step_function() -> None:
    # LINK on [0, 10), 8.75e6 on [10, 25), LINK again: [20, 30) averages 10.625e6
    times = np.array([0.0, 10.0, 25.0])
    values = np.array([LINK, 8.75e6, LINK])
    edges = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    means = interval_means(times, values, edges)
    assert means.tolist() == pytest.approx([LINK, 8.75e6, 10.625e6, LINK])


def test_an_oracle_interval_by_interval() -> None:
    # 10 req/s of 1 MB, R_th = 0.16 s, three hosts; λ_max 6.25 on a free link, 2.5 at
    # 8.75 MB/s, 4.375 at 10.625 MB/s: 2, 3 (6.25 + 2.5 + 2.5 ≥ 10), 2, 2 instances.
    edges = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    arrivals = np.arange(400) / 10.0
    cap = np.array(
        [
            [LINK, LINK, LINK],
            [8.75e6, 8.75e6, LINK],
            [10.625e6, 10.625e6, LINK],
            [LINK, LINK, LINK],
        ]
    )
    o = oracle(["h0", "h1", "h2"], edges, arrivals, MB, cap, 0.16)
    assert o.hosts == ("h0", "h1", "h2")
    assert o.rate_rps.tolist() == [10.0] * 4
    assert o.instances.tolist() == [2, 3, 2, 2]
    assert o.instance_seconds == 90.0
    assert not o.infeasible.any()
    assert o.to_dict() == {
        "instance_seconds": 90.0,
        "infeasible_intervals": 0,
        "mean_instances": 2.25,
        "max_instances": 3,
        "mean_size_bytes": MB,
    }
    # 30 req/s is more than all three carry (18.75 at best): every host, and infeasible
    short = oracle(["h0", "h1", "h2"], edges, np.arange(1200) / 30.0, MB, cap, 0.16)
    assert short.instances.tolist() == [3] * 4 and short.infeasible.all()


def test_every_bad_argument_is_named() -> None:
    edges = np.array([0.0, 10.0])
    with pytest.raises(InputError) as info:
        oracle(["h0"], edges, np.array([1.0]), 0.0, np.array([[LINK]]), -1.0)
    assert {p.location for p in info.value.problems} == {"mean_size_bytes", "target_rt_s"}
    with pytest.raises(InputError, match="capacity_bytes_per_s"):
        oracle(["h0", "h1"], edges, np.array([1.0]), MB, np.array([[LINK]]), 0.16)
    with pytest.raises(InputError, match="edges_s"):
        oracle(["h0"], np.array([0.0, 0.0]), np.array([1.0]), MB, np.array([[LINK]]), 0.16)
    with pytest.raises(InputError) as info:
        capacity_left(0.0, np.array([0.0]), np.array([0.0]), 1.5)
    assert {p.location for p in info.value.problems} == {"nominal_bytes_per_s", "max_taken_share"}
    with pytest.raises(InputError, match="times_s"):
        interval_means(np.array([1.0, 2.0]), np.array([1.0, 1.0]), edges)

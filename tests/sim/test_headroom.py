"""The oracle on a scenario: the capacity its neighbours leave on each host, interval by
interval, and the fewest instances for its load, worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from quell.errors import InputError
from quell.scenario.model import Scenario
from quell.sim.headroom import host_capacity, run_oracle
from tests.sim.build import LINK_BYTES_PER_S, build_scenario

LINK = LINK_BYTES_PER_S
MB = 1e6


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "duration_s": 40,
        "antagonists": [
            {"id": "n0", "kind": "iperf3", "host": "h0", "streams": 1, "bitrate_mbit": 30},
            {"id": "n1", "kind": "iperf3", "host": "h1", "streams": 1, "bitrate_mbit": 30},
        ],
        "events": [{"at_s": 10, "start": ["n0", "n1"]}, {"at_s": 25, "stop": ["n0", "n1"]}],
        "scaling": {"hosts": ["h1", "h2"]},
        "target": {"mean_rt_s": 0.16},
    }
    return build_scenario(
        n_hosts=4, rate_rps=10, size_bytes=1_000_000, arrival="deterministic", **(base | over)
    )


def test_a_scenario_interval_by_interval() -> None:
    # 10 req/s of 1 MB, R_th = 0.16 s; hosts h0 (initial), h1, h2 (h3 is not available).
    # [0, 10): all free, λ_max 6.25 each: 2 hosts. [10, 20): 30 Mbit/s gone on h0 and h1,
    # λ_max 8.75 - 6.25 = 2.5 there: 6.25 + 2.5 + 2.5 = 11.25 ≥ 10 needs all 3. [20, 25) still
    # taken, then free: mean C = 10.625 MB/s, λ_max 4.375: 6.25 + 4.375 ≥ 10: 2. [30, 40): 2.
    o = run_oracle(scenario())
    assert o.hosts == ("h0", "h1", "h2")
    assert o.rate_rps.tolist() == [10.0] * 4
    assert o.mean_size_bytes == MB
    assert o.capacity_bytes_per_s[:, 0].tolist() == pytest.approx([LINK, 8.75e6, 10.625e6, LINK])
    assert o.capacity_bytes_per_s[:, 2].tolist() == [LINK] * 4
    assert o.instances.tolist() == [2, 3, 2, 2]
    assert o.instance_seconds == 90.0
    assert not o.infeasible.any()


def test_unlimited_streams_leave_one_share_and_no_target_is_an_input_error() -> None:
    s = scenario(
        antagonists=[{"id": "n0", "kind": "iperf3", "host": "h0", "streams": 3}],
        events=[{"at_s": 10, "start": ["n0"]}],
    )
    assert host_capacity(s, ["h0"])[:, 0].tolist() == pytest.approx([LINK] + [LINK / 4] * 3)
    with pytest.raises(InputError, match=r"target\.mean_rt_s"):
        run_oracle(scenario(target=None))

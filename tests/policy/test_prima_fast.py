"""PRIMA's fast rule (``quell.policy.prima.fast``) on small built glances, against the synthetic
bundle whose capacities are known in closed form (``tests.prima.bundles``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.core.observation import BUSY_KEY, OLDEST_KEY, SERVED_UTIL_KEY, Observation, Snapshot
from quell.errors import InputError
from quell.policy.prima.fast import AGE_FACTOR, CUT_FRACTION, MIN_BUSY, Armed, FastRule
from quell.probe.severity import PROBE_KEY
from tests.prima.bundles import R_ISO0, R_ISO_SLOPE, capacity, linear_bundle, sf_of_total

R_TH = 0.03
U = 20.0
U_MAX0 = capacity(0.0, R_TH)  # 51.25 % behind no neighbour


def rule(u: float = U) -> FastRule:
    """The rule armed with three instances, each at ``u`` and planned with U_MAX0."""
    b = linear_bundle()
    r = FastRule(
        b.capacity_model(R_TH), b.capacity_model(2 * R_TH), b.probe_table, R_TH, min_room_pct=0.0
    )
    r.arm(
        Armed(
            ids=["a", "b", "c"],
            util_pct=np.full(3, u),
            u_max_pct=np.full(3, U_MAX0),
            weight=np.array([256, 256, 256]),
            probe_pct=np.zeros(3),
            total_util_pct=3 * u,
            planned_pct=3 * U_MAX0,
        )
    )
    return r


def glance(**extra: dict[str, float]) -> Snapshot:
    obs = {
        i: Observation(0.0, i, 1.0, requests=int(e.pop("requests", 3)), extra=e)
        for i, e in ((i, dict(extra.get(i, {}))) for i in ("a", "b", "c"))
    }
    return Snapshot(time_s=31.0, environment="t", instances=obs)


def probe_behind(u_int: float) -> float:
    """The probe time the bundle gives an instance at U behind a neighbour of ``u_int``."""
    return (R_ISO0 + R_ISO_SLOPE * U) * (1.0 + sf_of_total(U + u_int))


def served(rate_pct: float, busy_s: float) -> dict[str, float]:
    """A glance's reading of an instance served at ``rate_pct`` of its link while it served
    for ``busy_s`` of the 1 s glance."""
    return {SERVED_UTIL_KEY: rate_pct * busy_s, BUSY_KEY: busy_s}


def test_the_rate_served_while_busy_cuts_to_the_capacity_the_neighbour_left() -> None:
    r = rule()
    # a served at 20 % of its link for half the glance: a neighbour takes 80 %
    found = r.read(glance(a=served(20.0, 0.5), b=served(100.0, 0.3), c=served(100.0, 1.0)))
    assert found is not None and found.at.tolist() == [0]
    assert (found.by_served, found.by_probe) == (1, 0)
    u_new = float(r.model.capacity_for(np.array([80.0])).value[0])
    assert u_new == pytest.approx(capacity(80.0, R_TH), abs=0.5)  # 11.25 %
    assert found.u_max_pct.tolist() == [u_new]
    assert found.weight.tolist() == [math.floor(256 * u_new / U_MAX0)]
    assert found.taken_pct == pytest.approx(U_MAX0 - u_new)
    assert found.planned_pct == pytest.approx(2 * U_MAX0 + u_new)
    # one whose neighbour leaves 2 %: the capacity behind 98 %, at the model's edge
    r = rule()
    found = r.read(glance(b=served(2.0, 1.0)))
    left = float(r.model.capacity_for(np.array([98.0])).value[0])
    assert found is not None and found.at.tolist() == [1] and found.u_max_pct.tolist() == [left]
    assert found.weight.tolist() == [max(1, math.floor(256 * left / U_MAX0))]


def test_a_cut_sheds_only_the_load_the_others_have_room_for_within_twice_r_th() -> None:
    r = rule(85.0)
    room = float(r.relaxed.capacity_for(np.array([0.0])).value[0])  # clean, at 2 R_th
    assert room == pytest.approx(capacity(0.0, 2 * R_TH), abs=0.1)  # 88.75 %
    # each at 85 %: b and c have 2 x (room - 85) to spare within 2 R_th, so a sheds that much
    # of its 85 whatever its neighbour left it (r' = 1 - spare / 85)
    found = r.read(glance(a=served(20.0, 0.5)))
    spare = 2 * (room - 85.0)
    assert found is not None and found.weight.tolist() == [math.floor(256 * (1 - spare / 85.0))]
    # at that capacity the others have none: nothing moves (the interval's plan scales out)
    assert rule(room).read(glance(a=served(20.0, 0.5))) is None
    # a request held too long sheds all the same: that instance serves nothing
    held = {OLDEST_KEY: 5 * AGE_FACTOR * R_TH, "requests": 0}
    found = rule(room).read(glance(a=held))
    assert found is not None and found.weight.tolist() == [0]


def test_a_served_rate_read_over_too_short_a_time_or_the_whole_link_cuts_nothing() -> None:
    short = served(5.0, 0.9 * MIN_BUSY)
    assert rule().read(glance(a=short, b=served(100.0, 1.0), c=served(99.0, 0.2))) is None


def test_where_the_served_rate_is_measured_the_probe_does_not_cut() -> None:
    # a download that met the service's own requests reads as a neighbour; the rate served
    # shows the whole link left, so nothing is cut
    whole = served(100.0, 0.6) | {PROBE_KEY: probe_behind(80.0)}
    assert rule().read(glance(a=whole)) is None
    # where no rate is measured (b), the probe still cuts
    found = rule().read(glance(a=whole, b={PROBE_KEY: probe_behind(80.0)}))
    assert found is not None and found.at.tolist() == [1] and found.by_probe == 1


def test_a_probe_that_reads_the_capacity_gone_cuts_that_weight_alone() -> None:
    r = rule()
    found = r.read(glance(a={PROBE_KEY: probe_behind(80.0)}))
    assert found is not None and found.at.tolist() == [0] and found.by_probe == 1
    u_new = float(found.u_max_pct[0])
    assert u_new == pytest.approx(capacity(80.0, R_TH), abs=0.5)  # 11.25 %
    assert found.weight.tolist() == [math.floor(256 * u_new / U_MAX0)]
    assert found.planned_pct == pytest.approx(2 * U_MAX0 + u_new)
    # written into the plan: the same reading again cuts nothing more
    assert r.armed_ is not None and r.armed_.weight.tolist()[0] == found.weight[0]
    assert r.read(glance(a={PROBE_KEY: probe_behind(80.0)})) is None


def test_a_probe_that_leaves_more_than_the_cut_fraction_changes_nothing() -> None:
    u_int = 40.0  # capacity(40) = 26.25 %: more than (1 - CUT_FRACTION) of 51.25 %
    assert capacity(u_int, R_TH) > (1 - CUT_FRACTION) * U_MAX0
    assert rule().read(glance(a={PROBE_KEY: probe_behind(u_int)})) is None
    assert rule().read(glance(a={PROBE_KEY: R_ISO0 + R_ISO_SLOPE * U})) is None


def test_a_request_held_too_long_with_nothing_completed_cuts_to_zero() -> None:
    held = (AGE_FACTOR + 0.1) * R_TH
    found = rule().read(
        glance(
            b={OLDEST_KEY: held, "requests": 0},
            c={OLDEST_KEY: 2 * held, "requests": 2},  # it still completes requests
            a={OLDEST_KEY: (AGE_FACTOR - 0.1) * R_TH, "requests": 0},
        )
    )
    assert found is not None and found.at.tolist() == [1] and found.by_probe == 0
    assert found.u_max_pct.tolist() == [0.0] and found.weight.tolist() == [0]


def test_instances_not_planned_and_at_weight_0_are_left_alone() -> None:
    r = rule()
    assert r.armed_ is not None
    r.armed_.weight[0] = 0  # on trial
    g = glance(a={PROBE_KEY: probe_behind(80.0)})
    new = Observation(0.0, "n", 1.0, extra={PROBE_KEY: probe_behind(80.0)})
    g = Snapshot(g.time_s, g.environment, {**g.instances, "n": new})
    assert r.read(g) is None


def test_unarmed_the_rule_finds_nothing_and_bad_input_is_refused() -> None:
    b = linear_bundle()
    r = FastRule(b.capacity_model(R_TH), b.capacity_model(2 * R_TH), b.probe_table, R_TH, 0.0)
    assert r.read(glance(a={PROBE_KEY: probe_behind(80.0)})) is None
    with pytest.raises(InputError, match="target_rt_s"):
        FastRule(b.capacity_model(R_TH), b.capacity_model(R_TH), b.probe_table, 0.0, 0.0)
    with pytest.raises(InputError, match="weight"):
        r.arm(Armed(["a"], np.ones(1), np.ones(1), np.ones(2, dtype=np.int64), np.zeros(1), 1, 1))

"""RTM, IM and effective capacity against closed forms (a plane and a hinge)."""

from __future__ import annotations

import numpy as np
import pytest

from quell.errors import InputError
from quell.models.capacity import CapacityModel, InterferenceModel, ResponseTimeModel
from tests.prima import bundles as sb


def test_rtm_is_exact_on_a_plane_and_flags_outside() -> None:
    b = sb.linear_bundle()
    q = b.rtm.predict(np.array([15.0, 37.5, 99.0]), np.array([0.5, 3.25, 7.9]))
    assert q.value == pytest.approx([sb.rt(15, 0.5), sb.rt(37.5, 3.25), sb.rt(99, 7.9)], rel=1e-9)
    assert not q.clamped.any()
    out = b.rtm.predict(np.array([120.0, 50.0]), np.array([1.0, 9.0]))
    assert out.clamped.tolist() == [True, True]
    assert out.value == pytest.approx([sb.rt(100, 1.0), sb.rt(50, 8.0)])  # clamped to the edge


def test_rtm_inverts_in_sf_for_calibration() -> None:
    b = sb.linear_bundle()
    q = b.rtm.sf_for(30.0, sb.rt(30.0, 2.7))
    assert q.value[0] == pytest.approx(2.7, abs=0.02)
    assert not q.clamped[0]
    assert b.rtm.sf_for(30.0, 10.0).clamped[0]  # beyond anything measured


def test_im_is_monotone_and_reversible() -> None:
    rng = np.random.default_rng(3)
    u = np.repeat(np.arange(0.0, 101.0, 10.0), 5)
    sf = np.array([sb.sf_of_total(x) for x in u]) + rng.normal(0, 0.05, u.size)
    im = InterferenceModel(resolution_pct=10.0).fit(u, sf)
    assert np.all(np.diff(im.sf_) >= 0)
    back = im.inverse(im.predict(np.array([55.0, 80.0])).value, np.array([0.0, 0.0]))
    assert back.value == pytest.approx([55.0, 80.0], abs=0.5)


def test_im_reads_a_flat_region_as_the_instances_own_load() -> None:
    im = sb.linear_bundle().im
    # SF 0 is measured anywhere up to the knee at 40 %: with U = 25 %, U_total = 25 % (no
    # neighbour load), not an arbitrary point of [0, 40].
    assert im.inverse(np.array([0.0]), np.array([25.0])).value[0] == pytest.approx(25.0)
    assert im.inverse(np.array([0.0]), np.array([60.0])).value[0] == pytest.approx(40.0)
    assert im.inverse(np.array([50.0]), np.array([10.0])).clamped[0]


@pytest.mark.parametrize("target_ms", [20.0, 30.0])
@pytest.mark.parametrize("u_int", [20.0, 35.0, 50.0])
def test_capacity_matches_the_closed_form(target_ms: float, u_int: float) -> None:
    b = sb.linear_bundle()
    cm = b.capacity_model(target_ms / 1e3)
    expected = sb.capacity(u_int, target_ms / 1e3)
    assert expected + u_int >= sb.X0  # inside the hinge's sloped part
    got = cm.capacity_for(np.array([u_int])).value[0]
    assert got == pytest.approx(expected, abs=cm.u_step_pct + 0.05)
    assert got <= expected + 1e-9  # "just below" R_th, never above


def test_capacity_from_measurements_estimates_interference_first() -> None:
    b = sb.linear_bundle()
    cm = b.capacity_model(0.025)
    u, u_total = 30.0, 75.0  # an instance at 30 % whose link carries 75 % in all
    sf = sb.sf_of_total(u_total)
    u_int, u_max = cm.capacity(np.array([u]), np.array([sf]))
    assert u_int.value[0] == pytest.approx(45.0, abs=0.01)
    assert u_max.value[0] == pytest.approx(sb.capacity(45.0, 0.025), abs=0.15)
    # The prediction at the capacity sits just below the target.
    assert cm.predict_rt(u_max.value, u_int.value).value[0] <= 0.025


def test_no_capacity_when_the_target_is_unreachable() -> None:
    cm = sb.linear_bundle().capacity_model(0.001)  # below A: even an idle instance misses it
    assert cm.capacity_for(np.array([0.0, 30.0])).value.tolist() == [0.0, 0.0]


def test_models_refuse_bad_measurements() -> None:
    with pytest.raises(InputError, match="at least 4 points"):
        ResponseTimeModel().fit([10, 20], [0, 1], [0.1, 0.2])
    with pytest.raises(InputError, match="positive"):
        ResponseTimeModel().fit([10, 20, 10, 20], [0, 0, 1, 1], [0.1, -0.2, 0.1, 0.3])
    with pytest.raises(InputError, match="span both"):
        ResponseTimeModel().fit([10, 10, 10, 10], [0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(InputError, match="2 or more"):
        InterferenceModel().fit([10.0, 10.1], [0.0, 0.1])
    with pytest.raises(InputError, match="non-finite"):
        InterferenceModel().fit([10.0, float("nan")], [0.0, 0.1])


def test_capacity_model_keeps_parameters_as_given() -> None:
    b = sb.linear_bundle()
    cm = CapacityModel(b.rtm, b.im, 0.02, u_step_pct=0.5)
    assert (cm.target_rt_s, cm.u_step_pct, cm.u_int_step_pct) == (0.02, 0.5, 0.25)
    assert not hasattr(cm, "u_max_pct_")
    cm.fit()
    assert cm.u_max_pct_.shape == cm.u_int_grid_.shape


def test_a_single_level_is_the_papers_one_curve() -> None:
    rng = np.random.default_rng(5)
    total = rng.uniform(0, 100, 60)
    sf = np.array([sb.sf_of_total(x) for x in total]) + rng.normal(0, 0.05, total.size)
    plain = InterferenceModel(5.0).fit(total, sf)
    one = InterferenceModel(5.0).fit(total, sf, rng.uniform(10, 30, total.size), [20.0] * 60)
    q = np.linspace(0, 110, 23)
    assert one.predict(q, np.full(q.size, 70.0)).value == pytest.approx(plain.predict(q).value)
    s = np.linspace(0, 6, 13)
    near = np.full(s.size, 30.0)
    assert one.inverse(s, near).value == pytest.approx(plain.inverse(s, near).value)


def test_level_im_interpolates_between_levels_and_inverts_at_a_given_u() -> None:
    im = sb.level_bundle().im
    assert np.all(np.diff(im.sf_, axis=1) >= 0)  # every level's curve is monotone
    u = np.array([10.0, 30.0, 50.0, 75.0])
    total = np.array([80.0, 95.0, 120.0, 130.0])  # all on the hinges' sloped parts
    expect = [sb.level_sf(a, b) for a, b in zip(u, total, strict=True)]
    got = im.predict(total, u)
    assert got.value == pytest.approx(expect, abs=1e-9)
    assert not got.clamped.any()
    back = im.inverse(got.value, u)
    assert back.value == pytest.approx(total, abs=1e-6)
    assert im.predict(np.array([80.0]), np.array([120.0])).clamped[0]  # U beyond the levels
    with pytest.raises(ValueError, match="needs the instance's U"):
        im.predict(np.array([50.0]))


@pytest.mark.parametrize("u_int", [45.0, 60.0])
def test_capacity_with_a_level_im_matches_the_closed_form(u_int: float) -> None:
    cm = sb.level_bundle().capacity_model(0.025)
    expected = sb.level_capacity(u_int, 0.025)
    got = cm.capacity_for(np.array([u_int])).value[0]
    assert got == pytest.approx(expected, abs=cm.u_step_pct + 0.05)
    assert got <= expected + 1e-9
    # From a measurement: an instance at 30 % reading the SF of that neighbour load.
    sf = sb.level_sf(30.0, 30.0 + u_int)
    est, cap = cm.capacity(np.array([30.0]), np.array([sf]))
    assert est.value[0] == pytest.approx(u_int, abs=0.01)
    assert cap.value[0] == pytest.approx(expected, abs=cm.u_step_pct + 0.05)


def test_level_im_refuses_half_given_levels() -> None:
    with pytest.raises(InputError, match="both U and its level"):
        InterferenceModel().fit([10.0, 20.0], [0.0, 0.1], util_pct=[5.0, 5.0])


def test_one_shared_curve_reads_the_same_as_a_curve_per_query() -> None:
    """The one-group IM searches its curve once per query instead of comparing against a copy
    of it per query: the same numbers to the bit, knots, NaN and out-of-range included."""
    im = sb.linear_bundle().im
    row = im.sf_[0]
    rng = np.random.default_rng(3)
    s = np.concatenate([row, rng.uniform(-1.0, row[-1] + 1.0, 500), [np.nan, np.inf, -np.inf]])
    u = np.concatenate([im.total_util_pct_, rng.uniform(-10.0, 200.0, s.size - row.size)])
    u[-3:] = [np.nan, np.inf, -np.inf]
    rows = np.broadcast_to(row, (s.size, row.size))
    x = im.total_util_pct_
    for side in ("left", "right"):
        shared = InterferenceModel._crossing(x, row, s, side)
        per_query = InterferenceModel._crossing(x, rows, s, side)
        assert shared.tobytes() == per_query.tobytes()
    with np.errstate(invalid="ignore"):
        got = im.predict(u, np.zeros(u.size)).value
        j = np.clip(np.searchsorted(x, u, side="right") - 1, 0, x.size - 2)
        a = np.clip((u - x[j]) / (x[j + 1] - x[j]), 0.0, 1.0)
        want = (1.0 - a) * rows[np.arange(u.size), j] + a * rows[np.arange(u.size), j + 1]
    assert got.tobytes() == want.tobytes()

"""The PRIMA controller on hand-built snapshots, with a bundle whose capacities are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.core.observation import Observation, Snapshot
from quell.errors import InputError
from quell.policy import PolicyContext, ScalingLimits
from quell.policy.prima import PrimaPolicy, instance_rows
from tests.prima import bundles as sb

TARGET_S = 0.025


def obs(
    iid: str, u: float, u_total: float, weight: int = 100, rt: float | None = None
) -> Observation:
    sf = sb.sf_of_total(u_total)
    probe = (sb.R_ISO0 + sb.R_ISO_SLOPE * u) * (1 + sf)
    return Observation(
        time_s=0.0,
        instance_id=iid,
        interval_s=10.0,
        util_pct=u,
        weight=weight,
        mean_rt_seconds=rt,
        extra={"probe_rt_seconds": probe},
    )


def snap(*o: Observation) -> Snapshot:
    return Snapshot(0.0, "test", {x.instance_id: x for x in o})


def policy(
    tmp_path: Path, instances: dict[str, str], **params: float | int | str | bool
) -> PrimaPolicy:
    sb.write_linear_bundle(tmp_path / "m.json")
    ctx = PolicyContext(
        interval_s=10.0,
        target_rt_s=TARGET_S,
        scaling=ScalingLimits(hosts=["h1", "h2", "h3", "h4"], boot_s=30),
        base_dir=tmp_path,
        initial_instances=instances,
    )
    return PrimaPolicy.build({"model": "m.json", "preset": "paper", **params}, ctx)


def test_scale_out_waits_w_intervals_then_adds_one_and_waits_for_its_sf(tmp_path: Path) -> None:
    p = policy(tmp_path, {"i1": "h1"})
    # 50 % of load on an interference-free instance whose U_max is 45 %: shortfall.
    first = p.decide(snap(obs("i1", 50.0, 50.0)))
    assert not first.actions and "waiting (1/2)" in first.reason
    second = p.decide(snap(obs("i1", 50.0, 50.0)))
    adds = [a for a in second.actions if isinstance(a, AddInstance)]
    assert adds == [AddInstance("n1", "h2", 0)]
    assert "exceeds ΣU_max=" in second.reason
    cap = instance_rows(second.detail)["i1"]["u_max_pct"]
    assert cap == pytest.approx(45.0, abs=0.15) and sb.capacity(0.0, TARGET_S) == pytest.approx(
        45.0
    )
    # Booting: nothing more is asked for.
    assert not p.decide(snap(obs("i1", 50.0, 50.0))).actions
    # n1 serves; its SF has been measured in the same snapshot → weights ∝ capacity.
    d = p.decide(snap(obs("i1", 50.0, 50.0), obs("n1", 0.0, 0.0, weight=0)))
    weights = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert weights == {"i1": 256, "n1": 256}  # equal capacities, equal weights
    assert not any(isinstance(a, AddInstance) for a in d.actions)
    assert "ΣU_max=90.0%" in d.reason and "weights ∝ capacity" in d.reason


def test_weights_follow_capacity_under_interference(tmp_path: Path) -> None:
    p = policy(tmp_path, {"i1": "h1", "i2": "h2"})
    # Same load on both; i2's link carries 40 % more from a neighbour.
    s = snap(obs("i1", 20.0, 20.0), obs("i2", 20.0, 60.0))
    d = p.decide(s)
    det = instance_rows(d.detail)
    c1, c2 = det["i1"]["u_max_pct"], det["i2"]["u_max_pct"]
    assert det["i2"]["u_int_pct"] == pytest.approx(40.0, abs=0.01)
    assert c2 == pytest.approx(sb.capacity(40.0, TARGET_S), abs=0.15)
    assert c1 > c2
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert w["i1"] == 256
    assert w["i2"] == round(256 * c2 / c1)


def test_scale_in_keeps_the_highest_capacities(tmp_path: Path) -> None:
    p = policy(tmp_path, {"i1": "h1", "i2": "h2", "i3": "h3"})
    # 30 % of load in all; i1 alone carries it with 10 % to spare (33 % ≤ 45 %), so after W
    # more intervals the two others go on trial, and once i1 has carried it through the trial
    # (sf_window + 1 = 4 intervals) they are removed.
    s = snap(obs("i1", 10.0, 10.0), obs("i2", 10.0, 55.0), obs("i3", 10.0, 70.0))
    assert "waiting (1/2)" in p.decide(s).reason
    d = p.decide(s)
    assert p.trial_ == ("i2", "i3") and d.detail["kept"] == ["i1"]
    for _ in range(4):
        d = p.decide(snap(obs("i1", 30.0, 30.0), obs("i2", 0.0, 45.0), obs("i3", 0.0, 60.0)))
    removed = sorted(a.instance_id for a in d.actions if isinstance(a, RemoveInstance))
    assert removed == ["i2", "i3"]
    assert d.detail["kept"] == ["i1"]
    assert "through the trial with 10% to spare: scale in" in d.reason


def test_calibration_lowers_capacity_when_measured_rt_exceeds_prediction(tmp_path: Path) -> None:
    p = policy(tmp_path, {"i1": "h1", "i2": "h2"}, wait_intervals=0)
    # Load split so that each instance's predicted RT sits within 10 % of R_th.
    s = snap(obs("i1", 43.0, 43.0), obs("i2", 43.0, 43.0))
    d0 = p.decide(s)
    assert p.watch_ == {"i1", "i2"}
    before = instance_rows(d0.detail)["i1"]["u_max_pct"]
    # i1 measures 40 ms where the model predicts 23.4 ms: RTM needs SF ≈ 4.45 to explain it.
    d1 = p.decide(snap(obs("i1", 43.0, 43.0, rt=0.040), obs("i2", 43.0, 43.0, rt=0.023)))
    det = instance_rows(d1.detail)
    assert det["i1"]["sf"] == pytest.approx((0.040 - sb.A - sb.B * 43) / sb.C, abs=0.05)
    assert det["i1"]["u_max_pct"] < before
    assert det["i2"]["sf"] == pytest.approx(sb.sf_of_total(43.0))  # measured below prediction
    # The decision log says which SF is a revision and keeps the probe's beside it.
    assert (det["i1"]["sf_calibrated"], det["i2"]["sf_calibrated"]) == (True, False)
    assert det["i1"]["sf_probe"] == pytest.approx(sb.sf_of_total(43.0))
    assert instance_rows(d0.detail)["i1"]["sf_calibrated"] is False


def test_bad_params_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        policy(tmp_path, {"i1": "h1"}, wait_intervals=-1, magic=3)
    msg = str(info.value)
    assert "policy.params.wait_intervals" in msg and "policy.params.magic: unknown parameter" in msg


def test_needs_a_target(tmp_path: Path) -> None:
    sb.write_linear_bundle(tmp_path / "m.json")
    ctx = PolicyContext(interval_s=10.0, base_dir=tmp_path, initial_instances={"i1": "h1"})
    with pytest.raises(InputError, match=r"target\.mean_rt_s"):
        PrimaPolicy.build({"model": "m.json"}, ctx)


def test_a_revised_sf_lasts_until_the_probe_reads_the_neighbour_gone(tmp_path: Path) -> None:
    p = policy(tmp_path, {"i1": "h1", "i2": "h2"}, wait_intervals=0, sf_window=1)
    p.decide(snap(obs("i1", 43.0, 43.0), obs("i2", 43.0, 43.0)))
    p.decide(snap(obs("i1", 43.0, 43.0, rt=0.040), obs("i2", 43.0, 43.0, rt=0.023)))
    revised = (0.040 - sb.A - sb.B * 43) / sb.C
    # Unmeasured (no request finished) under the same probe reading: the revision holds.
    d = p.decide(snap(obs("i1", 43.0, 43.0), obs("i2", 43.0, 43.0, rt=0.023)))
    assert instance_rows(d.detail)["i1"]["sf"] == pytest.approx(revised, abs=0.05)
    # The probe now reads no interference (SF 0, was 0.3 at the revision): it goes.
    d = p.decide(snap(obs("i1", 2.0, 30.0), obs("i2", 43.0, 43.0, rt=0.023)))
    row = instance_rows(d.detail)["i1"]
    assert row["sf"] == 0.0 and "i1" not in p.calibrated_sf_
    assert row["u_max_pct"] == pytest.approx(sb.capacity(0.0, TARGET_S), abs=0.2)


def test_a_safety_factor_plans_capacity_for_more_than_the_load(tmp_path: Path) -> None:
    # Two instances without neighbours hold 2 × 45 % = 90 %. At U = 80 % that suffices; with
    # a safety factor of 0.25 the plan is for 100 %, short by 10 %: one more instance.
    plain = policy(tmp_path, {"i1": "h1", "i2": "h2"}, wait_intervals=0)
    s = snap(obs("i1", 40.0, 40.0), obs("i2", 40.0, 40.0))
    assert not [a for a in plain.decide(s).actions if isinstance(a, AddInstance)]
    safe = policy(tmp_path, {"i1": "h1", "i2": "h2"}, wait_intervals=0, safety_factor=0.25)
    d = safe.decide(s)
    assert [a.host for a in d.actions if isinstance(a, AddInstance)] == ["h3"]
    assert "U×1.25=100.0%" in d.reason and "short by 10.0%" in d.reason

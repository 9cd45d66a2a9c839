"""PRIMA's SF smoothing, sized scale-out, pending additions and scale-in with headroom, on a
bundle whose capacities are known in closed form (tests/prima/bundles.py: U_max = 45 % without
a neighbour at R_th = 25 ms)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from quell.core.action import AddInstance, Decision, RemoveInstance, SetWeight
from quell.core.observation import Observation, Snapshot
from quell.policy import PolicyContext, ScalingLimits
from quell.policy.fleet import PENDING_GRACE_INTERVALS, Fleet
from quell.policy.prima import PrimaPolicy, instance_rows
from quell.policy.weights import proportional_array, proportional_weights
from quell.probe import ProbeTable, SeverityEstimator
from quell.probe.table import TrainingLevel
from quell.scenario.load import load_scenario
from quell.scenario.policy import policy_context
from quell.studies.prima.profile import CellResult, Profiler
from tests.policy.snapshots import flat_table, probe_for, snap
from tests.prima import bundles as sb

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
TARGET_S = 0.025
BOOT_S = 30.0
CAP0 = sb.capacity(0.0, TARGET_S)  # 45 %


def obs(t: float, iid: str, u: float, u_total: float, probe: bool = True) -> Observation:
    p = (sb.R_ISO0 + sb.R_ISO_SLOPE * u) * (1 + sb.sf_of_total(u_total))
    return Observation(
        time_s=t,
        instance_id=iid,
        interval_s=10.0,
        util_pct=u,
        weight=100,
        extra={"probe_rt_seconds": p} if probe else {},
    )


def at(t: float, *o: Observation) -> Snapshot:
    return Snapshot(t, "test", {x.instance_id: x for x in o})


def policy(
    tmp_path: Path, n: int, hosts: int = 10, **params: float | int | bool | str
) -> PrimaPolicy:
    sb.write_linear_bundle(tmp_path / "m.json")
    ctx = PolicyContext(
        interval_s=10.0,
        target_rt_s=TARGET_S,
        scaling=ScalingLimits(hosts=[f"h{k}" for k in range(1, hosts + 1)], boot_s=BOOT_S),
        base_dir=tmp_path,
        initial_instances={f"i{k}": f"h{k}" for k in range(1, n + 1)},
    )
    # the paper's PRIMA: each test sets the option it is about
    return PrimaPolicy.build({"model": "m.json", "preset": "paper", **params}, ctx)


def adds(d: Decision) -> list[str]:
    return [a.instance_id for a in d.actions if isinstance(a, AddInstance)]


def removes(d: Decision) -> list[str]:
    return sorted(a.instance_id for a in d.actions if isinstance(a, RemoveInstance))


# -- SF smoothing ----------------------------------------------------------------------------
def test_sf_is_eq1_on_the_mean_of_the_last_samples_each_counted_once() -> None:
    est = SeverityEstimator(flat_table(), window=3)
    est.update(snap(10, i1={"util_pct": 20.0, "probe": probe_for(0.1)}))
    assert est.sf_["i1"] == pytest.approx(0.1)
    est.update(snap(20, i1={"util_pct": 20.0, "probe": probe_for(3.0)}))
    assert est.sf_["i1"] == pytest.approx((0.1 + 3.0) / 2)
    est.update(snap(30, i1={"util_pct": 20.0, "probe": probe_for(0.2)}))
    assert est.sf_["i1"] == pytest.approx((0.1 + 3.0 + 0.2) / 3)
    for t in (40, 50, 60):  # intervals without a probe report add no sample
        est.update(snap(t, i1={"util_pct": 20.0}))
        assert est.sf_["i1"] == pytest.approx(1.1) and est.fresh_ == set()
    est.update(snap(70, i1={"util_pct": 20.0, "probe": probe_for(0.4)}))
    assert est.sf_["i1"] == pytest.approx((3.0 + 0.2 + 0.4) / 3)  # 0.1 left the window
    est.update(snap(80, i2={"util_pct": 20.0}))
    assert est.sf_ == {} and len(est) == 0  # i1 gone, i2 not probed yet


def test_a_probe_faster_than_in_isolation_counts_in_the_mean_before_eq1_clips() -> None:
    # As the profile reads a cell: Eq. 1 on the mean probe time, so a sample below R_iso offsets
    # one above it; the estimate is 0, never negative.
    est = SeverityEstimator(flat_table(), window=2)
    est.update(snap(10, i1={"util_pct": 20.0, "probe": probe_for(-0.2)}))
    assert est.sf_["i1"] == 0.0
    est.update(snap(20, i1={"util_pct": 20.0, "probe": probe_for(0.5)}))
    assert est.sf_["i1"] == pytest.approx(0.15)


def test_the_mean_reads_a_window_as_the_profile_reads_a_model_cell() -> None:
    # Probe times skewed as a filling link queue makes them (most near 1.2 × R_iso, one long):
    # the controller's window and the profile's cell give the same SF.
    table = ProbeTable().fit(
        [TrainingLevel(10.0, (0.040, 0.041, 0.039)), TrainingLevel(90.0, (0.060, 0.061, 0.059))]
    )
    probe_s = [0.055, 0.052, 0.054, 0.095, 0.053]
    cell = CellResult("model", 30.0, 22.5, 0, 35.0, 60.0, probe_s, 0.02, 100, "r")
    want = Profiler.cell_sf(table, cell)
    assert want is not None and want > 0.3
    means = SeverityEstimator(table, window=len(probe_s))
    for t, p in enumerate(probe_s):
        means.update(snap(t, i1={"util_pct": 35.0, "probe": p}))
    assert means.sf_["i1"] == pytest.approx(want, rel=1e-12)


def test_window_one_is_the_last_sample() -> None:
    est = SeverityEstimator(flat_table())
    for sf in (0.1, 3.0):
        est.update(snap(10, i1={"util_pct": 20.0, "probe": probe_for(sf)}))
    assert est.sf_["i1"] == pytest.approx(3.0)


def test_one_noisy_probe_moves_the_mean_by_its_share(tmp_path: Path) -> None:
    p = policy(tmp_path, 2, wait_intervals=0)
    quiet = [at(10 * k, obs(10 * k, "i1", 30, 30), obs(10 * k, "i2", 30, 30)) for k in (1, 2)]
    for s in quiet:
        p.decide(s)
    noisy = at(30, obs(30, "i1", 30, 30), obs(30, "i2", 30, 90))  # i2: one sample at SF 5
    rows = instance_rows(p.decide(noisy).detail)
    assert rows["i2"]["sf_probe"] == pytest.approx(sb.sf_of_total(90))
    assert rows["i2"]["sf"] == pytest.approx(sb.sf_of_total(90) / 3)
    assert rows["i2"]["u_max_pct"] < rows["i1"]["u_max_pct"]


def test_with_the_sf_gate_the_log_shows_each_window_and_its_threshold(tmp_path: Path) -> None:
    gated = policy(tmp_path, 2, wait_intervals=0, sf_window=3, sf_confidence_z=2.33)
    plain = policy(tmp_path, 2, wait_intervals=0, sf_window=3)
    snaps = [at(10 * k, obs(10 * k, "i1", 30, 30), obs(10 * k, "i2", 30, 60)) for k in (1, 2)]
    for s in snaps:
        rows = instance_rows(gated.decide(s).detail)
        assert "sf_window" not in instance_rows(plain.decide(s).detail)["i1"]
    for iid in ("i1", "i2"):
        window, gate = rows[iid]["sf_window"], rows[iid]["sf_gate"]
        assert gate is not None and gate >= 0.0
        assert rows[iid]["sf"] == pytest.approx(window if window > gate else 0.0)
    assert rows["i2"]["sf_window"] == pytest.approx(sb.sf_of_total(60))


# -- scale out by the shortfall --------------------------------------------------------------
def test_scale_out_adds_the_whole_shortfall_at_once_and_counts_it_while_booting(
    tmp_path: Path,
) -> None:
    p = policy(tmp_path, 4, wait_intervals=0)
    # Table VIII's last step: 300 % on four instances of U_max 45 % each: short by 120 %.
    load = [obs(10, f"i{k}", 75.0, 75.0) for k in range(1, 5)]
    d = p.decide(at(10, *load))
    assert adds(d) == ["n1", "n2", "n3"]  # ceil(120 / 45)
    assert len(adds(d)) == math.ceil((300 - 4 * CAP0) / CAP0)
    assert "short by 120.0%" in d.reason and "scale out with 3 instance(s)" in d.reason
    # Booting: they count at 45 % each (315 % ≥ 300 %), so nothing more is asked for.
    d = p.decide(at(20, *[obs(20, f"i{k}", 75.0, 75.0) for k in range(1, 5)]))
    assert adds(d) == [] and "+ 3 on the way at 45.0% each" in d.reason
    assert d.detail["planned_capacity_pct"] == pytest.approx(7 * CAP0, abs=0.5)


def test_no_scaling_and_no_vote_while_the_windows_warm_up(tmp_path: Path) -> None:
    # U_max 45 %: 50 % is a shortfall from the first interval. Without a warm-up and with
    # W = 0 the first interval scales out.
    plain = policy(tmp_path, 1, wait_intervals=0)
    assert adds(plain.decide(at(10, obs(10, "i1", 50.0, 50.0)))) == ["n1"]
    # With warmup_intervals = 2 and W = 1 the first two intervals set weights only and are not
    # votes: the third is the first vote (waiting 1/2), the fourth scales out. i2 behind a
    # neighbour (U_total 90 %) has less capacity, so the weights move during the warm-up too.
    p = policy(tmp_path, 2, wait_intervals=1, warmup_intervals=2)

    def load(t: float) -> Snapshot:
        return at(t, obs(t, "i1", 50.0, 50.0), obs(t, "i2", 50.0, 90.0))

    d = p.decide(load(10))
    assert adds(d) == [] and "warming up (1/2)" in d.reason
    weights = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert weights["i1"] > weights["i2"]
    d = p.decide(load(20))
    assert adds(d) == [] and "warming up (2/2)" in d.reason
    d = p.decide(load(30))
    assert adds(d) == [] and "waiting (1/2)" in d.reason
    assert adds(p.decide(load(40))) != []


def test_a_shortfall_that_noise_interrupts_still_scales_out(tmp_path: Path) -> None:
    # W = 2: a shortfall in 3 of the last 5 intervals (and now) acts; one in 2 of 5 does not.
    p = policy(tmp_path, 1, wait_intervals=2)
    over, under = 50.0, 40.0  # U_max 45 %
    for t, u in ((10, over), (20, under), (30, over), (40, under)):
        d = p.decide(at(t, obs(t, "i1", u, u)))
        assert adds(d) == []
    assert "waiting (2/3)" not in d.reason
    d = p.decide(at(50, obs(50, "i1", over, over)))
    assert adds(d) == ["n1"]


def test_util_window_plans_on_the_mean_of_the_last_intervals(tmp_path: Path) -> None:
    # U_max 45 %: one second at 50 % between seconds at 40 % is noise with a window of 3
    # (mean 43.3 %), a shortfall without one.
    swings = [(10, 40.0), (20, 40.0), (30, 50.0)]
    plain = policy(tmp_path, 1, wait_intervals=0)
    windowed = policy(tmp_path, 1, wait_intervals=0, util_window=3)
    for t, u in swings:
        d_plain = plain.decide(at(t, obs(t, "i1", u, u)))
        d_win = windowed.decide(at(t, obs(t, "i1", u, u)))
    assert adds(d_plain) == ["n1"]
    assert adds(d_win) == [] and "U=43.3% within" in d_win.reason
    assert instance_rows(d_win.detail)["i1"]["util_pct"] == pytest.approx(130.0 / 3)
    # A load that stays up is acted on once it fills the window's mean: 40, 50, 50 → 46.7 %.
    d_win = windowed.decide(at(40, obs(40, "i1", 50.0, 50.0)))
    assert adds(d_win) == ["n1"] and "U=46.7% exceeds" in d_win.reason


def test_util_window_reads_sf_at_the_intervals_own_utilisation(tmp_path: Path) -> None:
    # No neighbour: U swings 20 → 40 %; the probe at each U reads SF 0 against R_iso(U) there,
    # so the window must not read it against the mean U (which would see a neighbour).
    p = policy(tmp_path, 1, wait_intervals=0, util_window=3)
    for t, u in ((10, 20.0), (20, 40.0)):
        d = p.decide(at(t, obs(t, "i1", u, u)))
    row = instance_rows(d.detail)["i1"]
    assert row["util_pct"] == pytest.approx(30.0)
    assert row["sf_probe"] == pytest.approx(0.0, abs=1e-9)


def test_a_new_instance_weaker_than_expected_brings_one_more(tmp_path: Path) -> None:
    p = policy(tmp_path, 4, wait_intervals=0)
    p.decide(at(10, *[obs(10, f"i{k}", 75.0, 75.0) for k in range(1, 5)]))
    # They serve (U 10 % from the probe's own traffic, say); n3's host has a neighbour at 60 %:
    # U_max 15 %, not 45 %.
    new = [obs(40, "n1", 10.0, 10.0), obs(40, "n2", 10.0, 10.0), obs(40, "n3", 10.0, 70.0)]
    d = p.decide(at(40, *[obs(40, f"i{k}", 75.0, 75.0) for k in range(1, 5)], *new))
    assert instance_rows(d.detail)["n3"]["u_max_pct"] == pytest.approx(
        sb.capacity(60.0, TARGET_S), abs=0.2
    )
    # 6 x 45 + 15 = 285 % < 330 %: short by 45 %, one more.
    assert adds(d) == ["n4"]
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert w["n1"] == 256 and w["n3"] == round(256 * 15 / 45)  # ∝ capacity


def test_new_instances_wait_at_weight_zero_for_their_sf(tmp_path: Path) -> None:
    p = policy(tmp_path, 1, wait_intervals=0)
    assert adds(p.decide(at(10, obs(10, "i1", 50.0, 50.0)))) == ["n1"]
    d = p.decide(at(40, obs(40, "i1", 50.0, 50.0), obs(40, "n1", 0.0, 0.0, probe=False)))
    assert d.detail["awaiting_sf"] == ["n1"] and adds(d) == []
    assert "n1" not in instance_rows(d.detail)
    assert all(a.instance_id != "n1" for a in d.actions)


def test_an_addition_that_never_serves_times_out_and_is_asked_for_again(tmp_path: Path) -> None:
    p = policy(tmp_path, 1, wait_intervals=0)
    assert adds(p.decide(at(10, obs(10, "i1", 50.0, 50.0)))) == ["n1"]
    timeout = BOOT_S + PENDING_GRACE_INTERVALS * 10.0
    t = 20.0
    while t <= 10 + timeout:
        assert adds(p.decide(at(t, obs(t, "i1", 50.0, 50.0)))) == []
        t += 10
    d = p.decide(at(t, obs(t, "i1", 50.0, 50.0)))
    assert d.detail["expired_add"] == ["n1"] and adds(d) == ["n2"]


# -- scale in --------------------------------------------------------------------------------
def test_scale_in_keeps_capacity_with_headroom_after_wait(tmp_path: Path) -> None:
    p = policy(tmp_path, 3, scale_in_headroom=0.1)  # W = 1
    s = at(10, *[obs(10, f"i{k}", 14.0, 14.0) for k in range(1, 4)])  # U = 42 %
    d = p.decide(s)
    assert p.trial_ == () and "2 instance(s) would do, waiting (1/2)" in d.reason
    d = p.decide(s)  # 42 x 1.1 = 46.2 % > 45 %: two stay
    assert p.trial_ == ("i3",) and d.detail["kept"] == ["i1", "i2"]
    assert "trying them without i3 (weight 0)" in d.reason


def test_no_scale_in_while_load_sits_in_the_band(tmp_path: Path) -> None:
    p = policy(tmp_path, 2, wait_intervals=0, scale_in_headroom=0.1)
    for t in (10, 20, 30):  # 43 % ≤ 45 % (no shortfall), 43 x 1.1 > 45 % (no excess)
        d = p.decide(at(t, obs(t, "i1", 21.5, 21.5), obs(t, "i2", 21.5, 21.5)))
        assert removes(d) == [] and adds(d) == []


def test_scale_in_tries_the_kept_instances_before_removing(tmp_path: Path) -> None:
    p = policy(tmp_path, 3, wait_intervals=0)  # trial: sf_window + 1 = 4 intervals
    d = p.decide(at(10, *[obs(10, f"i{k}", 14.0, 14.0) for k in range(1, 4)]))  # U = 42 %
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert removes(d) == [] and p.trial_ == ("i3",) and w["i3"] == 0
    assert w["i1"] == w["i2"] == 256
    assert "trying them without i3 (weight 0) for 4 interval(s)" in d.reason
    for t in (20, 30, 40):  # i1 and i2 carry 21 % each: no neighbour shows
        d = p.decide(at(t, obs(t, "i1", 21.0, 21.0), obs(t, "i2", 21.0, 21.0), obs(t, "i3", 0, 0)))
        assert removes(d) == [] and "carry their U=42.0%" in d.reason
    d = p.decide(at(50, obs(50, "i1", 21.0, 21.0), obs(50, "i2", 21.0, 21.0), obs(50, "i3", 4, 4)))
    assert removes(d) == ["i3"] and p.trial_ == ()
    # Judged on the kept ones' own 42 %, not on U = 46 % with i3's probe still in it.
    assert "carried their U=42.0% through the trial with 10% to spare: scale in" in d.reason


def test_a_trial_counts_the_kept_instances_own_load(tmp_path: Path) -> None:
    # Two instances at 20 % each: one would do (44 % ≤ 45 %). On trial i2 still shows 4 % (its
    # probe, which leaves with it): U = 46 % exceeds i1's 45 %, but i1's own 42 % does not.
    p = policy(tmp_path, 2, wait_intervals=0, scale_in_headroom=0.0)
    p.decide(at(10, obs(10, "i1", 20.0, 20.0), obs(10, "i2", 20.0, 20.0)))
    assert p.trial_ == ("i2",)
    for t in (20, 30, 40, 50):
        d = p.decide(at(t, obs(t, "i1", 42.0, 42.0), obs(t, "i2", 4.0, 4.0)))
    assert removes(d) == ["i2"]


def test_a_trial_passes_only_with_the_headroom_to_spare(tmp_path: Path) -> None:
    # The same trial with 10 % headroom: i1 carries its 42 % (42 x 1.1 = 46.2 % > 45 %) but
    # not with 10 % to spare, so i2 stays and the next try waits twice as long. (A window of
    # two samples forgets the trial's SF in two, so the same instance is tried again; the trial
    # lasts the window + 1 intervals.)
    p = policy(tmp_path, 2, wait_intervals=0, scale_in_headroom=0.1, sf_window=2)
    p.decide(at(10, obs(10, "i1", 19.0, 19.0), obs(10, "i2", 19.0, 19.0)))  # 38 x 1.1 ≤ 45
    assert p.trial_ == ("i2",)
    for t in (20, 30, 40):
        d = p.decide(at(t, obs(t, "i1", 42.0, 42.0), obs(t, "i2", 4.0, 4.0)))
    assert removes(d) == [] and p.trial_ == () and p.trial_failures_ == 1
    assert "carry without 10% to spare their U=42.0%: trial failed, i2 back in" in d.reason
    p.decide(at(50, obs(50, "i1", 19.0, 19.0), obs(50, "i2", 19.0, 19.0)))
    assert p.trial_ == ()  # the excess must now show in 2 x (0 + 1) intervals
    p.decide(at(60, obs(60, "i1", 19.0, 19.0), obs(60, "i2", 19.0, 19.0)))
    assert p.trial_ == ("i2",)


def probe_policy(
    tmp_path: Path,
    probe_pct: dict[str, float],
    initial: tuple[str, ...] = ("i1", "i2"),
    **params: float | int | bool,
) -> PrimaPolicy:
    """Instances i<k> on h<k> (``initial``), and hosts h1..h4 to scale on, whose probes take
    ``probe_pct`` of U per host."""
    sb.write_linear_bundle(tmp_path / "m.json")
    ctx = PolicyContext(
        interval_s=10.0,
        target_rt_s=TARGET_S,
        scaling=ScalingLimits(hosts=["h1", "h2", "h3", "h4"], boot_s=BOOT_S),
        base_dir=tmp_path,
        initial_instances={i: f"h{i[1:]}" for i in initial},
        probe_util_pct=probe_pct,
    )
    params = {"wait_intervals": 0, **params}
    # the paper's PRIMA: each test sets the option it is about
    return PrimaPolicy.build({"model": "m.json", "preset": "paper", **params}, ctx)


def two_at(t: float, u: float) -> Snapshot:
    return at(t, obs(t, "i1", u, u), obs(t, "i2", u, u))


def test_scale_in_takes_out_the_probes_of_the_instances_that_would_leave(
    tmp_path: Path,
) -> None:
    # U = 44 % on two instances, each with a 4 % probe. One alone carries 40 % (its own
    # probe stays, i2's leaves): 40 x 1.1 = 44 % ≤ 45 %. Judged on the measured 44 % it would
    # not (48.4 % > 45 %).
    probes = {h: 4.0 for h in ("h1", "h2", "h3", "h4")}
    p = probe_policy(tmp_path, probes)
    d = p.decide(two_at(10, 22.0))
    assert p.trial_ == ("i2",) and d.detail["scale_in_load_pct"] == pytest.approx(40.0)
    assert "(U=40.0% without the leaving instances' probes): trying them without i2" in d.reason


def test_the_leaving_probe_is_the_one_on_the_leaving_instances_host(tmp_path: Path) -> None:
    # Equal capacities: i1 is kept, i2 leaves. U = 45 %: without i2's 8 % probe, 37 x 1.1 ≤ 45;
    # without a 4 % one, 41 x 1.1 = 45.1 > 45.
    other = {"h3": 4.0, "h4": 4.0}
    p = probe_policy(tmp_path, {"h1": 4.0, "h2": 8.0, **other})
    p.decide(two_at(10, 22.5))
    assert p.trial_ == ("i2",)
    p = probe_policy(tmp_path, {"h1": 8.0, "h2": 4.0, **other})
    p.decide(two_at(10, 22.5))
    assert p.trial_ == ()


def test_weights_follow_capacity_less_the_probe_each_instance_carries_anyway(
    tmp_path: Path,
) -> None:
    # i1 beside a 20 % neighbour (U_max 35 %), i2 clean (45 %); 4 % probes. Weighted ∝ U_max,
    # i1 would get 35/80 of the requests; its probe comes on top whatever its weight, so the
    # requests split as 31 : 41.
    probes = {h: 4.0 for h in ("h1", "h2", "h3", "h4")}
    p = probe_policy(tmp_path, probes)
    d = p.decide(at(10, obs(10, "i1", 28.0, 48.0), obs(10, "i2", 28.0, 28.0)))
    rows = instance_rows(d.detail)
    caps = [rows[i]["u_max_pct"] for i in ("i1", "i2")]
    assert caps == [pytest.approx(sb.capacity(20.0, TARGET_S), abs=0.2), pytest.approx(CAP0)]
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    expected = proportional_array(np.array(caps) - 4.0)
    assert [w["i1"], w["i2"]] == expected.tolist()
    assert expected.tolist() != proportional_array(np.array(caps)).tolist()


def test_scale_out_counts_the_probe_each_new_instance_brings(tmp_path: Path) -> None:
    # One instance at U = 88 % (SF 0: not probed yet): short by 43 %. A new instance carries
    # 45 % less its own 4 % probe: two are needed, not one; while they boot the plan counts
    # 2 x 41 %, so 88 % is covered and no third is asked for.
    probes = {h: 4.0 for h in ("h1", "h2", "h3", "h4")}
    p = probe_policy(tmp_path, probes, initial=("i1",))
    d = p.decide(at(10, obs(10, "i1", 88.0, 88.0, probe=False)))
    assert adds(d) == ["n1", "n2"] and "short by 43.0%" in d.reason
    d = p.decide(at(20, obs(20, "i1", 88.0, 88.0, probe=False)))
    assert adds(d) == [] and d.detail["planned_capacity_pct"] == pytest.approx(45 + 2 * 41)


def test_the_probes_share_of_u_comes_from_the_scenario() -> None:
    scenario = load_scenario(SCENARIOS / "prima" / "table6-video-lab.yaml")
    ctx = policy_context(scenario)
    # 500,000 bytes once a second over 100 Mbit/s: 4 %.
    assert ctx.probe_util_pct == {"h1": pytest.approx(4.0), "h2": pytest.approx(4.0)}
    no_probe = scenario.model_copy(update={"probe": None})
    assert policy_context(no_probe).probe_util_pct == {}


def test_a_neighbour_hidden_below_the_knee_fails_the_trial(tmp_path: Path) -> None:
    # i1 shows its 20 % neighbour (SF > 0): U_max 35 %. i2 carries 5 % beside a 34 % neighbour:
    # 39 % in all is below the IM's knee (40 %), so SF 0 and U_max reads 45 %: i2 alone looks
    # enough for 33 %. Carrying it, i2 shows the neighbour (U_max 28 %): the trial fails and
    # i1 takes load again, and the next try waits twice as long.
    p = policy(tmp_path, 2, wait_intervals=1)
    before = [obs(0, "i1", 28.0, 48.0), obs(0, "i2", 5.0, 39.0)]
    p.decide(at(10, *before))
    d = p.decide(at(20, *before))
    assert p.trial_ == ("i1",) and removes(d) == []
    rows = instance_rows(d.detail)
    assert rows["i1"]["u_max_pct"] == pytest.approx(sb.capacity(20.0, TARGET_S), abs=0.2)
    assert rows["i2"]["u_max_pct"] == pytest.approx(CAP0, abs=0.2)
    after = [obs(0, "i1", 0.0, 20.0), obs(0, "i2", 33.0, 67.0)]
    for t in (30, 40, 50):  # median of the last 3 probe samples: the second new one shows it
        d = p.decide(at(t, *after))
        assert removes(d) == [] and adds(d) == []
    assert p.trial_ == () and p.trial_failures_ == 1
    assert "trial failed, i1 back in; next try after 4 interval(s)" in d.reason
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert w["i1"] > 0


def test_scale_out_avoids_a_host_it_left_behind_a_neighbour(tmp_path: Path) -> None:
    # i1 on h1 shows a 35 % neighbour, i2 on h2 none. One instance does: i1, the weaker, goes,
    # and h1 is remembered with its U_int. When the load grows, the free hosts are h1 and h3:
    # the new instance goes on h3, not on h1 first in preference order.
    p = policy(tmp_path, 2, hosts=3, wait_intervals=0)
    p.decide(at(10, obs(10, "i1", 10.0, 45.0), obs(10, "i2", 10.0, 10.0)))
    assert p.trial_ == ("i1",)
    for t in (20, 30, 40, 50):  # the trial: i2 carries the load; i1 still reads its neighbour
        d = p.decide(at(t, obs(t, "i1", 10.0, 45.0), obs(t, "i2", 20.0, 20.0)))
    assert removes(d) == ["i1"]
    assert p.host_u_int_["h1"] == pytest.approx(35.0, abs=0.5)
    p.decide(at(60, obs(60, "i1", 0.0, 35.0), obs(60, "i2", 20.0, 20.0)))  # i1 drains
    d = p.decide(at(70, obs(70, "i2", 50.0, 50.0)))  # gone; 50 % > 45 %
    assert [(a.instance_id, a.host) for a in d.actions if isinstance(a, AddInstance)] == [
        ("n1", "h3")
    ]
    fleet = Fleet(initial={"i2": "h2"}, hosts=["h1", "h2", "h3"])
    assert [a.host for a in fleet.add_many(2)] == ["h1", "h3"]
    assert [a.host for a in fleet.add_many(1)] == []  # no free host left
    fleet = Fleet(initial={"i2": "h2"}, hosts=["h1", "h2", "h3"])
    assert [a.host for a in fleet.add_many(2, avoid={"h1": 35.0})] == ["h3", "h1"]


# -- fleet -----------------------------------------------------------------------------------
def test_add_many_takes_free_hosts_in_order_within_the_cap() -> None:
    f = Fleet({"i1": "h1"}, hosts=("h1", "h2", "h3", "h4"), max_instances=3)
    got = f.add_many(5)
    assert got == (AddInstance("n1", "h2", 0), AddInstance("n2", "h3", 0))
    assert f.add_many(1) == () and not f.can_add()


def test_expired_pending_frees_its_host() -> None:
    f = Fleet({"i1": "h1"}, hosts=("h2",), pending_timeout_s=30.0)
    f.update(snap(10, i1={}))
    f.add()
    f.update(snap(40, i1={}))
    assert f.pending_add == {"n1": "h2"} and f.expired_ == ()
    f.update(snap(50, i1={}))
    assert f.pending_add == {} and f.expired_ == ("n1",) and f.free_host() == "h2"


def test_reweight_many_matches_reweight() -> None:
    rng = np.random.default_rng(3)
    shares = rng.uniform(0.0, 50.0, 40)
    shares[[3, 7]] = 0.0
    ids = [f"i{k}" for k in range(40)]
    assert proportional_array(shares).tolist() == list(
        proportional_weights(dict(zip(ids, shares.tolist(), strict=True))).values()
    )
    a = Fleet(dict.fromkeys(ids, "h"))
    b = Fleet(dict.fromkeys(ids, "h"))
    w = proportional_array(shares)
    assert a.reweight_many(ids, w) == b.reweight(dict(zip(ids, w.tolist(), strict=True)))
    assert a.reweight_many(ids, w * 0 + 7) == b.reweight(dict.fromkeys(ids, 7))
    assert a.reweight_many(ids, w * 0 + 9) == ()  # same split as 7 everywhere


# -- issue 25: dropping idle instances, partial trials, onsets, host memory --------------------
def cols(d: Decision, iid: str) -> dict[str, object]:
    return instance_rows(d.detail)[iid]


def test_an_instance_left_no_capacity_is_dropped_after_that_many_intervals(
    tmp_path: Path,
) -> None:
    # i2 at U 5 behind a neighbour of 95 %: U_total 100, SF 6, U_int 95, U_max 45 - 95 / 2 < 0
    # (clamped at 0): no room for requests. i1 carries 30 % of its 45: no shortfall, and a
    # headroom of 10x keeps any scale-in away. After two such intervals i2 goes (it serves at
    # the weight 0 set in the first: an instance given new weights is not removed at once).
    p = policy(tmp_path, 2, drop_idle_intervals=2, scale_in_headroom=10.0)
    d = p.decide(at(10, obs(10, "i1", 30.0, 30.0), obs(10, "i2", 5.0, 100.0)))
    assert cols(d, "i2")["u_max_pct"] == 0.0 and removes(d) == []
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert w == {"i1": 256, "i2": 0}
    o1 = replace(obs(20, "i1", 30.0, 30.0), weight=256)
    d = p.decide(at(20, o1, replace(obs(20, "i2", 5.0, 100.0), weight=0)))
    assert removes(d) == ["i2"] and d.detail["dropped_idle"] == ["i2"]
    assert "no capacity left for requests for 2 interval(s) (i2)" in d.reason


def test_without_drop_idle_an_instance_with_no_capacity_stays(tmp_path: Path) -> None:
    p = policy(tmp_path, 2, scale_in_headroom=10.0)
    for t in (10, 20, 30):
        d = p.decide(at(t, obs(t, "i1", 30.0, 30.0), obs(t, "i2", 5.0, 100.0)))
        assert removes(d) == []


def test_a_failed_trial_brings_back_only_the_instances_it_needs(tmp_path: Path) -> None:
    # Four instances at 9 % (U = 36 %): one would carry it (36 x 1.1 = 39.6 <= 45), so i2..i4
    # go on trial. i1 then carries 42 %, 42 x 1.1 = 46.2 > 45: 1.2 % short of the headroom.
    # With scale_in_partial one instance on trial (45 % of capacity) makes that up: it comes
    # back and the other two go; without, all three come back.
    def run(partial: bool) -> Decision:
        p = policy(tmp_path, 4, wait_intervals=0, scale_in_headroom=0.1, scale_in_partial=partial)
        p.decide(at(10, *[obs(10, f"i{k}", 9.0, 9.0) for k in range(1, 5)]))
        assert p.trial_ == ("i2", "i3", "i4")
        for t in (20, 30, 40, 50):
            rest = [obs(t, f"i{k}", 0.0, 0.0) for k in range(2, 5)]
            d = p.decide(at(t, obs(t, "i1", 42.0, 42.0), *rest))
        return d

    d = run(True)
    assert removes(d) == ["i3", "i4"] and d.detail["kept"] == ["i1", "i2"]
    assert "with i2 back from the trial: scale in, removing 2 (i3, i4)" in d.reason
    assert removes(run(False)) == []


def test_an_onset_reads_the_neighbour_at_twice_its_first_reading(tmp_path: Path) -> None:
    # i1 at U 30 reads no neighbour (U_total 30, below the knee); then U_total 50: SF 1.0,
    # U_int = 50 - 30 = 20, U_max = 45 - 20 / 2 = 35. An onset (last U_int 0 <= 2 %) takes
    # U_int 2 x 20 = 40, U_max = 45 - 40 / 2 = 25, for that interval only; the next reading of
    # the same neighbour is taken as read.
    p = policy(tmp_path, 2, onset_scale=2.0, sf_window=1, scale_in_headroom=10.0)
    p.decide(at(10, obs(10, "i1", 30.0, 30.0), obs(10, "i2", 30.0, 30.0)))
    d = p.decide(at(20, obs(20, "i1", 30.0, 50.0), obs(20, "i2", 30.0, 30.0)))
    assert d.detail["onset"] == ["i1"]
    assert cols(d, "i1")["u_int_pct"] == pytest.approx(40.0, abs=0.3)
    assert cols(d, "i1")["u_max_pct"] == pytest.approx(25.0, abs=0.3)
    assert cols(d, "i2")["u_max_pct"] == pytest.approx(45.0, abs=0.3)
    d = p.decide(at(30, obs(30, "i1", 30.0, 50.0), obs(30, "i2", 30.0, 30.0)))
    assert "onset" not in d.detail
    assert cols(d, "i1")["u_int_pct"] == pytest.approx(20.0, abs=0.3)
    assert cols(d, "i1")["u_max_pct"] == pytest.approx(35.0, abs=0.3)
    # without the option the first reading is taken as read
    q = policy(tmp_path, 2, sf_window=1, scale_in_headroom=10.0)
    q.decide(at(10, obs(10, "i1", 30.0, 30.0), obs(10, "i2", 30.0, 30.0)))
    d = q.decide(at(20, obs(20, "i1", 30.0, 50.0), obs(20, "i2", 30.0, 30.0)))
    assert cols(d, "i1")["u_max_pct"] == pytest.approx(35.0, abs=0.3)


def test_an_onset_felt_in_the_response_time_leaves_no_capacity(tmp_path: Path) -> None:
    # As above, with onset_zero_on_miss: i1's onset interval measured 30 ms against R_th 25,
    # so it gets U_max 0 for the next interval; measured at 20 ms it keeps the doubled
    # reading's 25; the interval after, read with the neighbour there throughout, is as read.
    def second(rt_s: float) -> tuple[PrimaPolicy, Decision]:
        p = policy(
            tmp_path, 2, onset_scale=2.0, onset_zero_on_miss=True, sf_window=1,
            scale_in_headroom=10.0, calibrate=False,
        )  # fmt: skip
        p.decide(at(10, obs(10, "i1", 30.0, 30.0), obs(10, "i2", 30.0, 30.0)))
        i1 = replace(obs(20, "i1", 30.0, 50.0), requests=10, mean_rt_seconds=rt_s)
        return p, p.decide(at(20, i1, obs(20, "i2", 30.0, 30.0)))

    p, d = second(0.030)
    assert d.detail["onset"] == ["i1"]
    assert cols(d, "i1")["u_max_pct"] == 0.0
    assert cols(d, "i2")["u_max_pct"] == pytest.approx(45.0, abs=0.3)
    i1 = replace(obs(30, "i1", 30.0, 50.0), requests=10, mean_rt_seconds=0.030)
    d = p.decide(at(30, i1, obs(30, "i2", 30.0, 30.0)))
    assert cols(d, "i1")["u_max_pct"] == pytest.approx(35.0, abs=0.3)
    _, d = second(0.020)
    assert cols(d, "i1")["u_max_pct"] == pytest.approx(25.0, abs=0.3)


def test_host_memory_forgets_an_old_neighbour_reading(tmp_path: Path) -> None:
    # U_int 40 read on h2 at 100 s and 10 on h3 at 400 s. With 300 s of memory, at 400 s h2
    # scores 40 e^-1 = 14.7 and h3 10 (h3 is taken first); at 700 s h2 scores 40 e^-2 = 5.4
    # and h3 10 e^-1 = 3.7 (h3 still first).
    p = policy(tmp_path, 1, host_memory_s=300.0)
    p.scale_in_.host_u_int_["h2"] = 40.0
    p.now_s_ = 100.0
    assert p._avoid() == {"h2": pytest.approx(40.0)}
    p.scale_in_.host_u_int_["h3"] = 10.0
    p.now_s_ = 400.0
    assert p._avoid() == {"h2": pytest.approx(40 * math.exp(-1)), "h3": pytest.approx(10.0)}
    p.now_s_ = 700.0
    got = p._avoid()
    assert got["h2"] == pytest.approx(40 * math.exp(-2))
    assert got["h3"] == pytest.approx(10 * math.exp(-1))
    assert policy(tmp_path, 1)._avoid() == {}


def test_a_new_instance_can_serve_at_once_with_a_clean_capacity(tmp_path: Path) -> None:
    # new_instance_load: clean: n1, up and without a probe reading, is weighed as an
    # interference-free instance (U_max 45 %, as i1): equal weights, nothing awaited, and
    # 2 x 45 = 90 % carries U 50 %, so nothing more is asked for.
    p = policy(tmp_path, 1, wait_intervals=0, new_instance_load="clean")
    assert adds(p.decide(at(10, obs(10, "i1", 50.0, 50.0)))) == ["n1"]
    n1 = replace(obs(40, "n1", 0.0, 0.0, probe=False), weight=0)  # added at weight 0
    d = p.decide(at(40, obs(40, "i1", 50.0, 50.0), n1))
    assert d.detail["awaiting_sf"] == [] and adds(d) == []
    assert cols(d, "n1")["u_max_pct"] == pytest.approx(CAP0, abs=0.3)
    assert cols(d, "n1")["sf_probe"] is None
    assert d.detail["capacity_sum_pct"] == pytest.approx(2 * CAP0, abs=0.5)
    w = {a.instance_id: a.weight for a in d.actions if isinstance(a, SetWeight)}
    assert w == {"i1": 256, "n1": 256}  # equal capacities, equal weights
    # without the option it waits at weight 0 for its SF
    q = policy(tmp_path, 1, wait_intervals=0)
    q.decide(at(10, obs(10, "i1", 50.0, 50.0)))
    d = q.decide(at(40, obs(40, "i1", 50.0, 50.0), n1))
    assert d.detail["awaiting_sf"] == ["n1"] and "n1" not in instance_rows(d.detail)
    # once its probe reports a neighbour (U_total 70 % at its U 10 %: U_int 60 %) the capacity
    # measured replaces the clean one: U_max 15 %, as above.
    d = p.decide(at(50, obs(50, "i1", 40.0, 40.0), obs(50, "n1", 10.0, 70.0)))
    assert cols(d, "n1")["u_max_pct"] == pytest.approx(sb.capacity(60.0, TARGET_S), abs=0.2)


def test_a_glance_cuts_an_instance_served_slowly_to_its_capacity_and_leaves_scaling_to_the_vote(
    tmp_path: Path,
) -> None:
    p = policy(tmp_path, 4, wait_intervals=5, fast_interval_s=1.0, safety_factor=0.1)
    # 4 × 30 % = 120 %, × 1.1 = 132 % against 4 × 45 %: the others have 3 × 15 % to spare
    d = p.decide(at(10, *[obs(10, f"i{k}", 30.0, 30.0) for k in range(1, 5)]))
    assert adds(d) == []
    busy = {f"i{k}": {"served_util_pct": 30.0, "busy_seconds": 0.3} for k in range(1, 5)}
    busy["i2"] = {"served_util_pct": 2.0, "busy_seconds": 1.0}  # a neighbour left it 2 %
    glance = Snapshot(
        11.0, "test", {i: Observation(11.0, i, 1.0, requests=4, extra=e) for i, e in busy.items()}
    )
    f = p.react(glance)
    assert p.fast_ is not None
    left = float(p.fast_.model.capacity_for(np.array([98.0])).value[0])
    weights = {a.instance_id: a.weight for a in f.actions if isinstance(a, SetWeight)}
    assert list(weights) == ["i2"] and f.detail["u_max_pct"] == [left]
    assert left == 0.0 and weights["i2"] == 0  # the bundle leaves nothing behind 98 %
    assert adds(f) == []  # the interval's vote adds

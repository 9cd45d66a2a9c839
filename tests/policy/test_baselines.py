"""The baseline policies of PRIMA Section V-D on the paper's own situations, as numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.errors import InputError
from quell.policy import policy_class
from quell.policy.baselines import (
    LeastConnPolicy,
    LeastResponsePolicy,
    LeastSeverityPolicy,
    RoundRobinPolicy,
    ThresholdPolicy,
    least_first_shares,
)
from quell.policy.context import PolicyContext
from quell.policy.fleet import Fleet
from quell.scenario.load import parse_scenario
from quell.scenario.policy import build_policy
from tests.policy.snapshots import context, flat_table, probe_for, snap, write_bundle

ROOT = Path(__file__).resolve().parents[2]
R_TH = 0.200  # Fig. 2, 3 and Table V: R_th = 200 ms


def lsf(ctx: PolicyContext | None = None, wait: int = 1) -> LeastSeverityPolicy:
    ctx = ctx or context(initial={"i1": "h1"}, hosts=("h2", "h3"), target_rt_s=R_TH)
    return LeastSeverityPolicy(R_TH, Fleet.from_context(ctx), flat_table(), wait)


def lr(ctx: PolicyContext | None = None) -> LeastResponsePolicy:
    ctx = ctx or context(initial={"i1": "h1", "i2": "h2"}, hosts=("h3",), target_rt_s=R_TH)
    return LeastResponsePolicy(R_TH, Fleet.from_context(ctx))


def weights_of(actions: tuple[Any, ...]) -> dict[str, int]:
    return {a.instance_id: a.weight for a in actions if isinstance(a, SetWeight)}


# -- the ranking rule (Section V-D) ----------------------------------------------------------
def test_lowest_score_gets_the_largest_share() -> None:
    assert least_first_shares({"a": 0.75, "b": 0.25}) == {"b": 0.75, "a": 0.25}
    shares = least_first_shares({"a": 0.5, "b": 0.3, "c": 0.2})
    assert shares == pytest.approx({"c": 0.5, "b": 0.3, "a": 0.2})
    assert least_first_shares({"a": 0.0, "b": 0.0}) == {"a": 0.5, "b": 0.5}
    assert least_first_shares({}) == {}


# -- LSF: Fig. 2 and Fig. 3 ------------------------------------------------------------------
def lsf_fig2(sf_new: float) -> list[Any]:
    """Fig. 2/3: i1 alone at U = 40 %, SF 0.75, R = 245 ms > R_th; the new instance boots,
    then its probe reports ``sf_new``. Returns the decisions at t = 10, 20, 30, 40."""
    p = lsf()
    i1 = {"util_pct": 40.0, "mean_rt_seconds": 0.245, "probe": probe_for(0.75), "weight": 100}
    d = [p.decide(snap(10, i1=i1)), p.decide(snap(20, i1=i1))]
    new = {"util_pct": 5.0, "probe": probe_for(sf_new), "weight": 0}  # idle, probe only
    d += [p.decide(snap(30, i1=i1, n1=new)), p.decide(snap(40, i1=i1, n1=new))]
    return d


def test_fig2_lsf_spins_a_new_instance_when_the_only_instance_violates() -> None:
    d = lsf_fig2(0.75)
    assert d[0].actions == ()  # W = 1: one more interval to confirm
    assert d[1].actions == (AddInstance("n1", "h2", 0),)
    assert "adding n1 on h2" in d[1].reason and d[1].detail["violating"] == ["i1"]
    assert d[2].actions == ()  # n1 serves now; the violation has to persist W+1 again
    # equal SF 0.75/0.75 → equal split (U1 = U2 = 20 % in the paper)
    assert weights_of(d[3].actions) == {"i1": 256, "n1": 256}
    assert d[3].detail["sf"] == pytest.approx({"i1": 0.75, "n1": 0.75})


def test_fig3_lsf_gives_three_times_the_load_to_the_instance_with_a_third_of_the_sf() -> None:
    d = lsf_fig2(0.25)
    w = weights_of(d[3].actions)
    assert w == {"i1": 85, "n1": 256}  # 0.25 : 0.75 of the load
    assert w["n1"] / w["i1"] == pytest.approx(3.0, rel=0.01)
    assert d[3].detail["shares"] == pytest.approx({"n1": 0.75, "i1": 0.25})
    assert d[3].detail["sf_total"] == pytest.approx(1.0)
    # U = 40 % in all: U1 → 10 %, U2 → 30 % as in the paper
    assert [40 * d[3].detail["shares"][i] for i in ("i1", "n1")] == pytest.approx([10, 30])


def test_lsf_waits_for_the_new_instance_sf_and_does_not_add_while_one_boots() -> None:
    p = lsf()
    i1 = {"util_pct": 40.0, "mean_rt_seconds": 0.245, "probe": probe_for(0.75), "weight": 100}
    p.decide(snap(10, i1=i1))
    assert isinstance(p.decide(snap(20, i1=i1)).actions[0], AddInstance)
    for t in (30, 40, 50):  # n1 still booting: no second instance
        assert p.decide(snap(t, i1=i1)).actions == ()
    no_probe = {"util_pct": 5.0}
    p.decide(snap(60, i1=i1, n1=no_probe))
    waiting = p.decide(snap(70, i1=i1, n1=no_probe))
    assert waiting.actions == () and "no sf yet for ['n1']" in waiting.reason


def test_lsf_all_zero_sf_gives_equal_weights_and_never_scales_in() -> None:
    ctx = context(initial={"i1": "h1", "i2": "h2"}, target_rt_s=R_TH)
    p = lsf(ctx)
    obs = {"util_pct": 20.0, "probe": probe_for(0.0), "weight": 256}
    slow = {**obs, "mean_rt_seconds": 0.25, "weight": 50}
    p.decide(snap(10, i1=slow, i2=obs))
    d = p.decide(snap(20, i1=slow, i2=obs))
    assert weights_of(d.actions) == {"i1": 256}  # i2 already has 256
    idle = {**obs, "util_pct": 1.0, "mean_rt_seconds": 0.01}
    for t in range(30, 100, 10):
        assert p.decide(snap(t, i1=idle, i2=idle)).actions == ()


def test_lsf_adds_nothing_when_the_fleet_is_full_and_reweights_instead() -> None:
    ctx = context(initial={"i1": "h1", "i2": "h2"}, hosts=("h2",), target_rt_s=R_TH)
    p = lsf(ctx)
    a = {"util_pct": 40.0, "mean_rt_seconds": 0.3, "probe": probe_for(0.6)}
    b = {"util_pct": 40.0, "mean_rt_seconds": 0.3, "probe": probe_for(0.2)}
    p.decide(snap(10, i1=a, i2=b))
    d = p.decide(snap(20, i1=a, i2=b))
    assert weights_of(d.actions) == {"i1": 85, "i2": 256}


# -- LR: Table V -----------------------------------------------------------------------------
def test_table5_lr_gives_more_load_to_the_instance_with_the_lower_rt() -> None:
    p = lr()
    i1 = {"util_pct": 35.0, "mean_rt_seconds": 0.220, "weight": 100}
    i2 = {"util_pct": 15.0, "mean_rt_seconds": 0.105, "weight": 100}
    assert p.decide(snap(10, i1=i1, i2=i2)).actions == ()
    d = p.decide(snap(20, i1=i1, i2=i2))
    w = weights_of(d.actions)
    assert w["i2"] == 256 and w["i1"] == round(256 * 105 / 220)
    # 50 % in all: the paper's LR allocation U1 = 17 %, U2 = 33 %
    u = {i: 50 * s for i, s in d.detail["shares"].items()}
    assert u == pytest.approx({"i1": 17, "i2": 33}, abs=1)
    assert d.detail["violating"] == ["i1"] and "lr:" in d.reason


def test_lr_remembers_the_last_rt_of_an_instance_without_requests() -> None:
    p = lr()  # W = 1: each split after two intervals over R_th
    for t in (10, 20):
        d = p.decide(snap(t, i1={"mean_rt_seconds": 0.3}, i2={"mean_rt_seconds": 0.1}))
    assert weights_of(d.actions) == {"i1": 85, "i2": 256}
    for t in (30, 40):
        d = p.decide(snap(t, i1={"mean_rt_seconds": 0.3}, i2={}))
    assert d.actions == () and p.streak.count_ == 2  # due: the same split, from i2's last RT


def test_lr_adds_with_the_weight_in_force_so_the_new_instance_gets_load() -> None:
    ctx = context(initial={"i1": "h1"}, hosts=("h2",), target_rt_s=R_TH)
    p = lr(ctx)
    assert p.decide(snap(10, i1={"mean_rt_seconds": 0.3, "weight": 100})).actions == ()
    d = p.decide(snap(20, i1={"mean_rt_seconds": 0.3, "weight": 100}))
    assert d.actions == (AddInstance("n1", "h2", 100),)


# -- rr, lc ----------------------------------------------------------------------------------
def test_rr_equal_weights_only_when_something_changed() -> None:
    p = RoundRobinPolicy.build({}, context(initial={"i1": "h1", "i2": "h2"}))
    assert p.decide(snap(1, i1={"weight": 100}, i2={"weight": 100})).actions == ()
    d = p.decide(snap(2, i1={"weight": 100}, i2={"weight": 30}))
    assert weights_of(d.actions) == {"i1": 256, "i2": 256} and d.reason
    assert p.decide(snap(3, i1={"weight": 256}, i2={"weight": 256})).actions == ()
    d = p.decide(snap(4, i1={"weight": 256}, i2={"weight": 256}, x1={"weight": 0}))
    assert d.actions == (SetWeight("x1", 256),)  # a newcomer gets its equal share
    # rr never scales, however slow or busy
    for t in range(5, 10):
        slow = {"weight": 256, "mean_rt_seconds": 9.0, "util_pct": 99.0}
        assert p.decide(snap(t, i1=slow, i2=slow, x1=slow)).actions == ()


def test_lc_needs_haproxy_leastconn() -> None:
    with pytest.raises(InputError) as err:
        LeastConnPolicy.build({}, context(lb_algorithm="roundrobin"))
    assert [p.location for p in err.value.problems] == ["load_balancer.algorithm"]
    p = LeastConnPolicy.build(
        {}, context(initial={"i1": "h1", "i2": "h2"}, lb_algorithm="leastconn")
    )
    d = p.decide(snap(1, i1={"weight": 10}, i2={"weight": 100}))
    assert weights_of(d.actions) == {"i1": 256, "i2": 256} and d.reason.startswith("least conn")


# -- threshold -------------------------------------------------------------------------------
def threshold(**params: Any) -> ThresholdPolicy:
    ctx = context(initial={"i1": "h1", "i2": "h2"}, hosts=("h3", "h4"), max_instances=4)
    return ThresholdPolicy.build(params, ctx)


def u(t: float, *pcts: float, weight: int = 256, ids: tuple[str, ...] = ("i1", "i2", "n1")) -> Any:
    return snap(
        t, **{i: {"util_pct": x, "weight": weight} for i, x in zip(ids, pcts, strict=False)}
    )


def test_threshold_scales_out_after_w_plus_1_hot_intervals_and_waits_for_the_boot() -> None:
    p = threshold()
    assert p.decide(u(1, 35, 30)).actions == ()  # mean 32.5 > 30, first interval
    d = p.decide(u(2, 35, 30))
    assert d.actions == (AddInstance("n1", "h3", 256),) and "adding n1 on h3" in d.reason
    for t in (3, 4, 5):  # still hot, but n1 boots: no second instance
        assert p.decide(u(t, 40, 40)).actions == ()
    assert p.decide(u(6, 20, 20, 20)).actions == ()  # n1 serves with its equal weight


def test_threshold_hysteresis_between_the_thresholds_nothing_happens() -> None:
    p = threshold()
    for t, (a, b) in enumerate([(35, 20), (10, 20), (31, 40), (16, 20), (29, 29)]):
        assert p.decide(u(t, a, b)).actions == (), (a, b)  # never two hot/cold intervals in a row


def test_threshold_scales_in_only_when_the_rest_stays_below_the_upper_threshold() -> None:
    p = threshold(scale_out_util_pct=20, scale_in_util_pct=15)
    for t in range(5):  # mean 14 < 15, but two instances at 28 % would be above 20 %
        d = p.decide(u(t, 14, 14))
        assert d.actions == ()
    p = threshold()
    assert p.decide(u(10, 10, 12)).actions == ()
    d = p.decide(u(11, 10, 12))  # mean 11 < 15 and 22 % on one instance < 30 %
    assert d.actions == (RemoveInstance("i2", True),) and "removing i2" in d.reason
    assert d.detail["mean_after_scale_in_pct"] == pytest.approx(22.0)
    # i2 drains (still reported) and is no capacity; min_instances = 1 stops the next one
    for t in range(12, 16):
        assert p.decide(u(t, 5, 5)).actions == ()


def test_threshold_wait_intervals() -> None:
    p = threshold(wait_intervals=0)
    assert isinstance(p.decide(u(1, 50, 50)).actions[0], AddInstance)
    p = threshold(wait_intervals=3)
    assert [bool(p.decide(u(t, 50, 50)).actions) for t in range(4)] == [False] * 3 + [True]


# -- W waiting (LSF) -------------------------------------------------------------------------
@pytest.mark.parametrize("wait", [0, 1, 2, 4])
def test_lsf_acts_after_exactly_w_plus_1_violating_intervals(wait: int) -> None:
    p = lsf(wait=wait)
    i1 = {"util_pct": 40.0, "mean_rt_seconds": 0.245, "probe": probe_for(0.75)}
    acted = [bool(p.decide(snap(t, i1=i1)).actions) for t in range(wait + 1)]
    assert acted == [False] * wait + [True]


def test_an_interval_without_violation_restarts_the_wait() -> None:
    p = lsf(wait=1)
    bad = {"util_pct": 40.0, "mean_rt_seconds": 0.245, "probe": probe_for(0.75)}
    ok = {**bad, "mean_rt_seconds": 0.150}
    no_data = {"util_pct": 0.0}  # no request completed: no evidence of a violation
    seq = [bad, ok, bad, no_data, bad, bad]
    assert [bool(p.decide(snap(t, i1=o)).actions) for t, o in enumerate(seq)] == [False] * 5 + [
        True
    ]


# -- bad params ------------------------------------------------------------------------------
def locations(name: str, params: dict[str, Any], ctx: PolicyContext | None = None) -> list[str]:
    with pytest.raises(InputError) as err:
        policy_class(name).build(params, ctx or context())
    assert err.value.source == f"policy {name}"
    return sorted(p.location for p in err.value.problems)


def test_unknown_parameter_names_its_location() -> None:
    assert locations("rr", {"bogus": 1}) == ["policy.params.bogus"]
    assert locations("threshold", {"scale_out": 40}) == ["policy.params.scale_out"]


def test_negative_w_and_every_problem_at_once() -> None:
    assert locations("lr", {"wait_intervals": 1}) == ["policy.params.wait_intervals"]  # none
    assert locations("lsf", {"wait_intervals": -1, "x": 1}) == [
        "policy.params.model",
        "policy.params.wait_intervals",
        "policy.params.x",
    ]
    assert locations("threshold", {"wait_intervals": True}) == ["policy.params.wait_intervals"]


def test_threshold_lower_must_be_below_upper() -> None:
    assert locations("threshold", {"scale_out_util_pct": 20, "scale_in_util_pct": 25}) == [
        "policy.params.scale_in_util_pct"
    ]
    assert locations("threshold", {"scale_out_util_pct": 0}) == ["policy.params.scale_out_util_pct"]


def test_lsf_and_lr_need_a_target_and_lsf_the_probe_and_its_model(tmp_path: Path) -> None:
    assert locations("lr", {}, context(target_rt_s=None)) == ["target.mean_rt_s"]
    assert locations("lsf", {"model": "m"}, context(target_rt_s=None)) == ["target.mean_rt_s"]
    ctx = PolicyContext(interval_s=10, target_rt_s=R_TH, base_dir=tmp_path)
    assert locations("lsf", {"model": "missing.json"}, ctx) == ["policy.params.model", "probe"]


def test_lsf_build_reads_the_probe_table_from_the_bundle(tmp_path: Path) -> None:
    write_bundle(tmp_path / "m.json", r_iso_s=0.08)
    ctx = context()
    ctx = PolicyContext(**{**ctx.__dict__, "base_dir": tmp_path})
    p = LeastSeverityPolicy.build({"model": "m.json", "wait_intervals": 0}, ctx)
    assert p.estimator.table.predict(50.0) == pytest.approx(0.08, rel=1e-3)
    assert p.streak.wait == 0
    with pytest.raises(InputError) as err:
        LeastSeverityPolicy.build({"model": "m.json", "workload": "video"}, ctx)
    assert [x.location for x in err.value.problems] == ["meta.workload"]


def test_build_policy_from_a_scenario_file() -> None:
    data = yaml.safe_load((ROOT / "scenarios/interference-smoke.yaml").read_text())
    data["load_balancer"] = {"algorithm": "leastconn"}
    data["scaling"] = {"hosts": ["h1", "h2"], "max_instances": 2}
    data["target"] = {"mean_rt_s": 0.05}
    scenario = parse_scenario(data)
    for name, cls in [
        ("rr", RoundRobinPolicy),
        ("lc", LeastConnPolicy),
        ("lr", LeastResponsePolicy),
    ]:
        spec = scenario.policy.model_copy(update={"name": name})
        assert type(build_policy(spec, scenario, ROOT)) is cls
    spec = scenario.policy.model_copy(update={"name": "threshold", "params": {"wait_intervals": 2}})
    p = build_policy(spec, scenario, ROOT)
    assert isinstance(p, ThresholdPolicy) and p.fleet.active == ("i1", "i2")
    assert not p.fleet.can_add()  # both scaling hosts are taken


def test_lsf_model_name_too_long_for_the_file_system_is_a_problem_not_a_traceback() -> None:
    # a 300-character name (600 bytes in UTF-8) makes stat() fail with ENAMETOOLONG
    params = {"model": "é" * 300, "workload": "file-100k"}
    ctx = context(probe_period_s=1.0)
    with pytest.raises(InputError) as err:
        policy_class("lsf").build(params, ctx)
    [problem] = err.value.problems
    assert problem.location == "policy.params.model"
    assert "File name too long" in problem.message

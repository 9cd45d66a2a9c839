"""``defence`` on built snapshots: PRIMA over the synthetic bundle whose capacities are known in
closed form (``tests.prima.bundles``: U_max = 45 % with no neighbour at R_th = 25 ms) and IC2
over the detector whose verdict follows the response time (``tests.detect.trees``: RT ≤ 0.15 s
NI, > 0.2 s I). The merged decisions, the detector's cap on PRIMA's capacity, the rule that IC2
does not reconfigure an instance PRIMA is removing, and bad parameters in both sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quell.core.action import Decision, ReconfigureServer, SetWeight
from quell.core.observation import PROVIDER_SHARE_KEY, Observation, Snapshot
from quell.errors import InputError
from quell.policy import build_policy
from quell.policy.context import PolicyContext, ScalingLimits
from quell.policy.defence import DefencePolicy
from tests.detect.trees import write_detector
from tests.prima import bundles as sb

TARGET_S = 0.025
CAP0 = sb.capacity(0.0, TARGET_S)  # 45 %
U = 20.0
IC2: dict[str, Any] = {
    "detector": "detector.json",
    "max_request_workers": 64,
    "keepalive_timeout_s": 5,
    "php_max_children": 16,
    "threads_per_child": 8,
    "graceful": False,
    "online_settings": "max_request_workers,keepalive_timeout_s,php_max_children",
}


def policy(tmp_path: Path, min_instances: int = 2, **extra: Any) -> DefencePolicy:
    sb.write_linear_bundle(tmp_path / "m.json")
    write_detector(tmp_path / "detector.json")
    ctx = PolicyContext(
        interval_s=10.0,
        target_rt_s=TARGET_S,
        scaling=ScalingLimits(hosts=["h3"], boot_s=30.0, min_instances=min_instances),
        base_dir=tmp_path,
        initial_instances={"i1": "h1", "i2": "h2"},
        request_timeout_s=10.0,
    )
    params = {"prima": {"model": "m.json", "preset": "paper"}, "ic2": IC2, **extra}
    p = build_policy("defence", params, ctx)
    assert isinstance(p, DefencePolicy)
    return p


def obs(t: float, iid: str, rt: float, weight: int, **extra: float) -> Observation:
    """An instance at U = 20 % with a clean probe (SF 0), 50 req/s at 0.5 CPU, mean RT ``rt``."""
    probe = sb.R_ISO0 + sb.R_ISO_SLOPE * U
    return Observation(
        time_s=t,
        instance_id=iid,
        interval_s=10.0,
        requests=500,
        throughput_rps=50.0,
        mean_rt_seconds=rt,
        cpu_util=0.5,
        util_pct=U,
        weight=weight,
        extra={"probe_rt_seconds": probe, **extra},
    )


def at(t: float, *o: Observation) -> Snapshot:
    return Snapshot(t, "test", {x.instance_id: x for x in o})


def run_until_i2(p: DefencePolicy, **extra: float) -> Decision:
    """Three clean intervals, then three in which i1 answers in 0.25 s (I verdicts: NI2 → T →
    I1 → I2) while its probe stays clean; the decision of the third."""
    d = Decision()
    for k in range(3):
        d = p.decide(
            at(10.0 * (k + 1), obs(10.0 * (k + 1), "i1", 0.01, 256), obs(10.0, "i2", 0.01, 256))
        )
        assert d.actions == () or all(isinstance(a, SetWeight) for a in d.actions)
    for k in range(3, 6):
        t = 10.0 * (k + 1)
        d = p.decide(at(t, obs(t, "i1", 0.25, 256, **extra), obs(t, "i2", 0.01, 256)))
    return d


def test_an_i_verdict_with_a_clean_probe_cuts_the_weight_and_reconfigures(tmp_path: Path) -> None:
    d = run_until_i2(policy(tmp_path))
    # the cap: U × R_th / RT = 20 × 0.025 / 0.25 = 2 %; weights ∝ capacity: 256 × 2 / 45 → 11
    cap = U * TARGET_S / 0.25
    assert d.detail["capped_u_max_pct"] == {"i1": pytest.approx(cap)}
    # δKAT = (0.25 − 0.01) × 3 = 0.72 s; PHP to 8 × 16; LPO unchanged: MaxRequestWorkers stays
    assert d.actions == (
        SetWeight("i1", int(256 * cap / CAP0)),
        ReconfigureServer("i1", {"keepalive_timeout_s": 5.72, "php_max_children": 128}, False),
    )
    words = d.reason.split(" | ")[0]
    assert words == (
        "i1: weight 256 → 11 [detector I2 cap; SF 0.00, U_max 2.0 %, predicted RT 0.013 s; "
        "detector I (state I2); provider share not instrumented]; "
        "i1: reconfigure keepalive_timeout_s → 5.72, php_max_children → 128 "
        "[detector I, entered I2; detector I (state I2); SF 0.00, U_max 2.0 %, "
        "predicted RT 0.013 s; provider share not instrumented]; "
        "detector I2 caps PRIMA's capacity: i1 ≤ 2.0 %"
    )
    assert "prima: " in d.reason and "ic2: i1 entered I2" in d.reason
    rows = {(r["instance"], r["action"]): r for r in d.detail["actions"]}  # type: ignore[attr-defined]
    assert rows["i1", "ReconfigureServer"]["signal"] == "detector I, entered I2"
    assert rows["i1", "SetWeight"]["weight"] == [256, 11]


def test_without_the_cap_a_clean_probe_keeps_the_interfered_instance_at_full_weight(
    tmp_path: Path,
) -> None:
    d = run_until_i2(policy(tmp_path, detector_caps_capacity=False))
    assert d.detail["capped_u_max_pct"] == {}
    # PRIMA alone: SF 0, U_max 45 %, the weights stay at 256 and only IC2 acts
    assert d.actions == (
        ReconfigureServer("i1", {"keepalive_timeout_s": 5.72, "php_max_children": 128}, False),
    )
    assert d.reason.startswith("i1: reconfigure keepalive_timeout_s → 5.72")


def test_the_provider_share_is_named_where_the_observation_carries_it(tmp_path: Path) -> None:
    d = run_until_i2(policy(tmp_path), **{PROVIDER_SHARE_KEY: 0.62})
    assert "provider share 62 % of RT" in d.reason
    assert "i2" not in d.reason.split(" | ")[0]  # i2's weight did not move


def test_ic2_does_not_reconfigure_an_instance_prima_is_removing(tmp_path: Path) -> None:
    p = policy(tmp_path, min_instances=1)
    for k in range(5):
        t = 10.0 * (k + 1)
        p.decide(at(t, obs(t, "i1", 0.01 if k < 3 else 0.25, 256), obs(t, "i2", 0.01, 256)))
    p.prima.fleet_.remove("i1")  # as a scale-in does: i1 drains
    d = p.decide(at(60.0, obs(60.0, "i1", 0.25, 0), obs(60.0, "i2", 0.01, 256)))
    assert not [a for a in d.actions if isinstance(a, ReconfigureServer)]
    assert d.detail["dropped_reconfigure"] == ["i1"]
    assert "IC2's reconfiguration of i1 dropped: PRIMA is removing it" in d.reason


def test_bad_parameters_in_either_section_are_named_all_at_once(tmp_path: Path) -> None:
    sb.write_linear_bundle(tmp_path / "m.json")
    ctx = PolicyContext(interval_s=10.0, target_rt_s=TARGET_S, base_dir=tmp_path)
    bad = {
        "prima": {"model": "m.json", "sf_windw": 3, "wait_intervals": -1},
        "ic2": {k: v for k, v in IC2.items() if k != "detector"} | {"graceful": "maybe"},
        "bogus": 1,
    }
    with pytest.raises(InputError) as err:
        build_policy("defence", bad, ctx)
    where = sorted(p.location for p in err.value.problems)
    assert where == [
        "policy.params.bogus",
        "policy.params.ic2.detector",
        "policy.params.ic2.graceful",
        "policy.params.prima.sf_windw",
        "policy.params.prima.wait_intervals",
    ]
    with pytest.raises(InputError) as err:
        build_policy("defence", {"prima": {"model": "m.json"}}, ctx)
    assert [p.location for p in err.value.problems] == ["policy.params.ic2"]


def test_on_the_shipped_fleet_it_reconfigures_under_interference_and_scales(
    tmp_path: Path,
) -> None:
    from quell.experiment.sim import run_sim
    from quell.scenario import load_scenario
    from quell.store import RunStore

    path = Path(__file__).resolve().parents[2] / "scenarios" / "defence" / "sim-fleet.yaml"
    scenario = load_scenario(path).model_copy(update={"duration_s": 120.0})
    summary = run_sim(scenario, path, tmp_path)
    with RunStore.open(Path(summary["run_dir"])) as store:
        log = [(t, reason, actions) for t, _, reason, actions in store.decisions()]
    reconfigured = [
        (t, r) for t, r, a in log if any(x.get("type") == "ReconfigureServer" for x in a)
    ]
    added = [(t, r) for t, r, a in log if any(x.get("type") == "AddInstance" for x in a)]
    # the neighbour arrives at 60 s beside web1: IC2 enters I2 there and the cap cuts its weight
    first = next((t, r) for t, r in reconfigured if "web1: reconfigure" in r)
    assert 60.0 < first[0] <= 90.0
    assert "[detector I, entered I2; detector I (state I2); SF " in first[1]
    assert "web1: weight " in first[1] and "[detector I2 cap; SF " in first[1]
    assert "provider share not instrumented" in first[1]
    assert added and all("[capacity shortfall: U " in r for _, r in added)


def test_once_cleared_the_cap_doubles_back_to_the_whole_resource(tmp_path: Path) -> None:
    p = policy(tmp_path)
    run_until_i2(p)
    caps, reasons = [], []
    for k in range(6, 11):  # NI verdicts: I2 → T → NI1 → NI2, then two more
        t = 10.0 * (k + 1)
        d = p.decide(at(t, obs(t, "i1", 0.01, 256), obs(t, "i2", 0.01, 256)))
        caps.append(d.detail["capped_u_max_pct"])
        reasons.append(d.reason.split(" | ")[0])
    # under the interference configuration (T, NI1) the cap is what i1 carries, U = 20 %; from
    # NI2 it doubles, 40 and 80 %, and goes at 160 %
    assert caps == [{"i1": 20.0}, {"i1": 20.0}, {"i1": 40.0}, {"i1": 80.0}, {}]
    # the snapshots keep reporting weight 256; 256 × 40 / 45 → 228
    assert reasons[2].startswith("i1: weight 256 → 228 [release cap; SF 0.00, U_max 40.0 %")
    assert reasons[2].endswith("cleared by the detector, capacity doubling back: i1 ≤ 40.0 %")


def test_prima_s_fast_path_runs_through_the_composition(tmp_path: Path) -> None:
    sb.write_linear_bundle(tmp_path / "m.json")
    write_detector(tmp_path / "detector.json")
    ctx = PolicyContext(
        interval_s=10.0,
        target_rt_s=TARGET_S,
        base_dir=tmp_path,
        initial_instances={"i1": "h1", "i2": "h2"},
    )
    p = build_policy(
        "defence", {"prima": {"model": "m.json", "fast_interval_s": 1.0}, "ic2": IC2}, ctx
    )
    assert isinstance(p, DefencePolicy) and p.fast_interval_s == 1.0
    p.decide(at(10.0, obs(10.0, "i1", 0.01, 256), obs(10.0, "i2", 0.01, 256)))
    behind = (sb.R_ISO0 + sb.R_ISO_SLOPE * U) * (1.0 + sb.sf_of_total(U + 80.0))
    glance = Snapshot(
        11.0,
        "test",
        {
            "i1": Observation(11.0, "i1", 1.0, requests=3, extra={"probe_rt_seconds": behind}),
            "i2": Observation(11.0, "i2", 1.0, requests=3),
        },
    )
    d = p.react(glance)
    assert [a.instance_id for a in d.actions] == ["i1"]
    assert isinstance(d.actions[0], SetWeight) and d.actions[0].weight < 256
    assert d.reason.startswith(
        "prima (fast): glance: 1 instance(s) lost capacity (i1; 0 by the rate served while busy,"
        " 1 by the probe"
    )

"""IC2 as a policy: Algorithm 1's arithmetic and bounds by hand, the knowledge base's
directions, its parameters, and hand-built snapshot sequences through the state machine (one
misclassification moves nothing; entering I2 reconfigures; NI2 restores the baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quell.core.action import Decision, ReconfigureServer
from quell.core.observation import SERVER_SETTING_KEYS, Observation, Snapshot
from quell.errors import InputError
from quell.policy import build_policy
from quell.policy.context import PolicyContext
from quell.policy.ic2 import Ic2Params, Ic2Policy
from quell.policy.ic2.knowledge import KNOWLEDGE_BASE, PAPER_ROW
from quell.policy.ic2.update import (
    Bounds,
    Evidence,
    Settings,
    reconfigure_for_interference,
    round_workers,
)
from tests.detect.trees import rt_detector, write_detector

BASE = Settings(64, 5.0, 16)
BOUNDS = Bounds(Settings(32, 1.25, 2), Settings(128, 20.0, 128))
ROW = KNOWLEDGE_BASE[PAPER_ROW]


def _update(
    lpo: float | None,
    clean: float | None,
    rt: float | None,
    rt_clean: float | None,
    tpc: int | None = 8,
) -> tuple[Settings, dict[str, Any]]:
    return reconfigure_for_interference(
        BASE, Evidence(lpo, clean, rt, rt_clean), ROW, BOUNDS, 3.0, 128, tpc
    )


# -- Algorithm 1 ---------------------------------------------------------------------------------


def test_algorithm_1_by_hand() -> None:
    new, detail = _update(0.016, 0.012, 0.3, 0.1)
    # δMXC = 64 × (0.016 − 0.012) / 0.016 = 16 → 48; δKAT = (0.3 − 0.1) × 3 = 0.6 → 5.6
    assert new == Settings(48, 5.6, 128)
    assert detail["max_request_workers"]["delta"] == pytest.approx(16.0)
    assert detail["keepalive_timeout_s"]["delta_s"] == pytest.approx(0.6)
    assert detail["max_request_workers"]["bounded"] is False


def test_each_value_stays_within_its_bounds() -> None:
    # δMXC = 64 × 0.09 / 0.1 = 57.6 → 6.4, held at 32; δKAT = 9.9 × 3 → 34.7, held at 20
    new, detail = _update(0.1, 0.01, 10.0, 0.1)
    assert new == Settings(32, 20.0, 128)
    assert detail["max_request_workers"]["bounded"] is True
    assert detail["keepalive_timeout_s"]["bounded"] is True


def test_workers_are_a_multiple_of_threads_per_child_when_known() -> None:
    # δMXC = 64 × 0.003 / 0.015 = 12.8 → 51.2: 48 with 8 threads per child, 51 without
    assert _update(0.015, 0.012, 0.1, 0.1)[0].max_request_workers == 48
    assert _update(0.015, 0.012, 0.1, 0.1, tpc=None)[0].max_request_workers == 51
    assert round_workers(52.0, 8) == 56 and round_workers(51.9, 8) == 48


def test_no_rise_moves_nothing_and_no_clean_median_holds_the_setting() -> None:
    new, _ = _update(0.010, 0.012, 0.08, 0.1)  # below the clean medians
    assert (new.max_request_workers, new.keepalive_timeout_s) == (64, 5.0)
    new, detail = _update(0.016, None, 0.3, None)
    assert (new.max_request_workers, new.keepalive_timeout_s) == (64, 5.0)
    assert "no clean" in detail["max_request_workers"]["held"]
    assert new.php_max_children == 128  # PHP moves to its constant regardless


def test_the_knowledge_base_is_table_3() -> None:
    assert KNOWLEDGE_BASE[PAPER_ROW] == {
        "max_request_workers": -1,
        "keepalive_timeout_s": 1,
        "php_max_children": 1,
    }
    memory = KNOWLEDGE_BASE["increased_host_memory_contention"]
    new, _ = reconfigure_for_interference(
        BASE, Evidence(0.016, 0.012, 0.3, 0.1), memory, BOUNDS, 3.0, 2, 8
    )
    assert new == Settings(48, 5.0, 2)  # MXC ↓, PHP ↓, KAT stays


# -- parameters ----------------------------------------------------------------------------------

PARAMS: dict[str, Any] = {
    "detector": "detector.json",
    "max_request_workers": 64,
    "keepalive_timeout_s": 5,
    "php_max_children": 16,
    "threads_per_child": 8,
}


def test_default_bounds_and_interference_value() -> None:
    p = Ic2Params.model_validate(PARAMS)
    assert p.bounds() == Bounds(Settings(32, 1.25, 2), Settings(128, 20.0, 128))
    assert p.php_interference() == 128
    higher = Ic2Params.model_validate({**PARAMS, "max_max_request_workers": 96})
    assert higher.bounds().high.max_request_workers == 96


def test_inconsistent_parameters_are_refused_by_name(tmp_path: Path) -> None:
    ctx = PolicyContext(interval_s=5.0, base_dir=tmp_path)
    write_detector(tmp_path / "detector.json")
    bad = {
        **PARAMS,
        "max_max_request_workers": 56,
        "interference_php_max_children": 8,
        "colour": "red",
    }
    with pytest.raises(InputError) as info:
        build_policy("ic2", bad, ctx)
    text = str(info.value)
    assert "colour: unknown parameter" in text
    bad.pop("colour")
    with pytest.raises(InputError) as info:
        build_policy("ic2", bad, ctx)
    text = str(info.value)
    assert "max_request_workers: bounds [32, 56] must hold the baseline 64" in text
    assert "must lie above the baseline (16)" in text
    with pytest.raises(InputError, match="multiple of threads_per_child"):
        build_policy("ic2", {**PARAMS, "max_request_workers": 60}, ctx)


def test_the_detector_of_another_workload_is_refused(tmp_path: Path) -> None:
    write_detector(tmp_path / "detector.json", workload="file-100k")
    ctx = PolicyContext(interval_s=5.0, base_dir=tmp_path)
    with pytest.raises(InputError, match="trained on workload 'file-100k', not 'php-page'"):
        build_policy("ic2", {**PARAMS, "workload": "php-page"}, ctx)
    assert isinstance(build_policy("ic2", PARAMS, ctx), Ic2Policy)


# -- the policy on snapshot sequences -------------------------------------------------------------
CLEAN = (0.1, 0.6)  # rt s, CPU cores: LPO 0.012 at 50 req/s
SLOW = (0.4, 0.8)  # LPO 0.016
MIDDLE = (0.18, 0.6)  # the detector's T band


def _obs(
    t: float, rt: float | None, cpu: float | None, settings: Settings | None = None
) -> Observation:
    extra = {}
    if settings is not None:
        extra = {SERVER_SETTING_KEYS[k]: float(v) for k, v in settings.as_dict().items()}
    return Observation(
        time_s=t,
        instance_id="i1",
        interval_s=5.0,
        requests=250 if rt is not None else 0,
        throughput_rps=50.0 if rt is not None else 0.0,
        mean_rt_seconds=rt,
        cpu_util=cpu,
        extra=extra,
    )


def _run(
    policy: Ic2Policy, seq: list[tuple[float, float] | None], settings: Settings | None = None
) -> list[Decision]:
    out = []
    for k, step in enumerate(seq):
        rt, cpu = step if step is not None else (None, None)
        d = policy.decide(Snapshot(5.0 * k, "test", {"i1": _obs(5.0 * k, rt, cpu, settings)}))
        json.dumps(dict(d.detail), allow_nan=False)
        out.append(d)
    return out


def _policy(window_intervals: int = 1, **overrides: Any) -> Ic2Policy:
    params = Ic2Params.model_validate({**PARAMS, **overrides})
    return Ic2Policy(rt_detector(window_intervals), params)


def _actions(decisions: list[Decision]) -> list[tuple[int, ReconfigureServer]]:
    return [
        (k, a)
        for k, d in enumerate(decisions)
        for a in d.actions
        if isinstance(a, ReconfigureServer)
    ]


def test_one_misclassification_reconfigures_nothing() -> None:
    decisions = _run(_policy(), [CLEAN] * 4 + [SLOW] + [CLEAN] * 4 + [SLOW, SLOW] + [CLEAN] * 3)
    assert _actions(decisions) == []
    assert "no reconfiguration" in decisions[4].reason


def test_entering_i2_reconfigures_by_algorithm_1_and_ni2_restores_the_baseline() -> None:
    policy = _policy()
    decisions = _run(policy, [CLEAN] * 4 + [SLOW] * 3)
    acts = _actions(decisions)
    # NI2 -I-> T -I-> I1 -I-> I2: the third I verdict (interval 6) reconfigures
    assert [k for k, _ in acts] == [6]
    a = acts[0][1]
    # evidence medians LPO 0.016, RT 0.4; clean medians LPO 0.012, RT 0.1:
    # MXC 64 − 64 × 0.25 = 48; KAT 5 + 0.3 × 3 = 5.9; PHP 128
    assert a == ReconfigureServer(
        "i1", {"max_request_workers": 48, "keepalive_timeout_s": 5.9, "php_max_children": 128}, True
    )
    assert (
        "i1 entered I2" in decisions[6].reason
        and "0.016 against a clean median of 0.012" in decisions[6].reason
    )
    row = decisions[6].detail["instances"]["i1"]  # type: ignore[index]
    assert row["algorithm_1"]["max_request_workers"]["delta"] == pytest.approx(16.0)
    # the server now reports the new settings; three NI verdicts bring the baseline back
    new = Settings(48, 5.9, 128)
    back = _run(policy, [CLEAN] * 3, settings=new)
    assert [k for k, _ in _actions(back)] == [2]
    assert _actions(back)[0][1].settings == {
        "max_request_workers": 64,
        "keepalive_timeout_s": 5.0,
        "php_max_children": 16,
    }
    assert "entered NI2" in back[2].reason


def test_given_directions_replace_the_knowledge_base_row() -> None:
    # a service whose sweeps put its optimum under interference at more workers and a shorter
    # keep-alive: MXC up, KAT down, PHP left out (stays)
    policy = _policy(directions="+max_request_workers, -keepalive_timeout_s")
    decisions = _run(policy, [CLEAN] * 4 + [SLOW] * 3)
    a = _actions(decisions)[0][1]
    # MXC 64 + 64 × 0.25 = 80; KAT 5 − 0.3 × 3 = 4.1; PHP not in the row: not in the action
    assert a.settings == {"max_request_workers": 80, "keepalive_timeout_s": 4.1}
    assert "entered I2 (interference, the given directions;" in decisions[6].reason
    assert decisions[6].detail["context_change"] == "the given directions"
    # the row's PHP direction decides which side of the baseline the interference value lies
    down = Ic2Params.model_validate({**PARAMS, "directions": "-php_max_children"})
    assert down.php_interference() == 2


def test_bad_directions_are_refused_by_name(tmp_path: Path) -> None:
    ctx = PolicyContext(interval_s=5.0, base_dir=tmp_path)
    write_detector(tmp_path / "detector.json")
    with pytest.raises(InputError, match="directions must name one or more settings"):
        build_policy("ic2", {**PARAMS, "directions": " , "}, ctx)
    with pytest.raises(InputError, match="directions") as info:
        build_policy(
            "ic2",
            {
                **PARAMS,
                "directions": "+max_clients,php_max_children,-php_max_children,+php_max_children",
            },
            ctx,
        )
    text = str(info.value)
    assert "'+max_clients' must be + or - and one of max_request_workers" in text
    assert "'php_max_children' must be + or -" in text
    assert "php_max_children is given twice" in text


def test_the_settings_in_force_come_from_the_server_when_it_reports_them() -> None:
    reported = Settings(40, 7.0, 16)
    decisions = _run(_policy(), [CLEAN] * 4 + [SLOW] * 3, settings=reported)
    a = _actions(decisions)[0][1]
    # 40 − 40 × 0.25 = 30 → 32 (multiple of 8, and the floor); KAT 7 + 0.9 = 7.9
    assert a.settings == {
        "max_request_workers": 32,
        "keepalive_timeout_s": 7.9,
        "php_max_children": 128,
    }


def test_transients_and_unmeasured_intervals_do_not_count() -> None:
    # T verdicts and intervals without a reading break the run of I verdicts
    seq = [CLEAN] * 4 + [SLOW, SLOW, MIDDLE, SLOW, None, SLOW, SLOW]
    decisions = _run(_policy(), seq)
    # T resets: after MIDDLE, T -I-> I1 -(none)- -I-> I2 at interval 9
    assert [k for k, _ in _actions(decisions)] == [9]
    assert decisions[8].detail["instances"]["i1"]["verdict"] is None  # type: ignore[index]


def _verdicts(decisions: list[Decision]) -> list[object]:
    return [d.detail["instances"]["i1"]["verdict"] for d in decisions]  # type: ignore[index]


def test_a_detector_over_three_intervals_reads_their_medians() -> None:
    seq = [CLEAN] * 4 + [SLOW] + [CLEAN] * 2 + [SLOW] * 5 + [None, SLOW]
    decisions = _run(_policy(window_intervals=3), seq)
    # one slow interval among clean ones: median RT 0.1, NI; the second of a run of slow
    # ones is the first I; no reading (interval 12): no verdict, and the window keeps going
    assert _verdicts(decisions) == ["NI"] * 8 + ["I"] * 4 + [None, "I"]
    # I at 8, 9, 10 → I2 at interval 10; Algorithm 1's evidence is each interval's own RT
    acts = _actions(decisions)
    assert [k for k, _ in acts] == [10]
    assert "0.016 against a clean median of 0.012" in decisions[10].reason
    # each interval alone, the lone slow interval is an I verdict
    assert _verdicts(_run(_policy(), seq))[4] == "I"


def test_online_reconfiguration_is_not_graceful() -> None:
    decisions = _run(_policy(graceful=False), [CLEAN] * 4 + [SLOW] * 3)
    assert _actions(decisions)[0][1].graceful is False


def test_online_it_moves_only_what_can_change_online() -> None:
    # the same case as Algorithm 1 by hand above (MXC 48, KAT 5.9, PHP 128) but online: by
    # default MaxRequestWorkers and PHP, which the lab changes without restarting Apache
    acts = _actions(_run(_policy(graceful=False), [CLEAN] * 4 + [SLOW] * 3))
    assert acts[0][1] == ReconfigureServer(
        "i1", {"max_request_workers": 48, "php_max_children": 128}, False
    )
    only = _policy(graceful=False, online_settings="max_request_workers")
    acts = _actions(_run(only, [CLEAN] * 4 + [SLOW] * 3))
    assert acts[0][1] == ReconfigureServer("i1", {"max_request_workers": 48}, False)
    every = "max_request_workers,keepalive_timeout_s,php_max_children"
    acts = _actions(_run(_policy(graceful=False, online_settings=every), [CLEAN] * 4 + [SLOW] * 3))
    assert acts[0][1].settings == {
        "max_request_workers": 48,
        "keepalive_timeout_s": 5.9,
        "php_max_children": 128,
    }
    with pytest.raises(ValueError, match="online_settings"):
        _policy(online_settings="max_request_workers,threads")


def test_without_clean_intervals_only_php_moves() -> None:
    decisions = _run(_policy(), [SLOW] * 3)
    assert _actions(decisions)[0][1].settings == {"php_max_children": 128}

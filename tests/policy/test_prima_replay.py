"""PRIMA's controller replayed against recorded decision logs: every snapshot a run's PRIMA saw,
fed to a freshly built controller in the same order, must give the decision recorded then,
action for action, word for word and number for number (the detail's floats to 1e-12
relative: the last bit of a model's prediction moves with the numpy and scipy a machine has).

The logs (``tests/fixtures/decisions``) were recorded with the controller as it stood before it
was split into parts (see ``decision_log.py``): a lab run of ``scenarios/prima/demo.yaml`` on
real servers, and simulator runs of the demo and of Tables VIII-X, each with the parameters
the header records. A controller is pure, so equal decisions on the same snapshots mean equal
runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from quell.scenario import load_scenario
from quell.scenario.model import PolicySpec
from quell.scenario.policy import build_policy
from tests.policy.decision_log import ROOT, decision_dict, read_log

LOGS = sorted((ROOT / "tests" / "fixtures" / "decisions").glob("*.jsonl.gz"))


def test_the_logs_cover_the_lab_the_simulator_and_every_kind_of_step() -> None:
    kinds = {read_log(p)[0]["environment"] for p in LOGS}
    assert kinds == {"lab", "sim"}
    recorded = [rec for p in LOGS for _, rec in read_log(p)[1] if rec is not None]
    reasons = " | ".join(rec["reason"] for rec in recorded)
    for step in ("scale out", "trying", "trial failed", "scale in", "waiting", "cannot grow"):
        assert step in reasons, step
    calibrated = [r for r in recorded if any(r["detail"]["instances"].get("sf_calibrated", []))]
    assert len(calibrated) >= 10


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name.removesuffix(".jsonl.gz"))
def test_prima_decides_as_recorded(log: Path) -> None:
    header, ticks = read_log(log)
    path = ROOT / header["scenario"]
    policy = header["policy"]  # recorded before the defaults moved: the paper's unless it says
    params = {"preset": "paper", **policy.get("params", {})}
    spec = PolicySpec.model_validate({**policy, "params": params})
    scenario = load_scenario(path).model_copy(update={"policy": spec, "compare": []})
    policy = build_policy(spec, scenario, path.parent)
    decided = 0
    for snapshot, recorded in ticks:
        got = decision_dict(policy.decide(snapshot))
        if recorded is None:  # the run stored no decision: an empty one
            assert got == {"actions": [], "reason": "", "detail": {}}, snapshot.time_s
            continue
        assert got["reason"] == recorded["reason"], snapshot.time_s
        assert got["actions"] == recorded["actions"], snapshot.time_s
        assert _same(got["detail"], recorded["detail"]), snapshot.time_s
        decided += 1
    assert decided >= 20


def _same(a: Any, b: Any) -> bool:
    """Equal structures, floats within 1e-12 relative."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def test_the_replay_tells_a_last_bit_from_a_change() -> None:
    assert _same({"x": [0.01814244762942505]}, {"x": [0.018142447629425046]})
    assert not _same({"x": [0.0181424476294]}, {"x": [0.0181424476295]})
    assert not _same({"x": [1]}, {"x": [1.0]})

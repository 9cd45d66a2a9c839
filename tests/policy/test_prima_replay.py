"""PRIMA's controller replayed against recorded decision logs: every snapshot a run's PRIMA saw,
fed to a freshly built controller in the same order, must give the decision recorded then,
action for action, word for word and number for number.

The logs (``tests/fixtures/decisions``) were recorded with the controller as it stood before it
was split into parts (see ``decision_log.py``): a lab run of ``scenarios/prima/demo.yaml`` on
real servers, and simulator runs of the demo and of Tables VIII-X, each with the parameters
the header records. A controller is pure, so equal decisions on the same snapshots mean equal
runs."""

from __future__ import annotations

from pathlib import Path

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
    spec = PolicySpec.model_validate(header["policy"])
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
        assert got["detail"] == recorded["detail"], snapshot.time_s
        decided += 1
    assert decided >= 20

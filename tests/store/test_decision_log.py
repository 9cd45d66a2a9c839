"""The decision log reads each decision with its own detail, in time order."""

from __future__ import annotations

from pathlib import Path

from quell.core.action import AddInstance, Decision
from quell.store.run import RunStore


def test_decision_log_pairs_each_reason_with_its_detail(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "run.db")
    store.add_decision(20.0, "p", Decision(reason="second", detail={"k": 2}))
    store.add_decision(10.0, "p", Decision((AddInstance("n1", "h2"),), "first", {"k": 1}))
    store.add_decision(20.0, "p", Decision(reason="third", detail={"k": 3}))
    store.commit()
    log = store.decision_log()
    store.close()
    assert [(t, r, d["k"]) for t, _, r, _, d in log] == [
        (10.0, "first", 1),
        (20.0, "second", 2),
        (20.0, "third", 3),
    ]
    assert log[0][3] == [{"type": "AddInstance", "instance_id": "n1", "host": "h2", "weight": 100}]

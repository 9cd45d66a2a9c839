"""The comparison page: a column per policy, drawn without a warning whether a policy set weights,
only added and removed instances, or did nothing."""

from __future__ import annotations

import warnings
from pathlib import Path

from quell.core.action import AddInstance, Decision, RemoveInstance, SetWeight
from quell.core.observation import Observation, Snapshot
from quell.report.compare_page import COMPARE_HTML, COMPARE_PNG, write_comparison_page
from quell.store.run import RunStore


def write_run(run_dir: Path, decisions: list[tuple[float, Decision]]) -> Path:
    store = RunStore.create(run_dir)
    store.set_meta(scenario="page", environment="sim", duration_s=30, finished_at=1.0)
    for t in (10, 20, 30):
        obs = {
            iid: Observation(
                time_s=float(t), instance_id=iid, interval_s=10.0, requests=5,
                mean_rt_seconds=0.01 * t / 10,
            )
            for iid in ("a", "b")
        }  # fmt: skip
        store.add_snapshot(Snapshot(float(t), "sim", obs))
    for at, d in decisions:
        store.add_decision(at, "p", d)
    store.commit()
    store.close()
    return run_dir


def test_each_policy_gets_a_column_without_a_warning(tmp_path: Path) -> None:
    weighted = write_run(
        tmp_path / "weighted",
        [(10.0, Decision((SetWeight("a", 200), SetWeight("b", 56)), "weights"))],
    )
    scaled = write_run(
        tmp_path / "scaled",
        [
            (10.0, Decision((AddInstance("c", "h2"),), "grow")),
            (20.0, Decision((RemoveInstance("c"),), "shrink")),
        ],
    )
    idle = write_run(tmp_path / "idle", [])
    runs = [("weighted", weighted), ("scaled", scaled), ("idle", idle)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = write_comparison_page("page", runs, 0.02, tmp_path / "out")
    assert page == tmp_path / "out" / COMPARE_HTML
    assert (tmp_path / "out" / COMPARE_PNG).stat().st_size > 0
    text = page.read_text()
    assert all(f"{name}: <code>" in text for name, _ in runs)


def test_the_page_shows_what_users_felt_per_policy_and_phase(tmp_path: Path) -> None:
    run = write_run(tmp_path / "idle", [])
    felt = {"requests": 40, "unanswered": 1, "share_above_rth": 0.125, "share_above_2rth": 0.025,
            "p99_rt_seconds": 10.0}  # fmt: skip
    users = {"rr": {"clean": felt, "neighbours": felt}, "lc": None}
    page = write_comparison_page(
        "page", [("rr", run), ("lc", run)], 0.02, tmp_path / "o", users, 10.0
    )
    text = page.read_text()
    assert "unanswered at the 10 s timeout" in text
    row = '<td class="num">40</td><td class="num">1</td><td class="num">12.50</td>'
    assert text.count(f"<td>rr</td><td>neighbours</td>{row}") == 1
    assert "<td>lc</td>" not in text  # a run without per-request records has no rows

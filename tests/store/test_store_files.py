"""A finished run is one database file: closing the writing store folds its write-ahead log in,
and reading it afterwards (a report, a comparison) leaves nothing beside it."""

from __future__ import annotations

from pathlib import Path

from quell.core.observation import Observation, Snapshot
from quell.report.render import render_report
from quell.store.run import DB_NAME, RunStore


def _leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(DB_NAME + "-"))


def test_a_closed_store_is_one_file_even_after_it_is_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = RunStore.create(run)
    store.set_meta(phases=[["all", 0.0, 2.0]], duration_s=2.0)
    for t in (1.0, 2.0):
        obs = Observation(time_s=t, instance_id="i1", interval_s=1.0, requests=3)
        store.add_snapshot(Snapshot(t, "test", {"i1": obs}))
        store.commit()
    assert _leftovers(run) == ["run.db-shm", "run.db-wal"]  # while it writes
    store.close()
    store.close()  # twice is harmless
    assert _leftovers(run) == []
    with RunStore.open(run) as reader:
        assert [o.requests for o in reader.observations()] == [3, 3]
    render_report(run)
    assert _leftovers(run) == []

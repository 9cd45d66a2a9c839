"""The run store read back as it was written: snapshots regrouped, a window of observations."""

from __future__ import annotations

from pathlib import Path

from quell.core.observation import Observation, Snapshot
from quell.store.run import RunStore


def _snap(t: float, ids: tuple[str, ...]) -> Snapshot:
    return Snapshot(
        time_s=t,
        environment="live",
        instances={
            i: Observation(time_s=t, instance_id=i, interval_s=1.0, requests=k + int(t))
            for k, i in enumerate(ids)
        },
    )


def test_snapshots_come_back_as_they_were_stored(tmp_path: Path) -> None:
    written = [_snap(1.0, ("a", "b")), _snap(2.0, ("b",)), _snap(3.0, ("a", "b", "c"))]
    with RunStore.create(tmp_path) as store:
        for s in written:
            store.add_snapshot(s)
        store.commit()
        assert list(store.snapshots("live")) == written
        assert [o.time_s for o in store.observations(since_s=2.0)] == [2.0, 3.0, 3.0, 3.0]
        assert [o.time_s for o in store.observations("a", since_s=2.0)] == [3.0]


def test_an_empty_store_has_no_snapshots(tmp_path: Path) -> None:
    with RunStore.create(tmp_path) as store:
        assert list(store.snapshots("live")) == []

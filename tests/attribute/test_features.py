"""Records to features: exact values from constructed records and PSI samples, and every bad
record named."""

from __future__ import annotations

import numpy as np
import pytest

from quell.attribute.features import PsiSeries, available_features, build_features, recent_share
from quell.attribute.records import RECORD_COLUMNS, check_records
from quell.errors import InputError


def _table() -> dict[str, np.ndarray]:
    ms = 1_000_000
    return {
        "request_id": np.array([7, 8, -1]),
        "request_class": np.array(["/a", "/b", "/a"]),
        "thread_id": np.array([1, 1, 2]),
        "start_ns": np.array([500 * ms, 1000 * ms, 0]),
        "end_ns": np.array([1500 * ms, 1010 * ms, 10 * ms]),
        "wall_ns": np.array([1000 * ms, 10 * ms, 10 * ms]),
        "cpu_ns": np.array([400 * ms, 4 * ms, 7 * ms]),
        "runq_wait_ns": np.array([300 * ms, 3 * ms, 4 * ms]),
        "timeslices": np.array([3, 2, 1]),
        "vol_cs": np.array([2, 1, 0]),
        "invol_cs": np.array([1, 1, 1]),
        "yields": np.array([4, 0, 0]),
    }


def test_features_of_constructed_records_are_exact() -> None:
    psi = PsiSeries(
        np.array([0, 1_000_000_000, 2_000_000_000]),
        {"psi_cpu_some_us": np.array([0.0, 1000.0, 3000.0])},
    )
    fm = build_features(check_records(_table(), "t"), psi)
    assert fm.names == (
        "cpu_seconds",
        "runq_wait_seconds",
        "blocked_seconds",
        "timeslices",
        "vol_cs",
        "invol_cs",
        "yields",
        "recent_runq_wait_share",
        "psi_cpu_some_seconds",
        "psi_cpu_some_recent_share",
        "class=/a",
        "class=/b",
    )
    np.testing.assert_allclose(fm.column("blocked_seconds"), [0.3, 0.003, 0.0])  # clipped at 0
    # 0.5 s → 1.5 s: the totals interpolate to 500 and 2000 µs.
    np.testing.assert_allclose(fm.column("psi_cpu_some_seconds"), [0.0015, 0.00002, 0.00001])
    # The second before each start: only the third request (ended at 10 ms, 4 ms of wait) ends
    # in the first two's; nothing ends before the third's.
    np.testing.assert_allclose(fm.column("recent_runq_wait_share"), [0.004, 0.004, 0.0])
    # −0.5 s → 0.5 s (held flat before the series): 500 µs; 0 → 1 s: 1000 µs; before 0: none.
    np.testing.assert_allclose(fm.column("psi_cpu_some_recent_share"), [0.0005, 0.001, 0.0])
    np.testing.assert_array_equal(fm.column("class=/b"), [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(fm.request_id, [7, 8, -1])


def test_a_structured_array_is_a_record_table_too() -> None:
    t = _table()
    dtype = [(k, "U8" if k == "request_class" else "i8") for k in RECORD_COLUMNS]
    arr = np.array(list(zip(*(t[k] for k in RECORD_COLUMNS), strict=True)), dtype=dtype)
    a = build_features(check_records(arr, "arr"))
    b = build_features(check_records(t, "dict"))
    np.testing.assert_array_equal(a.x, b.x)
    assert available_features(check_records(t, "t")) == a.names[:8]


def test_the_model_vocabulary_is_kept_and_unknown_classes_and_features_refused() -> None:
    rec = check_records(_table(), "t")
    fm = build_features(rec, names=("runq_wait_seconds",), classes=("/a", "/b", "/c"))
    assert fm.names == ("runq_wait_seconds", "class=/a", "class=/b", "class=/c")
    with pytest.raises(InputError) as err:
        build_features(rec, names=("psi_io_some_seconds",), classes=("/a",))
    assert [p.location for p in err.value.problems] == ["psi_io_some_seconds", "request_class"]


def test_bad_records_are_refused_naming_every_problem() -> None:
    t = _table()
    del t["yields"]
    t["cpu_ns"] = np.array([1.5, 2.0, 3.0])
    t["vol_cs"] = np.array(["x", "y", "z"])
    with pytest.raises(InputError) as err:
        check_records(t, "bad")
    assert [p.location for p in err.value.problems] == ["cpu_ns", "vol_cs", "yields"]
    t = _table()
    t["end_ns"] = t["start_ns"] - 1
    t["runq_wait_ns"] = np.array([-1, 0, 0])
    with pytest.raises(InputError) as err:
        check_records(t, "bad")
    assert [p.location for p in err.value.problems] == ["runq_wait_ns", "end_ns"]


def test_recent_shares_count_requests_that_ended_in_the_window_only() -> None:
    ms = 1_000_000
    # ends at 100, 900, 1000 and 1900 ms, waits 1, 2, 4 and 8 ms; starts given out of order
    start = np.array([1000, 0, 1500, 50]) * ms
    end = np.array([1900, 100, 1000, 900]) * ms
    wait = np.array([8, 1, 4, 2]) * ms
    # [0, 1000): 100 and 900 end in it (3 ms); [500, 1500): 900 and 1000 (6 ms); before 0 and
    # [−950, 50): none.
    np.testing.assert_allclose(recent_share(start, end, wait, 1000 * ms), [0.003, 0, 0.006, 0])


def test_a_bad_psi_series_is_refused() -> None:
    psi = PsiSeries(np.array([0, 0]), {"psi_cpu_some_us": np.array([2.0, 1.0]), "x": np.zeros(2)})
    with pytest.raises(InputError) as err:
        build_features(check_records(_table(), "t"), psi)
    assert [p.location for p in err.value.problems] == ["time_ns", "psi_cpu_some_us", "x"]

"""A run directory's per-request records read back (``quell.report.records``): the
instrumentation's own logs to exact features, and what cannot be read refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.attribute.features import build_features
from quell.errors import InputError
from quell.report.records import read_records

FIXTURE_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "instrument" / "qtlog"


def test_the_instrumentations_recorded_logs_give_exact_features() -> None:
    records = read_records(FIXTURE_LOGS)
    assert len(records) == 10
    fm = build_features(records)
    row = list(fm.request_id).index(202)  # /spin on thread 13900
    assert fm.request_class[row] == "/spin"
    assert fm.column("cpu_seconds")[row] == 5044144 / 1e9
    assert fm.column("runq_wait_seconds")[row] == 6620663 / 1e9
    assert fm.column("blocked_seconds")[row] == pytest.approx((11676494 - 5044144 - 6620663) / 1e9)
    assert fm.column("invol_cs")[row] == 3
    row = list(fm.request_id).index(103)  # yielded for 100 ms: counted as blocked
    assert fm.column("yields")[row] == 1
    assert fm.column("blocked_seconds")[row] == pytest.approx((12779251 - 4036004) / 1e9)


def test_an_empty_run_directory_and_a_damaged_log_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no records here"):
        read_records(tmp_path)
    log = tmp_path / "quell-1-1-0.qtlog"
    log.write_bytes(b"QTLOG\x00\x00\x02" + bytes(56))
    with pytest.raises(InputError, match=r"quell-1-1-0\.qtlog"):
        read_records(tmp_path)

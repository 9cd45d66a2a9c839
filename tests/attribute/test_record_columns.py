"""The per-request record is one contract between the instrumentation (which writes and reads
it) and the attribution (which checks and uses it): both name the same columns."""

from __future__ import annotations

from quell.attribute.records import CLASS_COLUMN, INT_COLUMNS, OPTIONAL_COLUMNS
from quell.instrument.log import COLUMNS, EBPF_COLUMNS


def test_both_sides_name_the_same_columns() -> None:
    assert set(COLUMNS) == {*INT_COLUMNS, CLASS_COLUMN}
    assert set(EBPF_COLUMNS) == set(OPTIONAL_COLUMNS)

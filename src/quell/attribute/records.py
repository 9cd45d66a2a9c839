"""The per-request record shared with the instrumentation (``quell.instrument``): one row per
request, columns named exactly as below. Any table whose columns can be taken by name (a pandas
DataFrame, a numpy structured array, a dict of arrays) is a record table here.

Blocked time is derived (wall − CPU − run-queue wait), not stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

INT_COLUMNS: Final[tuple[str, ...]] = (
    "request_id",
    "thread_id",
    "start_ns",
    "end_ns",
    "wall_ns",
    "cpu_ns",
    "runq_wait_ns",
    "timeslices",
    "vol_cs",
    "invol_cs",
    "yields",
)
"""Integer columns every record has."""
CLASS_COLUMN: Final = "request_class"
OPTIONAL_COLUMNS: Final[tuple[str, ...]] = ("runq_wait_other_cgroup_ns", "preempt_other_total")
"""Only with the optional eBPF part."""
RECORD_COLUMNS: Final[tuple[str, ...]] = (
    "request_id",
    CLASS_COLUMN,
    *INT_COLUMNS[1:],
)


@dataclass(frozen=True)
class Records:
    """A checked record table as numpy columns (integers as int64, the class as str)."""

    columns: dict[str, IntArray]
    request_class: NDArray[np.str_]

    def __len__(self) -> int:
        return len(self.request_class)

    def __getitem__(self, name: str) -> IntArray:
        return self.columns[name]

    def has(self, name: str) -> bool:
        return name in self.columns

    @property
    def wall_seconds(self) -> FloatArray:
        return self.columns["wall_ns"].astype(np.float64) / 1e9

    def select(self, mask: NDArray[np.bool_]) -> Records:
        return Records({k: v[mask] for k, v in self.columns.items()}, self.request_class[mask])


def _column(table: Any, name: str) -> Any:
    if isinstance(table, Mapping):
        return table.get(name)
    names = getattr(getattr(table, "dtype", None), "names", None)
    if names is not None:
        return table[name] if name in names else None
    cols = getattr(table, "columns", None)
    if cols is not None:
        return table[name].to_numpy() if name in list(cols) else None
    return None


def check_records(table: Any, source: str) -> Records:
    """``table``'s record columns as a ``Records``; every missing column, non-integer value,
    length mismatch and impossible row (a negative time or counter, an end before its start)
    reported at once as an ``InputError``. CPU plus run-queue wait a little beyond the wall time
    (the clocks are read one after the other) is kept: blocked time is clipped at 0."""
    problems: list[Problem] = []
    columns: dict[str, IntArray] = {}
    n: int | None = None
    for name in (*INT_COLUMNS, *OPTIONAL_COLUMNS):
        raw = _column(table, name)
        if raw is None:
            if name not in OPTIONAL_COLUMNS:
                problems.append(Problem(name, "missing column"))
            continue
        values = np.asarray(raw)
        if values.ndim != 1:
            problems.append(Problem(name, "not one value per request"))
            continue
        if values.dtype.kind == "f":
            if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
                problems.append(Problem(name, "not whole numbers"))
                continue
        elif values.dtype.kind not in "iu":
            problems.append(Problem(name, f"not integers ({values.dtype})"))
            continue
        columns[name] = values.astype(np.int64)
        if n is None:
            n = len(values)
        elif len(values) != n:
            problems.append(Problem(name, f"{len(values)} values, not {n}"))
    raw_class = _column(table, CLASS_COLUMN)
    if raw_class is None:
        problems.append(Problem(CLASS_COLUMN, "missing column"))
        classes = np.asarray([], dtype=np.str_)
    else:
        classes = np.asarray([str(c) for c in np.asarray(raw_class)], dtype=np.str_)
        if n is not None and len(classes) != n:
            problems.append(Problem(CLASS_COLUMN, f"{len(classes)} values, not {n}"))
    if problems:
        raise InputError(source, problems)
    problems.extend(_row_problems(columns))
    if problems:
        raise InputError(source, problems)
    return Records(columns, classes)


def _row_problems(c: dict[str, IntArray]) -> list[Problem]:
    problems: list[Problem] = []
    for name in INT_COLUMNS[4:] + tuple(k for k in OPTIONAL_COLUMNS if k in c):
        bad = np.flatnonzero(c[name] < 0)
        if len(bad):
            problems.append(Problem(name, f"negative in {len(bad)} row(s), first row {bad[0]}"))
    checks = (("end_ns", c["end_ns"] < c["start_ns"], "before start_ns"),)
    for name, bad_mask, what in checks:
        bad = np.flatnonzero(bad_mask)
        if len(bad):
            problems.append(Problem(name, f"{what} in {len(bad)} row(s), first row {bad[0]}"))
    return problems

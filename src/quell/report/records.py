"""The per-request records of a run directory, as files: what ``quell attribute fit``,
``predict`` and ``report`` read of a run of one's own service, and Soroban's campaign of its
runs.

A run directory holds the instrumentation's per-thread logs (``*.qtlog``) or its table
(``requests.csv.gz``), read by ``quell.instrument.log.read_records``, or a ``records.csv`` with
the same columns (one row per request, a header naming them); optionally ``psi.csv`` or
``psi.csv.gz`` beside them (a PSI sample series: ``time_ns`` and cumulative "some" totals in
microseconds under the keys of ``quell.attribute.features.PSI_KEYS``). A path to a file is read
as the records alone.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from quell.attribute.features import PsiSeries
from quell.attribute.records import CLASS_COLUMN, OPTIONAL_COLUMNS, RECORD_COLUMNS, Records
from quell.attribute.records import check_records as _check
from quell.core.files import read_text
from quell.errors import InputError, Problem

RECORDS_FILE: Final = "records.csv"
PSI_FILE: Final = "psi.csv"
MAX_RECORDS_BYTES: Final = 1 << 30


@dataclass(frozen=True)
class Run:
    """One run's records, its PSI series if any, and where it came from."""

    name: str
    records: Records
    psi: PsiSeries | None = None


def read_run(path: Path, name: str | None = None) -> Run:
    """The records and PSI series of ``path`` (``read_records``, ``read_psi``), named ``name``
    (default: the path)."""
    return Run(str(path) if name is None else name, read_records(path), read_psi(path))


def _read_csv(path: Path, what: str) -> dict[str, list[str]]:
    if path.suffix == ".gz":
        text = _read_gzip_text(path, what)
    else:
        text = read_text(path, what, MAX_RECORDS_BYTES)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise InputError(str(path), [Problem("", f"an empty {what}: no header")])
    columns: dict[str, list[str]] = {name: [] for name in header}
    for line, row in enumerate(reader, start=2):
        if len(row) != len(header):
            message = f"{len(row)} fields, the header has {len(header)}"
            raise InputError(str(path), [Problem(f"line {line}", message)])
        for name, value in zip(header, row, strict=True):
            columns[name].append(value)
    return columns


def _read_gzip_text(path: Path, what: str) -> str:
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(MAX_RECORDS_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(str(path), [Problem("", f"not a readable gzip {what}: {exc}")]) from None
    if len(data) > MAX_RECORDS_BYTES:
        raise InputError(str(path), [Problem("", f"a {what} over {MAX_RECORDS_BYTES} bytes")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), [Problem("", f"not UTF-8 text at byte {exc.start}")]) from None


def _ints(path: Path, name: str, values: list[str]) -> np.ndarray:
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        bad = next(i for i, v in enumerate(values) if not v.lstrip("-").isdigit())
        message = f"not an integer at line {bad + 2}: {values[bad][:40]!r}"
        raise InputError(str(path), [Problem(name, message)]) from None


def read_records(path: Path) -> Records:
    """The checked records of a run directory or a records file; a path with no request in it
    raises ``InputError``."""
    if path.is_dir() and (path / RECORDS_FILE).is_file():
        return _read_records_csv(path / RECORDS_FILE)
    if path.is_file() and path.suffix == ".csv":
        return _read_records_csv(path)
    from quell.instrument.log import LogError
    from quell.instrument.log import read_records as read_logs

    if not path.exists():
        raise InputError(str(path), [Problem("", "no such file or directory")])
    try:
        table = read_logs(path)
    except LogError as exc:
        raise InputError(str(exc.path), [Problem("", exc.detail)]) from None
    if len(table) == 0:
        what = f"no records here ({RECORDS_FILE}, *.qtlog or requests.csv.gz)"
        raise InputError(str(path), [Problem("", what)])
    return _check(table, str(path))


def _read_records_csv(file: Path) -> Records:
    raw = _read_csv(file, "records file")
    table: dict[str, Any] = {}
    for name, values in raw.items():
        if name == CLASS_COLUMN:
            table[name] = np.array(values, dtype=np.str_)
        elif name in RECORD_COLUMNS or name in OPTIONAL_COLUMNS:
            table[name] = _ints(file, name, values)
    return _check(table, str(file))


def read_psi(path: Path) -> PsiSeries | None:
    """The PSI sample series beside a run directory's records (``psi.csv`` or ``psi.csv.gz``),
    or ``None`` without one."""
    base = path if path.is_dir() else path.parent
    for file in (base / PSI_FILE, base / (PSI_FILE + ".gz")):
        if file.exists():
            break
    else:
        return None
    raw = _read_csv(file, "PSI series")
    if "time_ns" not in raw:
        raise InputError(str(file), [Problem("time_ns", "missing column")])
    totals: dict[str, np.ndarray] = {}
    for name, values in raw.items():
        if name != "time_ns":
            try:
                totals[name] = np.array([float(v) for v in values])
            except ValueError:
                raise InputError(str(file), [Problem(name, "not numbers")]) from None
    psi = PsiSeries(_ints(file, "time_ns", raw["time_ns"]), totals)
    psi.check(str(file))
    return psi


def write_records(path: Path, table: Mapping[str, Any]) -> Path:
    """Write ``table``'s record columns as ``path``/records.csv (``path`` a directory)."""
    path.mkdir(parents=True, exist_ok=True)
    names = [c for c in (*RECORD_COLUMNS, *OPTIONAL_COLUMNS) if c in table]
    rows = zip(*(np.asarray(table[c]).tolist() for c in names), strict=True)
    out = path / RECORDS_FILE
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        writer.writerows(rows)
    return out

"""The reader of quelltoken's per-thread logs: one row per request.

A log file (``quell-<pid>-<tid>-<seq>.qtlog``) is a 64-byte header (magic ``QTLOG\\0\\0\\x01``,
version, record size, capacity, pid, thread id, the writer index ``count``, sequence) and
``capacity`` fixed-size 160-byte records, of which the first ``count`` are complete.
:func:`read_records` turns one file, a directory of them, or a ``requests.csv.gz`` written by
:func:`write_records`, into the per-request table of docs/reference/attribution.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from quell.errors import QuellError

if TYPE_CHECKING:
    import pandas as pd

MAGIC = b"QTLOG\x00\x00\x01"
VERSION = 1
HEADER_BYTES = 64
RECORD_BYTES = 160
LOG_SUFFIX = ".qtlog"
CSV_NAME = "requests.csv.gz"

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("record_bytes", "<u4"),
        ("capacity", "<u8"),
        ("pid", "<i8"),
        ("thread_id", "<i8"),
        ("count", "<u8"),
        ("sequence", "<u8"),
        ("reserved", "<u8"),
    ]
)
RECORD_DTYPE = np.dtype(
    [
        ("request_id", "<i8"),
        ("thread_id", "<i8"),
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("wall_ns", "<i8"),
        ("cpu_ns", "<i8"),
        ("runq_wait_ns", "<i8"),
        ("timeslices", "<i8"),
        ("vol_cs", "<i8"),
        ("invol_cs", "<i8"),
        ("yields", "<i8"),
        ("runq_wait_other_cgroup_ns", "<i8"),
        ("preempt_other_total", "<i8"),
        ("reserved", "<i8"),
        ("request_class", "S48"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_BYTES and RECORD_DTYPE.itemsize == RECORD_BYTES

#: The columns every reader returns, in this order (int64 but ``request_class``).
COLUMNS = (
    "request_id",
    "request_class",
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
#: Present only when the optional eBPF part measured them (else absent, not zero).
EBPF_COLUMNS = ("runq_wait_other_cgroup_ns", "preempt_other_total")
_COUNTERS = ("wall_ns", "cpu_ns", "runq_wait_ns", "timeslices", "vol_cs", "invol_cs", "yields")


class LogError(QuellError):
    """A log file cannot be read: which file, and what is wrong with it."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{path}: {detail}")


def read_log(path: Path) -> np.ndarray:
    """The complete records of one log file, as a structured array (``RECORD_DTYPE``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LogError(path, f"cannot be read ({exc.strerror})") from exc
    if len(raw) < HEADER_BYTES:
        raise LogError(path, f"truncated: {len(raw)} bytes, shorter than the 64-byte header")
    head = np.frombuffer(raw, HEADER_DTYPE, count=1)[0]
    if bytes(head["magic"]).ljust(8, b"\0") != MAGIC:
        raise LogError(path, f"not a quelltoken log (magic {bytes(raw[:8])!r})")
    if int(head["version"]) != VERSION:
        raise LogError(path, f"log version {int(head['version'])}, this reader knows {VERSION}")
    if int(head["record_bytes"]) != RECORD_BYTES:
        raise LogError(path, f"records of {int(head['record_bytes'])} bytes, expected 160")
    count, capacity = int(head["count"]), int(head["capacity"])
    if count > capacity:
        raise LogError(path, f"corrupt header: {count} records written, room for {capacity}")
    need = HEADER_BYTES + count * RECORD_BYTES
    if len(raw) < need:
        raise LogError(path, f"truncated: {len(raw)} bytes, {need} needed for its {count} records")
    recs = np.frombuffer(raw, RECORD_DTYPE, count=count, offset=HEADER_BYTES).copy()
    bad = (
        (recs["end_ns"] < recs["start_ns"])
        | (recs["wall_ns"] != recs["end_ns"] - recs["start_ns"])
        | (recs["thread_id"] != int(head["thread_id"]))
    )
    for name in _COUNTERS:
        bad |= recs[name] < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LogError(path, f"corrupt record {i} of {count} (times or counters impossible)")
    return recs


def _frame(recs: np.ndarray) -> pd.DataFrame:
    import pandas as pd  # the lab extra's: only runs with instrumented instances read records

    cols: dict[str, object] = {}
    for name in COLUMNS:
        if name == "request_class":
            cols[name] = [bytes(b).decode("utf-8", "replace") for b in recs[name]]
        else:
            cols[name] = recs[name].astype(np.int64)
    if len(recs) and (recs["runq_wait_other_cgroup_ns"] >= 0).any():
        for name in EBPF_COLUMNS:
            cols[name] = recs[name].astype(np.int64)
    df = pd.DataFrame(cols)
    df["request_class"] = df["request_class"].astype(object)
    return df.sort_values(["start_ns", "thread_id"], kind="stable").reset_index(drop=True)


def _read_csv(path: Path) -> pd.DataFrame:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"request_class": str}, keep_default_na=False)
    except (OSError, ValueError, EOFError) as exc:
        raise LogError(path, f"cannot be read as a records table ({exc})") from exc
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise LogError(path, f"missing column(s) {', '.join(missing)}")
    for c in df.columns:
        if c != "request_class":
            df[c] = df[c].astype(np.int64)
    df["request_class"] = df["request_class"].astype(object)
    return df


def read_records(path: Path | str) -> pd.DataFrame:
    """One row per request, with :data:`COLUMNS` (and :data:`EBPF_COLUMNS` when measured),
    sorted by start time. ``path`` is a ``.qtlog`` file, a directory of them (searched
    recursively) or a ``.csv.gz`` table from :func:`write_records` (a directory holding only
    ``requests.csv.gz`` is read through it). Raises :class:`LogError` naming the bad file."""
    p = Path(path)
    if p.is_dir():
        logs = sorted(p.rglob(f"*{LOG_SUFFIX}"))
        if not logs and (p / CSV_NAME).is_file():
            return _read_csv(p / CSV_NAME)
        recs = [read_log(f) for f in logs]
        return _frame(np.concatenate(recs) if recs else np.zeros(0, RECORD_DTYPE))
    if not p.exists():
        raise LogError(p, "no such file or directory")
    if p.name.endswith(".csv.gz") or p.suffix == ".csv":
        return _read_csv(p)
    return _frame(read_log(p))


def write_records(df: pd.DataFrame, path: Path) -> Path:
    """Write a records table as gzip-compressed CSV (what the lab keeps in a run directory)."""
    df.to_csv(path, index=False, compression="gzip")
    return path

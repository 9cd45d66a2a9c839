"""Parse HAProxy's ``show stat`` CSV into per-server rows. Columns are found by header name."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from quell.errors import ComponentError

# svname values of aggregate rows; real servers are everything else (type 2 when present).
_AGGREGATE_ROWS = frozenset({"FRONTEND", "BACKEND"})
_SERVER_TYPE = "2"


@dataclass(frozen=True, slots=True)
class ServerStat:
    """One server row. Counters are cumulative since the HAProxy process started.

    ``*_time_ms`` are HAProxy's averages over the last 1024 requests; None when the column
    is empty. ``slim`` is None when the server has no maxconn.
    """

    backend: str
    server: str
    status: str
    weight: int
    scur: int
    qcur: int
    smax: int
    slim: int | None
    stot: int
    bin: int
    bout: int
    econ: int
    eresp: int
    hrsp_2xx: int
    hrsp_5xx: int
    rtime_ms: int | None
    ttime_ms: int | None
    qtime_ms: int | None
    lbtot: int


# Empty integer cells read as 0, except slim/rtime/ttime/qtime, where empty means "unknown" (None).
_REQUIRED = (
    "pxname",
    "svname",
    "status",
    "weight",
    "scur",
    "qcur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "econ",
    "eresp",
    "hrsp_2xx",
    "hrsp_5xx",
    "rtime",
    "ttime",
    "qtime",
    "lbtot",
)


def _int(value: str, column: str, row_no: int) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise ComponentError(
            "haproxy", f"show stat line {row_no}: column {column!r} is {value!r}, not an integer"
        ) from exc


def parse_show_stat(csv_text: str) -> list[ServerStat]:
    """Server rows of ``show stat`` output (FRONTEND, BACKEND and listener rows are skipped)."""
    lines = csv_text.lstrip().splitlines()
    if not lines or not lines[0].startswith("# pxname"):
        head = lines[0][:80] if lines else ""
        raise ComponentError("haproxy", f"show stat output has no '# pxname' header: {head!r}")
    header = next(csv.reader([lines[0][2:]]))
    index = {name: i for i, name in enumerate(header) if name}
    missing = [c for c in _REQUIRED if c not in index]
    if missing:
        raise ComponentError("haproxy", f"show stat header lacks {', '.join(missing)}")
    has_type = "type" in index
    last_needed = max(index.values())

    out: list[ServerStat] = []
    for row_no, row in enumerate(csv.reader(io.StringIO("\n".join(lines[1:]))), start=2):
        if not any(row):
            continue
        if len(row) <= last_needed:
            raise ComponentError(
                "haproxy",
                f"show stat line {row_no} has {len(row)} columns, header has {len(header)}",
            )

        if row[index["svname"]] in _AGGREGATE_ROWS:
            continue
        if has_type and row[index["type"]] != _SERVER_TYPE:
            continue  # listener rows of frontends with 'option socket-stats'
        out.append(_server_row(_Row(row, index, row_no)))
    return out


@dataclass(frozen=True, slots=True)
class _Row:
    cells: list[str]
    index: dict[str, int]
    row_no: int

    def text(self, column: str) -> str:
        return self.cells[self.index[column]]

    def num(self, column: str) -> int:
        value = self.text(column)
        return 0 if value == "" else _int(value, column, self.row_no)

    def opt(self, column: str) -> int | None:
        value = self.text(column)
        return None if value == "" else _int(value, column, self.row_no)


def _server_row(r: _Row) -> ServerStat:
    return ServerStat(
        backend=r.text("pxname"),
        server=r.text("svname"),
        status=r.text("status"),
        weight=r.num("weight"),
        scur=r.num("scur"),
        qcur=r.num("qcur"),
        smax=r.num("smax"),
        slim=r.opt("slim"),
        stot=r.num("stot"),
        bin=r.num("bin"),
        bout=r.num("bout"),
        econ=r.num("econ"),
        eresp=r.num("eresp"),
        hrsp_2xx=r.num("hrsp_2xx"),
        hrsp_5xx=r.num("hrsp_5xx"),
        rtime_ms=r.opt("rtime"),
        ttime_ms=r.opt("ttime"),
        qtime_ms=r.opt("qtime"),
        lbtot=r.num("lbtot"),
    )

"""The run store. A run directory holds ``scenario.yaml``, ``run.db`` (this store), ``summary.json``
and, once reported, ``report/``. The store commits after every interval, so a crash loses at most
one interval of data. While a run writes, the database keeps a write-ahead log beside it
(``run.db-wal``, ``run.db-shm``); closing the writing store folds the log in and returns the file
to a plain rollback journal, so a finished run is the one file and readers leave nothing."""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quell.core.action import Action, Decision
from quell.core.observation import OBSERVATION_FIELDS, Observation, Snapshot
from quell.errors import InputError, Problem

DB_NAME = "run.db"
_OBS_COLS = ", ".join(OBSERVATION_FIELDS)
_INSERT_OBSERVATION = (
    f"INSERT INTO observations VALUES ({', '.join('?' * (len(OBSERVATION_FIELDS) + 1))})"
)
_observation_values = operator.attrgetter(*OBSERVATION_FIELDS)
"""An observation's columns, in ``OBSERVATION_FIELDS`` order, as one tuple."""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS observations ({_OBS_COLS}, extra TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS obs_by_instance ON observations (instance_id, time_s);
CREATE TABLE IF NOT EXISTS requests (
  send_s REAL NOT NULL, latency_s REAL, status INTEGER NOT NULL, bytes INTEGER NOT NULL,
  server TEXT NOT NULL, error TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (time_s REAL NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
  time_s REAL NOT NULL, policy TEXT NOT NULL, reason TEXT NOT NULL, actions TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '{{}}'
);
"""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One client-side request: when it was sent, how long it took, what came back, who answered.

    ``latency_s`` is ``None`` when the request failed before a response; ``server`` is the
    instance id that answered ("" if none); ``error`` is "" on success.
    """

    send_s: float
    latency_s: float | None
    status: int
    bytes: int
    server: str
    error: str = ""


def action_dict(a: Action) -> dict[str, Any]:
    """An action as the run store keeps it: its kind under ``type``, then its fields."""
    d: dict[str, Any] = {"type": type(a).__name__}
    for f in fields(a):
        value = getattr(a, f.name)
        d[f.name] = dict(value) if f.name == "settings" else value
    return d


class RunStore:
    """SQLite store of one run. Open with ``create`` (new run) or ``open`` (read an old one)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, writer: bool = False) -> None:
        self._conn = conn
        self.path = path
        self._writer = writer
        self._closed = False

    @classmethod
    def create(cls, run_dir: Path) -> RunStore:
        run_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(run_dir / DB_NAME, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        conn.commit()
        return cls(conn, run_dir, writer=True)

    @classmethod
    def open(cls, run_dir: Path) -> RunStore:
        db = run_dir / DB_NAME
        if not db.is_file():
            raise InputError(str(run_dir), [Problem("", f"not a run directory (no {DB_NAME})")])
        # As a URI (for read-only), so the path is quoted: a '?' or '#' in it would end it.
        uri = f"{db.absolute().as_uri()}?mode=ro"
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.execute("SELECT count(*) FROM observations").fetchone()
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise InputError(str(db), [Problem("", f"unreadable run store: {exc}")]) from None
        return cls(conn, run_dir)

    # -- writing ---------------------------------------------------------------------------
    def set_meta(self, **values: Any) -> None:
        self._conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )
        self._conn.commit()

    def add_snapshot(self, snapshot: Snapshot) -> None:
        rows = [
            (*_observation_values(obs), json.dumps(dict(obs.extra), sort_keys=True))
            for obs in snapshot.instances.values()
        ]
        self._conn.executemany(_INSERT_OBSERVATION, rows)

    def add_requests(self, records: Iterable[RequestRecord]) -> None:
        rows = [(r.send_s, r.latency_s, r.status, r.bytes, r.server, r.error) for r in records]
        if rows:
            self._conn.executemany("INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?)", rows)

    def add_event(self, time_s: float, kind: str, **detail: Any) -> None:
        self._conn.execute(
            "INSERT INTO events VALUES (?, ?, ?)",
            (time_s, kind, json.dumps(detail, sort_keys=True)),
        )
        self._conn.commit()

    def add_decision(self, time_s: float, policy: str, decision: Decision) -> None:
        actions = json.dumps([action_dict(a) for a in decision.actions], sort_keys=True)
        detail = json.dumps(decision.detail, sort_keys=True, default=float)
        self._conn.execute(
            "INSERT INTO decisions VALUES (?, ?, ?, ?, ?)",
            (time_s, policy, decision.reason, actions, detail),
        )

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        """Commit and close; the writing store also folds its write-ahead log into ``run.db``
        and leaves it in rollback-journal mode. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.commit()
            if self._writer:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._conn.execute("SELECT key, value FROM meta")}

    def observations(
        self, instance_id: str | None = None, since_s: float | None = None
    ) -> list[Observation]:
        """The stored observations in time order, of one instance or all, from ``since_s`` on."""
        sql = f"SELECT {_OBS_COLS}, extra FROM observations"
        where: list[str] = []
        args: list[Any] = []
        if instance_id is not None:
            where.append("instance_id = ?")
            args.append(instance_id)
        if since_s is not None:
            where.append("time_s >= ?")
            args.append(since_s)
        if where:
            sql += " WHERE " + " AND ".join(where)
        out = []
        for row in self._conn.execute(sql + " ORDER BY time_s, instance_id", args):
            d = dict(zip(OBSERVATION_FIELDS, row[:-1], strict=True))
            d["extra"] = json.loads(row[-1])
            out.append(Observation.from_dict(d))
        return out

    def snapshots(self, environment: str) -> Iterator[Snapshot]:
        """The stored observations regrouped into the snapshots they came in, in time order
        (an interval that observed no instance left no row, so it has no snapshot)."""
        group: dict[str, Observation] = {}
        time_s: float | None = None
        for obs in self.observations():
            if time_s is not None and obs.time_s != time_s:
                yield Snapshot(time_s=time_s, environment=environment, instances=group)
                group = {}
            time_s = obs.time_s
            group[obs.instance_id] = obs
        if time_s is not None:
            yield Snapshot(time_s=time_s, environment=environment, instances=group)

    def observation_columns(self, extra_key: str) -> dict[str, NDArray[Any]]:
        """Every observation as columns, in one query: ``time_s``, ``interval_s``,
        ``instance`` (ids), ``requests``, ``mean_rt_s`` (NaN where none completed) and
        ``extra`` (``extra[extra_key]`` where no request completed, else NaN). Per-row
        ``Observation`` objects are too slow for fleets."""
        rows = self._conn.execute(
            "SELECT time_s, interval_s, instance_id, requests, mean_rt_seconds,"
            " CASE WHEN requests = 0 THEN extra END FROM observations"
        ).fetchall()
        cols = list(zip(*rows, strict=True)) if rows else [()] * 6
        extra = [json.loads(x).get(extra_key, np.nan) if x is not None else np.nan for x in cols[5]]
        return {
            "time_s": np.asarray(cols[0], dtype=np.float64),
            "interval_s": np.asarray(cols[1], dtype=np.float64),
            "instance": np.asarray(cols[2], dtype=object),
            "requests": np.asarray(cols[3], dtype=np.int64),
            "mean_rt_s": np.asarray(
                [np.nan if v is None else v for v in cols[4]], dtype=np.float64
            ),
            "extra": np.asarray(extra, dtype=np.float64),
        }

    def interval_aggregates(self, start_s: float, end_s: float) -> dict[str, dict[str, Any]]:
        """Per-instance sums over the observations whose interval midpoint is in
        ``[start_s, end_s)``: requests, errors, mean cpu_util and util_pct (NULLs left out), and
        request-weighted sums of mean and p95 response time over the intervals that measured
        them (with their weights), computed in SQLite so large runs stay fast."""
        rows = self._conn.execute(
            """
            SELECT instance_id, SUM(requests), SUM(errors), AVG(cpu_util), AVG(util_pct),
              SUM(CASE WHEN requests > 0 AND mean_rt_seconds IS NOT NULL
                       THEN requests * mean_rt_seconds END),
              SUM(CASE WHEN requests > 0 AND mean_rt_seconds IS NOT NULL THEN requests END),
              SUM(CASE WHEN requests > 0 AND p95_rt_seconds IS NOT NULL
                       THEN requests * p95_rt_seconds END),
              SUM(CASE WHEN requests > 0 AND p95_rt_seconds IS NOT NULL THEN requests END)
            FROM observations
            WHERE time_s - interval_s / 2.0 >= ? AND time_s - interval_s / 2.0 < ?
            GROUP BY instance_id
            """,
            (start_s, end_s),
        )
        keys = (
            "requests",
            "errors",
            "cpu_util",
            "util_pct",
            "rt_sum",
            "rt_weight",
            "p95_sum",
            "p95_weight",
        )
        return {row[0]: dict(zip(keys, row[1:], strict=True)) for row in rows}

    def steal_pct(self, start_s: float, end_s: float) -> float | None:
        """The machine's mean CPU steal, in percent, over the intervals whose midpoint is in
        ``[start_s, end_s)``, one value per interval (steal is host-wide, recorded on every
        instance's row); ``None`` where the environment measured none (the simulator)."""
        row = self._conn.execute(
            """
            SELECT AVG(s) FROM (
              SELECT MAX(steal_ratio) AS s FROM observations
              WHERE steal_ratio IS NOT NULL
                AND time_s - interval_s / 2.0 >= ? AND time_s - interval_s / 2.0 < ?
              GROUP BY time_s)
            """,
            (start_s, end_s),
        ).fetchone()
        return None if row[0] is None else 100.0 * float(row[0])

    def last_time_s(self) -> float:
        row = self._conn.execute("SELECT MAX(time_s) FROM observations").fetchone()
        return float(row[0]) if row[0] is not None else 0.0

    def instance_ids(self) -> list[str]:
        rows = self._conn.execute("SELECT DISTINCT instance_id FROM observations ORDER BY 1")
        return [r[0] for r in rows]

    def request_arrays(self) -> dict[str, NDArray[Any]]:
        """Per-request columns as arrays: send_s, latency_s (NaN on failure), status, bytes, server."""
        rows = self._conn.execute(
            "SELECT send_s, latency_s, status, bytes, server FROM requests ORDER BY send_s"
        ).fetchall()
        if not rows:
            return {
                "send_s": np.empty(0),
                "latency_s": np.empty(0),
                "status": np.empty(0, dtype=np.int64),
                "bytes": np.empty(0, dtype=np.int64),
                "server": np.empty(0, dtype=object),
            }
        cols = list(zip(*rows, strict=True))
        return {
            "send_s": np.asarray(cols[0], dtype=np.float64),
            "latency_s": np.asarray(
                [np.nan if v is None else v for v in cols[1]], dtype=np.float64
            ),
            "status": np.asarray(cols[2], dtype=np.int64),
            "bytes": np.asarray(cols[3], dtype=np.int64),
            "server": np.asarray(cols[4], dtype=object),
        }

    def request_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM requests").fetchone()[0])

    def events(self) -> list[tuple[float, str, dict[str, Any]]]:
        rows = self._conn.execute("SELECT time_s, kind, detail FROM events ORDER BY time_s, rowid")
        return [(t, k, json.loads(d)) for t, k, d in rows]

    def decisions(self) -> list[tuple[float, str, str, list[dict[str, Any]]]]:
        rows = self._conn.execute(
            "SELECT time_s, policy, reason, actions FROM decisions ORDER BY time_s, rowid"
        )
        return [(t, p, r, json.loads(a)) for t, p, r, a in rows]

    def decision_log(
        self,
    ) -> list[tuple[float, str, str, list[dict[str, Any]], dict[str, Any]]]:
        """Every decision with its detail, read in one query: a run still writing cannot
        slip a decision between two reads and shift one list against the other."""
        rows = self._conn.execute(
            "SELECT time_s, policy, reason, actions, detail FROM decisions ORDER BY time_s, rowid"
        )
        return [(t, p, r, json.loads(a), json.loads(d)) for t, p, r, a, d in rows]

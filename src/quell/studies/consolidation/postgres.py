"""A PostgreSQL 15 cluster as a lab tier: its configuration, ``initdb``, the generated
RUBBoS-like data, the postmaster in the foreground under the supervisor (inside the cgroups it
is given, so every backend and auxiliary process it forks is inside them too), its
``pg_stat_statements``, and a fast shutdown.

The data directory lives where the caller says (the consolidation lab puts it on a tmpfs under
the run's work directory). The postmaster runs as the ``postgres`` user through ``setpriv``,
which execs it: the pid the supervisor holds is the postmaster's. Every query the lab itself
sends goes through ``psql`` on the cluster's unix socket.

The data (``data_sql``): 20 categories, 100 000 users, 100 000 stories, ``comments_total``
comments (1 000 000 at full scale, 335 MB with indexes), from ``setseed`` so two clusters hold
the same rows. The two transaction classes the application tier sends (``LIGHT_SQL``,
``HEAVY_SQL``): a front page of 50 consecutive stories with author and comment count (index
range scans, about 0.7 ms of CPU) and a title search (an ILIKE scan of the 100 000 titles,
about 43 ms)."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError
from quell.lab.process import Managed, Placement, Supervisor, run_checked

PG_BIN = Path("/usr/lib/postgresql/15/bin")
"""Debian puts ``initdb``, ``pg_ctl`` and ``postgres`` here, not on PATH."""
PG_USER = "postgres"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

LIGHT_SQL = (
    "SELECT s.id, s.title, s.date, u.nickname, count(c.id) AS ncomments FROM stories s "
    "JOIN users u ON u.id = s.writer LEFT JOIN comments c ON c.story_id = s.id "
    "WHERE s.id BETWEEN $1 AND $1 + 49 GROUP BY s.id, u.nickname ORDER BY s.date DESC"
)
"""The light transaction (a front page): its parameter is the first story, 1..99 950."""
HEAVY_SQL = "SELECT id, title, date FROM stories WHERE title ILIKE '%' || $1 || '%'"
"""The heavy transaction (a title search): its parameter is 3 hex digits, 100..fff."""


@dataclass(frozen=True)
class PgCluster:
    """One cluster: its data directory, the directory of its unix socket, its TCP port on
    127.0.0.1, and the group its processes run in (named for what it serves)."""

    name: str
    data_dir: Path
    socket_dir: Path
    port: int

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"


def cluster_conf(cluster: PgCluster, max_connections: int) -> str:
    """``bench.conf``, included by the cluster's ``postgresql.conf``: everything in shared
    buffers, one backend = one CPU-bound process (no JIT, no parallel workers), durability off
    (the data is generated and lives in memory), no autovacuum (the data is read-only once
    loaded: nothing may use the shared core but the transactions), pg_stat_statements on.
    Dynamic shared memory in files of the data directory (``mmap``), so that a cluster killed
    with kill -9 leaves nothing in ``/dev/shm``; its one System V segment is named in
    ``postmaster.pid`` (``sysv_shmids``) for ``quell lab clean`` to remove."""
    return f"""# quell consolidation lab: cluster {cluster.name}
listen_addresses = '127.0.0.1'
port = {cluster.port}
unix_socket_directories = '{cluster.socket_dir}'
max_connections = {max_connections}
shared_buffers = 512MB
dynamic_shared_memory_type = mmap
work_mem = 32MB
maintenance_work_mem = 256MB
effective_cache_size = 1GB
random_page_cost = 1.1
jit = off
max_parallel_workers_per_gather = 0
max_parallel_maintenance_workers = 0
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = top
pg_stat_statements.max = 1000
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off
"""


def data_sql(comments_total: int = 1_000_000) -> str:
    """The RUBBoS-like schema and rows, then ``VACUUM (ANALYZE)``; the same rows every time."""
    return f"""CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
SELECT setseed(0.42);
CREATE TABLE categories (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO categories SELECT i, 'category-' || i FROM generate_series(1, 20) i;
CREATE TABLE users (id int PRIMARY KEY, nickname text NOT NULL, email text, rating int,
                    created timestamptz);
INSERT INTO users SELECT i, 'user' || i, 'user' || i || '@example.org', (random() * 10)::int,
  now() - random() * interval '3 years' FROM generate_series(1, 100000) i;
CREATE TABLE stories (id int PRIMARY KEY, title text NOT NULL, body text,
  date timestamptz NOT NULL, writer int NOT NULL REFERENCES users,
  category int NOT NULL REFERENCES categories);
INSERT INTO stories SELECT i, 'story ' || md5(i::text), repeat(md5((i * 7)::text), 10),
  now() - random() * interval '2 years', 1 + (random() * 99999)::int, 1 + (random() * 19)::int
  FROM generate_series(1, 100000) i;
CREATE TABLE comments (id int PRIMARY KEY, writer int NOT NULL, story_id int NOT NULL,
  parent int NOT NULL DEFAULT 0, subject text, comment text, date timestamptz NOT NULL,
  rating int NOT NULL);
INSERT INTO comments SELECT i, 1 + (random() * 99999)::int, 1 + (random() * 99999)::int, 0,
  'Re: ' || md5((i * 3)::text), repeat(md5((i * 5)::text), 4),
  now() - random() * interval '2 years', (random() * 5)::int - 1
  FROM generate_series(1, {int(comments_total)}) i;
CREATE INDEX ON stories (category, date DESC);
CREATE INDEX ON stories (date DESC);
CREATE INDEX ON comments (story_id);
CREATE INDEX ON comments (writer);
VACUUM (ANALYZE);
"""


def as_postgres(argv: list[str]) -> list[str]:
    """``argv`` run as the postgres user (setpriv execs it: no process in between)."""
    return ["setpriv", f"--reuid={PG_USER}", f"--regid={PG_USER}", "--init-groups", *argv]


def init_cluster(cluster: PgCluster, max_connections: int) -> None:
    """``initdb`` into ``data_dir`` (its parent must exist and be the postgres user's), and the
    lab's configuration included."""
    run_checked(
        as_postgres(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(cluster.data_dir),
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]
        ),
        f"initdb {cluster.name}",
        timeout_s=120.0,
    )
    conf = cluster.data_dir / "bench.conf"
    conf.write_text(cluster_conf(cluster, max_connections))
    with (cluster.data_dir / "postgresql.conf").open("a") as f:
        f.write("\ninclude 'bench.conf'\n")


def start_cluster(supervisor: Supervisor, cluster: PgCluster, placement: Placement) -> Managed:
    """The postmaster in the foreground, in ``placement``'s cgroups; returns once it takes
    queries."""
    proc = supervisor.start(
        f"postgres-{cluster.name}",
        as_postgres([str(PG_BIN / "postgres"), "-D", str(cluster.data_dir)]),
        placement,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ComponentError(proc.name, f"exited at start: {proc.log_tail()}")
        try:
            psql(cluster, "SELECT 1", timeout_s=5.0)
            return proc
        except ComponentError:
            time.sleep(0.2)
    supervisor.stop(proc, sig=signal.SIGINT)
    raise ComponentError(proc.name, f"not ready in {READY_TIMEOUT_S:g} s: {proc.log_tail()}")


def stop_cluster(supervisor: Supervisor, proc: Managed) -> None:
    """Fast shutdown (SIGINT: clients cut, a checkpoint, exit), then whatever is left killed."""
    supervisor.stop(proc, timeout_s=STOP_TIMEOUT_S, sig=signal.SIGINT)


def psql_argv(cluster: PgCluster, *args: str) -> list[str]:
    """psql on the cluster's ``postgres`` database over its socket, stopping at the first
    error, with ``args`` after."""
    return [
        "psql",
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        str(cluster.socket_dir),
        "-p",
        str(cluster.port),
        "-U",
        PG_USER,
        "-d",
        "postgres",
        *args,
    ]


def psql(cluster: PgCluster, sql: str, timeout_s: float = 60.0) -> str:
    """Run ``sql`` on the cluster's ``postgres`` database; unaligned rows, ``|`` between
    fields."""
    return run_checked(
        psql_argv(cluster, "-A", "-t", "-c", sql), f"psql {cluster.name}", timeout_s=timeout_s
    )


def load_data(cluster: PgCluster, comments_total: int, timeout_s: float = 600.0) -> None:
    """Create and fill the tables (the backend runs in the cluster's cgroups)."""
    script = cluster.data_dir.parent / f"{cluster.name}-data.sql"
    script.write_text(data_sql(comments_total))
    run_checked(psql_argv(cluster, "-f", str(script)), f"load {cluster.name}", timeout_s=timeout_s)


def sysv_shmids(root: Path) -> list[int]:
    """The System V shared memory segments of the clusters under ``root`` (line 7 of each
    ``postmaster.pid``: key and id), for removal after a kill -9."""
    ids = []
    for pidfile in sorted(root.glob("*/postmaster.pid")):
        try:
            lines = pidfile.read_text().splitlines()
            ids.append(int(lines[6].split()[1]))
        except (OSError, IndexError, ValueError):
            continue
    return ids


def remove_segments(root: Path) -> list[str]:
    """Remove the System V shared memory segments of the clusters under ``root`` (a postmaster
    killed with kill -9 leaves its segment); returns those removed ("shm 17")."""
    removed = []
    for shmid in sysv_shmids(root):
        done = subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, check=False)
        if done.returncode == 0:
            removed.append(f"shm {shmid}")
    return removed


@dataclass(frozen=True)
class StatementStats:
    """One statement's line of ``pg_stat_statements``: calls and execution time (planning
    excluded), in seconds."""

    query: str
    calls_total: int
    mean_exec_seconds: float
    stddev_exec_seconds: float


def reset_statements(cluster: PgCluster) -> None:
    psql(cluster, "SELECT pg_stat_statements_reset()")


def statement_stats(cluster: PgCluster) -> list[StatementStats]:
    """Every statement ``pg_stat_statements`` holds, most called first."""
    out = psql(
        cluster,
        "SELECT calls, mean_exec_time, stddev_exec_time, replace(query, E'\\n', ' ') "
        "FROM pg_stat_statements ORDER BY calls DESC",
    )
    stats = []
    for line in out.splitlines():
        calls, mean_ms, stddev_ms, query = line.split("|", 3)
        stats.append(
            StatementStats(query, int(calls), float(mean_ms) / 1e3, float(stddev_ms) / 1e3)
        )
    return stats

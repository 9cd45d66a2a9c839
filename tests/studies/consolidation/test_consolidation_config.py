"""The consolidation lab's configurations and bookkeeping, without a lab: what nginx, php-fpm
and HAProxy are given (and that nginx and HAProxy accept it: their own ``-t``), where
cross-tier priority goes, the Table II scaling, the data script, the mounts and the System V
segments ``quell lab clean`` finds."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from quell.lab.cleanup import mounts_under
from quell.lab.users import read_population, write_population
from quell.studies.consolidation.ntier import (
    LIGHT_PRIORITY_CLASS,
    RESOURCES,
    FrontPaths,
    HAProxyFront,
    haproxy_config,
    nginx_config,
    php_fpm_config,
    write_front,
)
from quell.studies.consolidation.postgres import PgCluster, cluster_conf, data_sql, sysv_shmids
from quell.workload.population import ThinkModulation
from tests.workload.build import BASE


def paths(tmp_path: Path) -> FrontPaths:
    return FrontPaths(tmp_path / "front-inc", "inc", 18082, tmp_path / "pg" / "run", 15434)


def test_table_ii_scaled_keeps_the_ratio_of_database_connections() -> None:
    lib, con = RESOURCES["liberal"], RESOURCES["conservative"]
    assert lib.php_children / con.php_children == 96 / 16  # the seed's DB connections
    assert lib.php_children <= lib.db_max_connections and con.php_children <= con.db_max_connections


def test_ctp_puts_light_requests_in_a_lower_class_on_every_frontend(tmp_path: Path) -> None:
    fronts = [HAProxyFront("const", 18091, 18081, 24), HAProxyFront("inc", 18092, 18082, 4)]
    rule = f"http-request set-priority-class int({LIGHT_PRIORITY_CLASS}) if {{ path_beg /light }}"
    assert LIGHT_PRIORITY_CLASS < 0  # HAProxy serves lower classes first; the default is 0
    on = haproxy_config(fronts, True, tmp_path / "a.sock")
    off = haproxy_config(fronts, False, tmp_path / "a.sock")
    assert on.count(rule) == 2 and rule not in off
    assert "server web_const 127.0.0.1:18081 maxconn 24" in on
    assert "server web_inc 127.0.0.1:18082 maxconn 4" in on
    cfg = tmp_path / "h.cfg"
    cfg.write_text(on)
    done = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_nginx_names_each_class_and_passes_it_to_php(tmp_path: Path) -> None:
    p = paths(tmp_path)
    conf = nginx_config(p, RESOURCES["liberal"])
    for cls in ("light", "heavy"):
        assert f"fastcgi_param QUERY_STRING class={cls};" in conf
        assert f"add_header X-Quell-Server {cls} always;" in conf
    assert "listen 127.0.0.1:18082" in conf and "worker_connections 1024" in conf
    assert "pm.max_children = 4" in php_fpm_config(p, RESOURCES["conservative"])
    write_front(p, RESOURCES["liberal"])
    done = subprocess.run(
        ["nginx", "-t", "-p", str(p.base), "-c", str(p.nginx_conf)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_cluster_conf_and_data(tmp_path: Path) -> None:
    c = PgCluster("inc", tmp_path / "inc", tmp_path / "run", 15434)
    conf = cluster_conf(c, 40)
    for line in (
        "port = 15434",
        f"unix_socket_directories = '{tmp_path / 'run'}'",
        "max_parallel_workers_per_gather = 0",
        "shared_preload_libraries = 'pg_stat_statements'",
        "autovacuum = off",
        "jit = off",
    ):
        assert line in conf.splitlines()
    sql = data_sql(1234)
    assert "FROM generate_series(1, 1234) i;" in sql and "setseed(0.42)" in sql


def test_mounts_under_a_run_deepest_first(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "tmpfs /var/tmp/quell/abc123/pg tmpfs rw 0 0\n"
        "tmpfs /var/tmp/quell/abc123/pg/x\\040y tmpfs rw 0 0\n"
        "tmpfs /var/tmp/quell/abc1234 tmpfs rw 0 0\n"
        "proc /proc proc rw 0 0\n"
    )
    found = mounts_under(Path("/var/tmp/quell/abc123"), mounts)
    assert found == [Path("/var/tmp/quell/abc123/pg/x y"), Path("/var/tmp/quell/abc123/pg")]


def test_sysv_segments_from_postmaster_pid(tmp_path: Path) -> None:
    for name, shmid in (("const", 17), ("inc", 18)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "postmaster.pid").write_text(
            f"123\n{tmp_path / name}\n1700000000\n15433\n/run\n127.0.0.1\n  15433001  {shmid}\nready\n"
        )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "postmaster.pid").write_text("123\n")
    assert sysv_shmids(tmp_path) == [17, 18]


def test_a_modulated_population_round_trips_through_its_file(tmp_path: Path) -> None:
    pop = dataclasses.replace(BASE, think_modulation=ThinkModulation((0.0, 5.0), (0.5, 2.0)))
    write_population(tmp_path / "u.json", pop)
    back = read_population(tmp_path / "u.json", BASE.duration_s)
    assert back == pop
    assert back.think_end_s(4.0, 1.0) == pytest.approx(5.0 + 0.5 / 2.0)
    assert BASE.think_end_s(4.0, 1.0) == 5.0

"""The attribution campaign's cells, their tenants' processes, and the kept PSI series."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from quell.errors import InputError
from quell.report.records import read_psi
from quell.studies.attribution.campaign import (
    HELD_OUT_KINDS,
    HELD_OUT_STRESS_NG,
    TEST_REQUESTS,
    TRAIN_KINDS,
    TRAIN_REQUESTS,
    periodic_cells,
    train_cells,
)
from quell.studies.attribution.campaign import test_cells as held_out_cells
from quell.studies.attribution.experiment import deadline_for, tenant_argvs


def test_the_campaign_fits_on_at_least_50000_requests_and_tests_on_runs_of_50000() -> None:
    train = train_cells()
    # 80 % of the training runs' requests are fitted on, 20 % held out
    assert int(0.8 * sum(c.requests for c in train)) >= 50_000
    assert {c.requests for c in train} == {TRAIN_REQUESTS}
    assert {c.requests for c in held_out_cells()} == {TEST_REQUESTS} == {50_000}
    assert {c.seed for c in train} == {1} and {c.seed for c in held_out_cells()} == {2}
    assert {c.requests for c in periodic_cells()} == {10_000}


def test_held_out_kinds_are_never_trained_on_and_each_has_a_test_run() -> None:
    trained = {c.stressor for c in train_cells() if c.antagonist_workers > 0}
    assert trained == set(TRAIN_KINDS)
    assert not trained & set(HELD_OUT_KINDS)
    tested = {c.stressor for c in held_out_cells() if c.antagonist_workers > 0}
    assert set(HELD_OUT_KINDS) <= tested
    assert {"fio", "iperf3"} <= set(HELD_OUT_KINDS)
    # the acceptance's held-out kinds are stress-ng classes, all of them held out
    assert set(HELD_OUT_STRESS_NG) == {"cache", "switch"} < set(HELD_OUT_KINDS)
    names = [c.name for c in (*train_cells(), *held_out_cells(), *periodic_cells())]
    assert len(names) == len(set(names))


def test_each_tenant_kind_is_pinned_and_bounded(tmp_path: Path) -> None:
    (stress,) = tenant_argvs("cache", 0, 1, tmp_path, 70.4)
    assert stress == ["stress-ng", "--cache", "1", "--taskset", "1", "--timeout", "70s"]
    (fio,) = tenant_argvs("fio", 2, 1, tmp_path, 70.4)
    assert fio[:3] == ["taskset", "-c", "1"] and fio[3] == "fio"
    assert f"--filename={tmp_path / 't2.dat'}" in fio
    assert "--runtime=71" in fio and "--time_based" in fio and "--direct=1" in fio
    server, client = tenant_argvs("iperf3", 1, 0, tmp_path, 30)
    assert server == ["taskset", "-c", "0", "iperf3", "-s", "-B", "127.0.0.1", "-p", "5302", "-1"]
    assert client[:5] == ["taskset", "-c", "0", "iperf3", "-c"]
    assert client[5] == "127.0.0.1" and client[client.index("-p") + 1] == "5302"
    assert client[client.index("-t") + 1] == "30"
    # another tenant of the same kind listens on a port of its own
    assert tenant_argvs("iperf3", 0, 0, tmp_path, 30)[0][8] == "5301"
    # a light cpu tenant (Fig. 4's background) is busy that share of the time; no other kind is
    (light,) = tenant_argvs("cpu", 0, 1, tmp_path, 30, load_pct=30)
    assert light == [
        "stress-ng",
        "--cpu",
        "1",
        "--taskset",
        "1",
        "--cpu-load",
        "30",
        "--timeout",
        "30s",
    ]
    with pytest.raises(ValueError, match="cpu tenants"):
        tenant_argvs("matrix", 0, 1, tmp_path, 30, load_pct=30)
    with pytest.raises(ValueError, match="cpu tenants"):
        tenant_argvs("fio", 0, 1, tmp_path, 30, load_pct=30)


def test_fig_4_compares_a_light_background_with_and_without_the_scan() -> None:
    clean, base, scan = periodic_cells()
    assert clean.clean and not base.clean and not scan.clean
    assert (base.antagonist_workers, base.tenant_load_pct, base.scan_mb) == (1, 30, 0)
    assert (scan.antagonist_workers, scan.tenant_load_pct) == (1, 30) and scan.scan_mb > 0
    assert len({c.seed for c in (clean, base, scan)}) == 1


def test_a_run_has_time_for_its_requests_at_30_ms_each() -> None:
    assert deadline_for(2_500) == pytest.approx(135.0)
    assert deadline_for(50_000) == pytest.approx(1_560.0)


def test_a_gzipped_psi_series_reads_as_the_plain_one(tmp_path: Path) -> None:
    text = "time_ns,psi_cpu_some_us\n0,10\n50000000,25\n100000000,40\n"
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "psi.csv").write_text(text)
    with gzip.open(packed / "psi.csv.gz", "wt") as fh:
        fh.write(text)
    a, b = read_psi(plain), read_psi(packed)
    assert a is not None and b is not None
    assert np.array_equal(a.time_ns, b.time_ns)
    assert np.array_equal(a.totals_us["psi_cpu_some_us"], [10.0, 25.0, 40.0])
    assert np.array_equal(b.totals_us["psi_cpu_some_us"], a.totals_us["psi_cpu_some_us"])
    assert read_psi(tmp_path) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "psi.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="gzip"):
        read_psi(tmp_path / "bad")

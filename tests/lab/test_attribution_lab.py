"""The attribution campaign's runs on this machine: the instrumented service alone and beside
two stress-ng tenants on its CPU (each in a cgroup of its own), a record per request with
counters that add up, the tenants' run-queue wait seen per request, nothing left after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quell.lab.tag import RunTag
from quell.report.records import read_psi, read_records
from quell.studies.attribution.experiment import Cell, run_cell
from tests.lab.leftovers import nothing_left

pytestmark = pytest.mark.lab


def test_the_service_alone_and_beside_two_tenants(tmp_path: Path) -> None:
    tag = RunTag.new()
    clean = run_cell(Cell("clean", 3, requests=300), tmp_path, 1, tag)
    loaded = run_cell(Cell("cpu2", 3, antagonist_workers=2, requests=300), tmp_path, 1, tag)
    assert nothing_left(tag.value)
    a, b = read_records(clean), read_records(loaded)
    assert len(a) == len(b) == 300
    np.testing.assert_array_equal(np.sort(a["request_id"]), np.arange(300))
    assert set(a.request_class.tolist()) == {"/php", "/static"}
    assert np.all(a["cpu_ns"] + a["runq_wait_ns"] <= a["wall_ns"] + 1_000_000)
    # Two tenants with a CPU share each: the service waits in the run queue far longer.
    assert b["runq_wait_ns"].mean() > 3 * a["runq_wait_ns"].mean()
    psi = read_psi(loaded)
    assert psi is not None and "psi_cpu_some_us" in psi.totals_us
    assert psi.totals_us["psi_cpu_some_us"][-1] > psi.totals_us["psi_cpu_some_us"][0]

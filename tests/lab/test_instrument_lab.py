"""An instrumented lighttpd in the lab (quelltoken preloaded): one record per request, named by
the load generator's request ids, with counters that add up."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from quell.experiment.lab import run_lab
from quell.instrument.log import CSV_NAME, read_records
from quell.scenario import load_scenario
from tests.lab.leftovers import leftovers, run_tag

pytestmark = pytest.mark.lab

SCENARIO = """
name: instrument-smoke
seed: 5
duration_s: 6
interval_s: 1
initial_phase: baseline
hosts:
  - {id: h1, cpus: [0]}
instances:
  - {id: web, host: h1, server: lighttpd, instrument: true}
files:
  - {path: /index.html, size_bytes: 1400}
  - {path: /big.bin, size_bytes: 262144}
workload:
  arrival: {process: poisson, rate_rps: 40}
  requests:
    - {path: /index.html, weight: 3}
    - {path: /big.bin, weight: 1}
  cpus: [1]
  timeout_s: 5
"""


def run_and_read(tmp_path: Path, name: str, text: str) -> tuple[int, int, pd.DataFrame, Path]:
    """Run the scenario ``text`` in the lab; instance web's answered requests, errors and
    per-request records, and the run directory."""
    path = tmp_path / name
    path.write_text(text)
    summary = run_lab(load_scenario(path), path, tmp_path / "runs")
    run_dir = Path(summary["run_dir"])
    served = sum(p["instances"]["web"]["requests"] for p in summary["phases"])
    errors = sum(p["instances"]["web"]["errors"] for p in summary["phases"])
    return served, errors, read_records(run_dir / "instrument" / "web" / CSV_NAME), run_dir


def test_an_instrumented_lighttpd_records_every_request(tmp_path: Path) -> None:
    served, errors, df, run_dir = run_and_read(tmp_path, "instrument-smoke.yaml", SCENARIO)
    assert served >= 150 and errors == 0
    requests = df[df["request_id"] >= 0]
    checks = df[df["request_id"] < 0]
    # one record per request (HAProxy's TCP health checks are the records without an id)
    assert len(requests) == served
    assert requests["request_id"].is_unique
    assert set(requests["request_class"]) == {"/index.html", "/big.bin"}
    assert (checks["request_class"] == "").all()
    # plausible counters: a request is served in well under a second, with some CPU, and
    # its wall time holds its CPU and run-queue wait
    assert (requests["wall_ns"] < 1_000_000_000).all()
    assert (requests["cpu_ns"] > 0).all()
    assert (requests["cpu_ns"] + requests["runq_wait_ns"] <= requests["wall_ns"] + 4_000_000).all()
    big = requests[requests["request_class"] == "/big.bin"]["cpu_ns"].median()
    small = requests[requests["request_class"] == "/index.html"]["cpu_ns"].median()
    assert big > small  # sending 256 KiB costs more than 1.4 KB
    assert requests["thread_id"].nunique() == 1  # lighttpd serves on one thread
    assert not any(leftovers(run_tag(run_dir)).values())


PHP_SCENARIO = """
name: instrument-php
seed: 6
duration_s: 6
interval_s: 1
initial_phase: baseline
hosts:
  - {id: h1, cpus: [0]}
instances:
  - id: web
    host: h1
    server: apache
    instrument: true
    apache: {mpm: event, threads_per_child: 4, server_limit: 2, max_request_workers: 8,
             php_max_children: 3}
files:
  - {path: /x.bin, size_bytes: 5000}
pages:
  - {path: /app/p.php, working_set_bytes: 1048576, touches: 20000, response_bytes: 3000}
workload:
  arrival: {process: poisson, rate_rps: 20}
  requests:
    - {path: /app/p.php}
  cpus: [1]
  timeout_s: 5
"""


def test_instrumented_php_fpm_workers_record_every_php_request(tmp_path: Path) -> None:
    served, errors, df, run_dir = run_and_read(tmp_path, "instrument-php.yaml", PHP_SCENARIO)
    assert served >= 60 and errors == 0
    requests = df[df["request_id"] >= 0]
    # one record per request, each in one worker (php-fpm's pool of 3 processes); the records
    # without an id are the lab's warm-up requests before the run
    assert len(requests) == served
    assert requests["request_id"].is_unique
    assert set(df["request_class"]) == {"/app/p.php"}
    assert 1 <= requests["thread_id"].nunique() <= 3
    # 20,000 touches of a 1 MiB working set: CPU-bound, a millisecond or more of CPU each
    assert requests["cpu_ns"].median() >= 1_000_000
    assert (requests["cpu_ns"] + requests["runq_wait_ns"] <= requests["wall_ns"] + 4_000_000).all()
    assert (requests["yields"] == 0).all()
    assert not any(leftovers(run_tag(run_dir)).values())

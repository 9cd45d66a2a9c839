"""Attribution in a lab run, on a run directory built from the committed campaign's records
(docs/results/data/attribution/runs) and the committed model (scenarios/attribution): the
written file equals ``quell attribute predict`` on the same records, one row per request with
an id, the summary, and the run report's table and plots read back from the stored data."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from quell.attribute.apply import Attribution
from quell.attribute.bundle import load_attribution_model
from quell.experiment.lab import attribute_lab_run
from quell.instrument.log import CSV_NAME, read_records, write_records
from quell.report.attribution import read_attribution_csv
from quell.report.render import render_report
from quell.report.run_attribution import (
    MIN_CELL_REQUESTS,
    attribute_run,
    attribution_file,
    phase_load_cells,
)
from quell.scenario import load_scenario
from tests.cli.inprocess import run_quell

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "docs" / "results" / "data" / "attribution" / "runs"
MODEL = ROOT / "scenarios" / "attribution" / "model.json"
SCENARIO = ROOT / "scenarios" / "attribution" / "lighttpd-hog.yaml"
RUN = "test-cpu2-w1"  # 50,000 requests beside two stress-ng CPU workers, held out of the fit


def instrumented(run_dir: Path, iid: str, source: Path = CAMPAIGN / RUN) -> Path:
    """``run_dir`` with ``source``'s records as instance ``iid``'s, as a lab run keeps them."""
    folder = run_dir / "instrument" / iid
    folder.mkdir(parents=True)
    shutil.copy(source / CSV_NAME, folder / CSV_NAME)
    return folder


def test_the_written_attribution_equals_attribute_predict(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    instrumented(run_dir, "web")
    done, errors = attribute_run(run_dir, ["web"], load_attribution_model(MODEL))
    assert errors == []
    written = gzip.decompress(attribution_file(run_dir, "web").read_bytes())
    predicted = tmp_path / "predict.csv"
    out = run_quell("attribute", "predict", MODEL, run_dir / "instrument" / "web", "--out", predicted, "--json")  # fmt: skip
    assert out.code == 0, out.stderr
    assert written == predicted.read_bytes()
    # one row per request of the records, in their order
    records = read_records(CAMPAIGN / RUN)
    attr = read_attribution_csv(attribution_file(run_dir, "web"))
    assert len(attr.request_id) == len(records) == 50_000
    assert attr.request_id.tolist() == records["request_id"].tolist()
    # the summary is the written file's, and predict's
    expected = attr.summary()
    assert {k: v for k, v in done["web"].items() if k != "file"} == expected
    assert json.loads(out.stdout.splitlines()[-1])["runs"][0] == {"run": str(run_dir / "instrument" / "web")} | expected  # fmt: skip
    # the provider's part lies within [0, latency], the service's is the rest
    assert np.all(attr.provider_seconds >= 0) and np.all(attr.provider_seconds <= attr.wall_seconds)
    assert np.allclose(attr.provider_seconds + attr.service_seconds, attr.wall_seconds)
    # beside two CPU hogs the provider takes a real share of the latency
    assert expected["provider_share"] > 0.1


def test_records_without_a_request_id_are_left_out(tmp_path: Path) -> None:
    table = read_records(CAMPAIGN / RUN).head(60).copy()
    table.loc[7, "request_id"] = -1  # a health check: no id, no class
    table.loc[7, "request_class"] = ""
    folder = tmp_path / "run" / "instrument" / "web"
    folder.mkdir(parents=True)
    write_records(table, folder / CSV_NAME)
    done, errors = attribute_run(tmp_path / "run", ["web"], load_attribution_model(MODEL))
    assert errors == [] and done["web"]["requests"] == 59
    attr = read_attribution_csv(attribution_file(tmp_path / "run", "web"))
    assert -1 not in attr.request_id.tolist()


def test_predict_reads_a_lab_run_s_records_without_its_health_checks(tmp_path: Path) -> None:
    """`quell attribute predict` on ``instrument/<id>/`` as a lab run leaves it: HAProxy's TCP
    health checks (no id, no class) are no requests, and are left out as the run's own path
    leaves them out."""
    table = read_records(CAMPAIGN / RUN).head(60).copy()
    table.loc[[3, 9], "request_id"] = -1
    table.loc[[3, 9], "request_class"] = ""
    folder = tmp_path / "run" / "instrument" / "web"
    folder.mkdir(parents=True)
    write_records(table, folder / CSV_NAME)
    out = run_quell("attribute", "predict", MODEL, folder, "--json")
    assert out.code == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["runs"][0]["requests"] == 58


def test_an_instance_without_records_is_an_error_and_the_others_go_on(tmp_path: Path) -> None:
    instrumented(tmp_path / "run", "web")
    done, errors = attribute_run(tmp_path / "run", ["gone", "web"], load_attribution_model(MODEL))
    assert list(done) == ["web"]
    assert len(errors) == 1 and "gone" in errors[0] and "no per-request records" in errors[0]


def test_the_lab_run_summary_gets_the_attribution(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    instrumented(run_dir, "web")
    scenario = load_scenario(SCENARIO)
    summary = attribute_lab_run(run_dir, scenario, load_attribution_model(MODEL), {"phases": []})
    stored = json.loads((run_dir / "summary.json").read_text())
    assert stored == summary
    assert summary["attribution"]["web"]["requests"] == 50_000
    assert summary["attribution"]["web"]["file"] == str(attribution_file(run_dir, "web"))


def test_phase_by_load_cells_hold_each_cells_provider_p99() -> None:
    # 3 s of 10 requests a second, then 2 s of 30 a second; phase a until 2.5 s, then b
    starts = [s + i / 10 for s in range(3) for i in range(10)]
    starts += [3 + s + i / 30 for s in range(2) for i in range(30)]
    n = len(starts)
    provider = np.arange(n, dtype=np.float64) / 1000
    attr = Attribution(
        request_id=np.arange(n),
        request_class=np.full(n, "/static"),
        wall_seconds=provider + 0.01,
        excess_seconds=provider,
        low_seconds=provider - 0.001,
        high_seconds=provider + 0.001,
        provider_seconds=provider,
    )
    start_ns = (np.asarray(starts) * 1e9).astype(np.int64) + 123_456_789_000
    grid = phase_load_cells(attr, start_ns, 0.5, [("a", 0.0, 2.5), ("b", 2.5, 6.0)], levels=2)
    # run time = start + 0.5: a holds the first 2 s of requests (20, all at 10 req/s); b the
    # third second's 10 (at 10 req/s: fewer than MIN_CELL_REQUESTS, left out) and the 60 at 30
    assert MIN_CELL_REQUESTS == 20
    assert grid.row_names == {0.0: "a", 1.0: "b"}
    assert sorted(grid.column_names.values()) == ["10 req/s", "30 req/s"]
    cells = {(c.row, grid.column_names[c.column]): c.provider_p99_seconds for c in grid.cells}
    assert cells == {
        (0.0, "10 req/s"): pytest.approx(np.percentile(provider[:20], 99)),
        (1.0, "30 req/s"): pytest.approx(np.percentile(provider[30:], 99)),
    }


def test_the_run_report_reads_the_stored_attribution(make_run: Callable[..., Path]) -> None:
    run_dir = make_run()
    instrumented(run_dir, "web1")
    attribute_run(run_dir, ["web1"], load_attribution_model(MODEL))
    summary, out = render_report(run_dir)
    stored = read_attribution_csv(attribution_file(run_dir, "web1")).summary()
    assert {k: v for k, v in summary["attribution"]["web1"].items() if k != "file"} == stored
    assert (out / "attribution-web1.png").stat().st_size > 10_000
    assert (out / "attribution-heatmap-web1.png").stat().st_size > 10_000
    page = (out / "index.html").read_text()
    assert "Latency attribution" in page
    assert "attribution-web1.png" in page and "attribution-heatmap-web1.png" in page
    report = run_quell("lab", "report", run_dir)
    assert report.code == 0, report.stderr
    assert "latency and its provider part" in report.stdout

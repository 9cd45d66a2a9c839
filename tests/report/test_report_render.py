"""``render_report``: PNGs, the HTML page, incomplete runs and bad run directories."""

from __future__ import annotations

import sqlite3
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from quell.errors import InputError
from quell.report.render import render_report
from quell.store.run import RunStore

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNGS = {  # name: (width px, height px) at 100 dpi
    "response_time.png": (1000, 420),
    "throughput.png": (1000, 420),
    "utilisation.png": (1000, 840),
}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _row(*cells: str) -> str:
    first, *rest = cells
    return f"<tr><td>{first}</td>" + "".join(f'<td class="num">{c}</td>' for c in rest) + "</tr>"


def test_returns_summary_and_report_dir(run_dir: Path) -> None:
    summary, out = render_report(run_dir)
    assert out == run_dir / "report"
    assert summary["complete"] is True
    assert summary["phases"][0]["instances"]["web1"]["p95_rt_ms"] == 88.0
    assert sorted(p.name for p in out.iterdir()) == sorted([*PNGS, "index.html"])


@pytest.mark.parametrize(("name", "size"), PNGS.items())
def test_plots_are_valid_pngs(run_dir: Path, name: str, size: tuple[int, int]) -> None:
    _, out = render_report(run_dir)
    data = (out / name).read_bytes()
    assert _png_size(data) == size
    assert len(data) > 20_000
    assert data.endswith(b"IEND\xaeB`\x82")


def test_index_html_has_phases_numbers_events_and_decisions(run_dir: Path) -> None:
    _, out = render_report(run_dir)
    page = (out / "index.html").read_text()
    assert "<h1>twoweb</h1>" in page
    assert "environment: <strong>sim</strong>" in page
    assert "run: complete" in page
    assert "incomplete" not in page
    assert "<caption>baseline  [0, 10) s</caption>" in page
    assert "<caption>noisy  [10, 20) s</caption>" in page
    # The same cells as the terminal table.
    assert _row("web1", "5", "1", "0.5", "40.00", "88.00", "0.500", "25.0") in page
    assert _row("web1", "4", "0", "0.4", "80.00", "107.00", "0.900", "45.0") in page
    assert _row("web2", "3", "0", "0.3", "15.00", "24.00", "0.250", "12.5") in page
    assert _row("web2", "2", "0", "0.2", "250.00", "295.00", "0.750", "37.5") in page
    for name in PNGS:
        assert f'<img src="{name}"' in page
    assert '<td class="num">10</td><td>event</td><td>noisy +hog</td>' in page
    assert "RuntimeError: boom" in page
    assert (
        '<td class="num">12</td><td>static</td><td>web1 p95 above target</td>'
        "<td>SetWeight(instance_id=web1, weight=50)</td>"
    ) in page
    # A scaling decision folds its per-instance numbers under its reason; a reweight does not.
    assert page.count("<details>") == 1
    assert (
        "<summary>the numbers behind it (2 instances)</summary><table><thead><tr><th>id</th>"
        "<th>sf_calibrated</th><th>u_max_pct</th></tr></thead><tbody>"
        '<tr><td>web1</td><td class="num"></td><td class="num">30</td></tr>'
        '<tr><td>web2</td><td class="num">yes</td><td class="num">12.5</td></tr>'
    ) in page  # the run store keeps a detail's keys sorted


def test_index_html_is_self_contained(run_dir: Path) -> None:
    _, out = render_report(run_dir)
    page = (out / "index.html").read_text()
    assert "://" not in page
    assert "<link" not in page
    assert "<script" not in page


def test_report_can_be_rendered_twice(run_dir: Path) -> None:
    first, _ = render_report(run_dir)
    second, out = render_report(run_dir)
    assert first == second
    assert (out / "index.html").is_file()


def test_report_does_not_modify_the_store(run_dir: Path) -> None:
    before = (run_dir / "run.db").read_bytes()
    render_report(run_dir)
    assert (run_dir / "run.db").read_bytes() == before
    assert not (run_dir / "summary.json").exists()


def test_incomplete_run_is_marked(make_run: Callable[..., Path]) -> None:
    summary, out = render_report(make_run(finished=False, until_s=14.0))
    assert summary["complete"] is False
    page = (out / "index.html").read_text()
    assert "run: incomplete" in page
    assert "incomplete run: it stopped before the end; data ends at 14 s" in page
    assert _row("web1", "3", "0", "0.8", "70.00", "88.00", "0.900", "45.0") in page


KILLED_WRITER = """
import os, sys
from pathlib import Path
from quell.core.observation import Observation, Snapshot
from quell.store.run import RequestRecord, RunStore

store = RunStore.create(Path(sys.argv[1]))
store.set_meta(scenario="killed", environment="lab", phases=[["baseline", 0.0, 60.0]])
for k in range(1, 4):
    t = float(k)
    obs = Observation(t, "web1", 1.0, requests=2, throughput_rps=2.0, cpu_util=0.5)
    store.add_snapshot(Snapshot(t, "lab", {"web1": obs}))
    store.add_requests([RequestRecord(t - 0.5, 0.010 * k, 200, 100, "web1")])
    store.commit()
os._exit(9)  # no close(), no finished_at, no summary.json: as if the runner were killed
"""


def test_report_of_a_killed_run(tmp_path: Path) -> None:
    run = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(run)], check=False)
    assert proc.returncode == 9
    summary, out = render_report(run)
    assert summary["complete"] is False
    assert summary["data_end_s"] == 3.0
    (phase,) = summary["phases"]
    assert phase["observed_s"] == 3.0
    assert phase["instances"]["web1"]["requests"] == 3
    assert phase["instances"]["web1"]["throughput_rps"] == 1.0  # 3 requests / 3 s, not / 60 s
    assert phase["instances"]["web1"]["mean_rt_ms"] == 20.0
    assert "run: incomplete" in (out / "index.html").read_text()
    assert _png_size((out / "throughput.png").read_bytes()) == (1000, 420)


def _expect_input_error(run_dir: Path, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        render_report(run_dir)
    assert fragment in str(info.value)
    assert str(run_dir) in str(info.value)
    assert info.value.exit_code == 2


def test_missing_dir(tmp_path: Path) -> None:
    _expect_input_error(tmp_path / "nope", "no such directory")


def test_file_instead_of_dir(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    _expect_input_error(f, "not a directory")


def test_empty_dir(tmp_path: Path) -> None:
    _expect_input_error(tmp_path, "not a run directory (no run.db)")


def test_corrupt_db(tmp_path: Path) -> None:
    (tmp_path / "run.db").write_bytes(b"this is not sqlite at all" * 100)
    _expect_input_error(tmp_path, "unreadable run store: file is not a database")


def test_db_of_something_else(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "run.db")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    _expect_input_error(tmp_path, "unreadable run store: no such table: observations")


def test_run_that_never_started(tmp_path: Path) -> None:
    RunStore.create(tmp_path).close()
    _expect_input_error(tmp_path, "no phase list")


def test_malformed_meta(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    store.set_meta(phases=[["baseline", 0.0]])
    store.close()
    _expect_input_error(tmp_path, "not a usable run store")
    assert not (tmp_path / "report").exists()


def test_action_marks_one_per_decision_and_kind() -> None:
    from quell.report.plots import action_marks

    decisions = [
        (10.0, [{"type": "SetWeight", "instance_id": "a", "weight": 3}] * 2),
        (20.0, [{"type": "AddInstance", "instance_id": "n1", "host": "h2", "weight": 0}]),
        (30.0, [{"type": "RemoveInstance", "instance_id": "a"}, {"type": "SetWeight"}]),
        (40.0, []),
    ]
    assert action_marks(decisions) == {"add": [20.0], "remove": [30.0], "weights": [10.0, 30.0]}

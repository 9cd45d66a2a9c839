"""``quell lab report RUN_DIR``: read a run store, summarize it per phase, and write PNG plots and
a self-contained ``index.html`` into ``RUN_DIR/report/``. Works on a run that was killed mid-way
(marked incomplete); a directory that is not a readable run raises ``InputError``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from quell.errors import InputError, Problem
from quell.report.html import render_html
from quell.report.plots import write_plots
from quell.report.run_attribution import write_run_plots
from quell.report.summary import summarize
from quell.store.run import RunStore

REPORT_DIR = "report"
INDEX_HTML = "index.html"


def _bad(run_dir: Path, message: str) -> InputError:
    return InputError(str(run_dir), [Problem("", message)])


def _phases(meta: dict[str, Any]) -> list[tuple[str, float, float]]:
    raw = meta.get("phases")
    if not isinstance(raw, list) or not raw:
        raise ValueError("its meta has no phase list (the run never started)")
    out = []
    for p in raw:
        name, start, end = p
        out.append((str(name), float(start), float(end)))
    return out


def _first_sends(requests: dict[str, Any]) -> dict[str, float]:
    """When each server was sent its first request, on the run's clock."""
    out: dict[str, float] = {}
    for send_s, server in zip(requests["send_s"], requests["server"], strict=True):
        if server and server not in out:  # sorted by send_s
            out[str(server)] = float(send_s)
    return out


def render_report(run_dir: Path) -> tuple[dict[str, Any], Path]:
    """Write ``RUN_DIR/report/`` (three PNGs and ``index.html``); returns (summary, report dir)."""
    if not run_dir.exists():
        raise _bad(run_dir, "no such directory")
    if not run_dir.is_dir():
        raise _bad(run_dir, "not a directory")
    store = RunStore.open(run_dir)
    try:
        meta = store.meta()
        phases = _phases(meta)
        summary = summarize(store)
        observations = store.observations()
        events = store.events()
        log = store.decision_log()
        requests = store.request_arrays()
    except sqlite3.DatabaseError as exc:
        raise _bad(run_dir, f"unreadable run store: {exc}") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise _bad(run_dir, f"not a usable run store: {exc}") from None
    finally:
        store.close()

    out_dir = run_dir / REPORT_DIR
    try:
        out_dir.mkdir(exist_ok=True)
        plots = write_plots(
            observations,
            phases,
            events,
            out_dir,
            summary["target_rt_s"],
            [(t, a) for t, _, _, a, _ in log],
        )
        attribution, attribution_plots = write_run_plots(
            run_dir, out_dir, phases, _first_sends(requests)
        )
        if attribution:
            summary = summary | {"attribution": attribution}
        plots = [*plots, *attribution_plots]
        decisions = [(t, p, r, a) for t, p, r, a, _ in log]
        details = [d for *_, d in log]
        page = render_html(summary, plots, events, decisions, out_dir, details)
        (out_dir / INDEX_HTML).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise _bad(run_dir, f"cannot write the report: {exc.strerror or exc}") from None
    return summary, out_dir

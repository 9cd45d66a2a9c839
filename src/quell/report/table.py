"""Terminal tables of a run summary: one table per phase, one row per instance. The HTML report
uses the same columns and cell formatting, so both show the same numbers."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS: tuple[str, ...] = (
    "instance",
    "requests",
    "errors",
    "tput req/s",
    "mean RT ms",
    "p95 RT ms",
    "CPU",
    "util %",
)


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def row_cells(instance_id: str, m: dict[str, Any]) -> list[str]:
    """One instance's row of a phase table, as text."""
    return [
        instance_id,
        _fmt(m["requests"], "d"),
        _fmt(m.get("errors"), "d"),
        _fmt(m["throughput_rps"], ".1f"),
        _fmt(m["mean_rt_ms"], ".2f"),
        _fmt(m["p95_rt_ms"], ".2f"),
        _fmt(m["cpu_util"], ".3f"),
        _fmt(m["util_pct"], ".1f"),
    ]


def phase_title(phase: dict[str, Any]) -> str:
    return f"{phase['name']}  [{phase['start_s']:g}, {phase['end_s']:g}) s"


def incomplete_note(summary: dict[str, Any]) -> str | None:
    """A one-line warning for a run that did not finish, else ``None``."""
    if summary.get("complete", True):
        return None
    end = summary.get("data_end_s")
    upto = f"; data ends at {end:g} s" if isinstance(end, int | float) else ""
    return f"incomplete run: it stopped before the end{upto}"


def print_summary(summary: dict[str, Any], console: Console) -> None:
    note = incomplete_note(summary)
    if note is not None:
        console.print(f"[yellow]{note}[/]", highlight=False)
    for phase in summary["phases"]:
        table = Table(title=phase_title(phase), title_justify="left")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "instance" else "right")
        for iid, m in phase["instances"].items():
            table.add_row(*row_cells(iid, m))
        console.print(table)

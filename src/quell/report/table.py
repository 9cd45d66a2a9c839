"""Terminal tables of a run summary: one table per phase, one row per instance."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_summary(summary: dict[str, Any], console: Console) -> None:
    for phase in summary["phases"]:
        table = Table(
            title=f"{phase['name']}  [{phase['start_s']:g}, {phase['end_s']:g}) s",
            title_justify="left",
        )
        for col in (
            "instance",
            "requests",
            "errors",
            "tput req/s",
            "mean RT ms",
            "p95 RT ms",
            "CPU",
            "util %",
        ):
            table.add_column(col, justify="left" if col == "instance" else "right")
        for iid, m in phase["instances"].items():
            table.add_row(
                iid,
                _fmt(m["requests"], "d"),
                _fmt(m.get("errors"), "d"),
                _fmt(m["throughput_rps"], ".1f"),
                _fmt(m["mean_rt_ms"], ".2f"),
                _fmt(m["p95_rt_ms"], ".2f"),
                _fmt(m["cpu_util"], ".3f"),
                _fmt(m["util_pct"], ".1f"),
            )
        console.print(table)

"""Terminal tables of a run summary: one table per phase, one row per instance. The HTML report
uses the same columns and cell formatting, so both show the same numbers."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from quell.core.observation import STEAL_SUSPECT_PCT
from quell.report.felt import felt_table
from quell.report.fit import FitTable
from quell.report.summary import INSTANCE_METRICS

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
    title = f"{phase['name']}  [{phase['start_s']:g}, {phase['end_s']:g}) s"
    steal = phase.get("steal_pct")
    if steal is not None:
        title += f"  machine CPU steal {steal:.2f} %"
        if steal > STEAL_SUSPECT_PCT:
            title += " (suspect)"
    return title


def incomplete_note(summary: dict[str, Any]) -> str | None:
    """A one-line warning for a run that did not finish, else ``None``."""
    if summary.get("complete", True):
        return None
    end = summary.get("data_end_s")
    upto = f"; data ends at {end:g} s" if isinstance(end, int | float) else ""
    return f"incomplete run: it stopped before the end{upto}"


def felt_rows(summary: dict[str, Any]) -> list[tuple[list[str], dict[str, Any]]]:
    """Per phase, what its users felt per request (``[]`` for a run without per-request
    records, or a summary written before they were counted)."""
    return [([p["name"]], p["users"]) for p in summary["phases"] if p.get("users") is not None]


MAX_ROWS = 24
"""A phase table lists every instance up to this many; a larger fleet shows its slowest
instances and one row of medians over all of them (the JSON summary always has every one)."""
SLOWEST = 10


def _median(values: list[Any]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return float(vals[mid]) if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2.0


def phase_rows(phase: dict[str, Any], max_rows: int = MAX_ROWS) -> list[list[str]]:
    """The rows of one phase table: every instance, or for a large fleet the ``SLOWEST`` by mean
    response time followed by a row of per-instance medians over the whole fleet."""
    insts: dict[str, dict[str, Any]] = phase["instances"]
    if len(insts) <= max_rows:
        return [row_cells(iid, m) for iid, m in insts.items()]
    slowest = sorted(insts.items(), key=lambda kv: -(kv[1]["mean_rt_ms"] or -1.0))[:SLOWEST]
    medians = {k: _median([m.get(k) for m in insts.values()]) for k in INSTANCE_METRICS}
    for k in ("requests", "errors"):
        value = medians[k]
        if value is not None:
            medians[k] = round(value)
    rows = [row_cells(iid, m) for iid, m in slowest]
    rows.append(row_cells(f"median of {len(insts)}", medians))
    return rows


def print_summary(summary: dict[str, Any], console: Console) -> None:
    note = incomplete_note(summary)
    if note is not None:
        console.print(f"[yellow]{note}[/]", highlight=False)
    for phase in summary["phases"]:
        table = FitTable(title=phase_title(phase), title_justify="left")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "instance" else "right")
        for row in phase_rows(phase):
            table.add_row(*row)
        console.print(table)
    felt = felt_rows(summary)
    if felt:
        console.print(
            felt_table(felt, ("phase",), summary.get("target_rt_s"), summary["timeout_s"])
        )
    attribution = summary.get("attribution")
    if attribution:
        console.print(attribution_table(attribution))
    for e in summary.get("attribution_errors", []):
        console.print(f"[yellow]{escape(str(e))}[/]", highlight=False)


def attribution_table(attribution: dict[str, dict[str, Any]]) -> FitTable:
    """Per instrumented instance: its requests' latency and the part attributed to the
    provider (ms), and the provider's share of the total."""
    from quell.report.attribution import SUMMARY_COLUMNS, summary_cells

    table = FitTable(title="latency and its provider part (ms)", title_justify="left")
    table.add_column("instance")
    for h, _ in SUMMARY_COLUMNS:
        table.add_column(h.replace("provider ", "prov. "), justify="right")
    for iid, s in attribution.items():
        table.add_row(escape(iid), *summary_cells(s))
    return table

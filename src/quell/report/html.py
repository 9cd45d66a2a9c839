"""The self-contained HTML page of a run report: no external assets, plots by relative path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from quell.core.action import SCALING_TYPES
from quell.report.felt import felt_html
from quell.report.plots import EventRow, event_label
from quell.report.table import COLUMNS, felt_rows, incomplete_note, phase_rows, phase_title

DecisionRow = tuple[float, str, str, list[dict[str, Any]]]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { margin-bottom: 0.2em; }
.meta { color: #555; }
.warn { background: #fff3cd; border: 1px solid #e0b000; padding: 0.6em 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.7em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding-bottom: 0.3em; }
img { max-width: 100%; border: 1px solid #ddd; margin-bottom: 1em; }
"""


def _phase_table(phase: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    rows = []
    for cells in phase_rows(phase):
        tds = [f"<td>{escape(cells[0])}</td>"]
        tds += [f'<td class="num">{escape(c)}</td>' for c in cells[1:]]
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f"<table><caption>{escape(phase_title(phase))}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def format_action(action: dict[str, Any]) -> str:
    """``SetWeight(instance_id=web1, weight=50)`` from a stored action dict."""
    args = ", ".join(
        f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}"
        for k, v in action.items()
        if k != "type"
    )
    return f"{action.get('type', 'action')}({args})"


def _events_section(events: Sequence[EventRow]) -> str:
    if not events:
        return "<p>No events.</p>"
    rows = "".join(
        f'<tr><td class="num">{t:g}</td><td>{escape(kind)}</td>'
        f"<td>{escape(event_label(kind, detail))}</td>"
        f"<td>{escape(json.dumps(detail, sort_keys=True))}</td></tr>"
        for t, kind, detail in events
    )
    return (
        "<table><thead><tr><th>time s</th><th>kind</th><th>what</th><th>detail</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
    )


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def _instances_table(detail: dict[str, Any]) -> str:
    """A decision's per-instance numbers (``detail["instances"]``: one list per column, in the
    order of ``id``), folded under the reason."""
    cols = detail.get("instances")
    if not isinstance(cols, dict) or not isinstance(cols.get("id"), list):
        return ""
    names = [k for k, v in cols.items() if k != "id" and isinstance(v, list)]
    head = "".join(f"<th>{escape(k)}</th>" for k in ["id", *names])
    rows = "".join(
        f"<tr><td>{escape(str(iid))}</td>"
        + "".join(
            f'<td class="num">{_cell(cols[k][n] if n < len(cols[k]) else None)}</td>' for k in names
        )
        + "</tr>"
        for n, iid in enumerate(cols["id"])
    )
    return (
        f"<details><summary>the numbers behind it ({len(cols['id'])} instances)</summary>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></details>"
    )


def _decisions_section(
    decisions: Sequence[DecisionRow], details: Sequence[dict[str, Any]] = ()
) -> str:
    """The decision log. Decisions that add or remove an instance, or that a scale-in trial is
    under, carry their per-instance numbers when the policy recorded them."""
    if not decisions:
        return "<p>No decisions recorded.</p>"
    out = []
    for k, (t, policy, reason, actions) in enumerate(decisions):
        detail = details[k] if k < len(details) else {}
        scaling = any(a.get("type") in SCALING_TYPES for a in actions) or bool(
            detail.get("on_trial")
        )
        numbers = _instances_table(detail) if scaling else ""
        out.append(
            f'<tr><td class="num">{t:g}</td><td>{escape(policy)}</td>'
            f"<td>{escape(reason)}{numbers}</td>"
            f"<td>{escape('; '.join(format_action(a) for a in actions)) or '-'}</td></tr>"
        )
    return (
        "<table><thead><tr><th>time s</th><th>policy</th><th>reason</th><th>actions</th></tr>"
        f"</thead><tbody>{''.join(out)}</tbody></table>"
    )


def _attribution_section(summary: dict[str, Any]) -> str:
    """Per instrumented instance, its latency and the part attributed to the provider."""
    from quell.report.attribution import SUMMARY_COLUMNS, summary_cells

    attribution = summary.get("attribution")
    if not attribution:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h, _ in SUMMARY_COLUMNS)
    body = "".join(
        f"<tr><td>{escape(iid)}</td>"
        + "".join(f'<td class="num">{escape(c)}</td>' for c in summary_cells(s))
        + "</tr>"
        for iid, s in attribution.items()
    )
    return (
        "<h2>Latency attribution</h2><p>Per request, the latency the scenario's attribution "
        "model gives the provider (co-located load); latencies in ms.</p>"
        f"<table><thead><tr><th>instance</th>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def render_html(
    summary: dict[str, Any],
    plots: Sequence[tuple[str, Path]],
    events: Sequence[EventRow],
    decisions: Sequence[DecisionRow],
    out_dir: Path,
    details: Sequence[dict[str, Any]] = (),
) -> str:
    """The page's text. Plot paths are written relative to ``out_dir``; ``details`` are the
    decisions' structured details, in the order of ``decisions``."""
    name = str(summary.get("scenario") or "unnamed scenario")
    env = str(summary.get("environment") or "unknown")
    status = "complete" if summary.get("complete", True) else "incomplete"
    note = incomplete_note(summary)
    warn = f'<p class="warn"><strong>{escape(note)}</strong></p>' if note else ""
    source = (
        "client-side request log"
        if summary.get("rt_source") == "requests"
        else "per-interval observations (p95 is a request-weighted mean of interval p95s)"
    )
    tables = "\n".join(_phase_table(p) for p in summary["phases"]) or "<p>No phases.</p>"
    felt = felt_rows(summary)
    if felt:
        tables += "\n" + felt_html(
            felt, ("phase",), summary.get("target_rt_s"), summary.get("timeout_s")
        )
    imgs = "\n".join(
        f'<figure><img src="{escape(p.relative_to(out_dir).as_posix())}" '
        f'alt="{escape(title)}"><figcaption>{escape(title)}</figcaption></figure>'
        for title, p in plots
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>quell report: {escape(name)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{escape(name)}</h1>
<p class="meta">environment: <strong>{escape(env)}</strong> &middot; run: {escape(status)}
&middot; control-cycle errors: {escape(str(summary.get("cycle_errors", 0)))}
&middot; response times from the {escape(source)}</p>
{warn}
<h2>Phases</h2>
{tables}
{_attribution_section(summary)}
<h2>Plots</h2>
{imgs}
<h2>Events</h2>
{_events_section(events)}
<h2>Decisions</h2>
{_decisions_section(decisions, details)}
</body>
</html>
"""

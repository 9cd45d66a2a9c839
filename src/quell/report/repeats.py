"""One lab comparison repeated: each policy's spread per phase, and its paired difference from
the first policy.

The lab is one machine, often itself a cloud VM, and two runs of one policy on it differ by
more than some policies differ from each other. ``quell lab compare --repeats N`` runs every
policy once per repeat, one after another, so that the k-th run of each policy shares the
machine's state of that stretch of time; the fair comparison is then *paired*: per repeat, a
policy's figure minus the first policy's, and the mean of those differences with its
standard error (sd / √n), as over seeds in the simulator (``report/seeds.py``).

Per phase the figures are the worst instance's settled mean response time (what R_th is
judged on) and the mean and 95th percentile over every answered request in the settled
window, whichever instance served it (what the users felt; comparison files written before
these were recorded have only the first). Differences are in milliseconds and, relative to
the first policy's figure of the same repeat, in per cent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from quell.report.fit import FitTable
from quell.report.seeds import spread

FIGURES = ("worst_mean_rt_s", "all_mean_rt_s", "all_p95_rt_s")
"""The per-phase figures summarised over the repeats."""


def _se(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and standard error (sd / √n; ``None`` from one value)."""
    s = spread(values)
    return {"mean": s["mean"], "se": None if s["sd"] is None else s["sd"] / math.sqrt(len(values))}


def repeat_summary(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per policy (in the first document's order) and phase: how many repeats met the target,
    each repeat's scaling actions in the phase (``None`` where not recorded), each figure's
    mean, sample sd, min and max over the repeats that measured it, and its paired difference
    from the first policy (``<figure>_vs_first``: mean and standard error in seconds, the same
    relative to the first policy's figure in per cent, and on how many repeats this policy's
    was lower). Every document must compare the same policies over the same phases."""
    if not docs:
        return []
    names = list(docs[0]["policies"])
    first = names[0]
    phases = [p["phase"] for p in docs[0]["policies"][first]["phases"]]
    for k, doc in enumerate(docs):
        got = list(doc["policies"])
        if got != names:
            raise ValueError(f"repeat {k + 1} compares {got}, the first {names}")
    rows: list[dict[str, Any]] = []
    for name in names:
        per_phase = []
        for j, phase in enumerate(phases):
            mine = [doc["policies"][name]["phases"][j] for doc in docs]
            theirs = [doc["policies"][first]["phases"][j] for doc in docs]
            row: dict[str, Any] = {
                "phase": phase,
                "repeats": len(docs),
                "met": sum(p.get("meets_target") is True for p in mine),
                "scaling_actions": [p.get("scaling_actions") for p in mine],
            }
            for key in FIGURES:
                values = [float(p[key]) for p in mine if p.get(key) is not None]
                row[key] = spread(values) if values else None
                pairs = [
                    (float(a[key]), float(b[key]))
                    for a, b in zip(mine, theirs, strict=True)
                    if a.get(key) is not None and b.get(key) is not None
                ]
                if name == first or not pairs:
                    row[f"{key}_vs_first"] = None
                    continue
                row[f"{key}_vs_first"] = {
                    "s": _se([a - b for a, b in pairs]),
                    "pct": _se([100.0 * (a - b) / b for a, b in pairs if b > 0]),
                    "lower_on": sum(a < b for a, b in pairs),
                    "of": len(pairs),
                }
            per_phase.append(row)
        rows.append({"policy": name, "phases": per_phase})
    return rows


def _ms(stat: Mapping[str, Any] | None, sep: str = " ± ") -> str:
    if stat is None:
        return "-"
    sd = stat["sd"]
    mean = f"{stat['mean'] * 1e3:.1f}"
    return mean if sd is None else f"{mean}{sep}{sd * 1e3:.1f}"


def _vs(stat: Mapping[str, Any] | None, compact: bool = False) -> str:
    """``+78.8 ± 6.7 % (0/3 lower)``: the paired difference in per cent ± its standard error,
    and on how many repeats the policy was lower; ``+78.8±6.7%`` when ``compact``."""
    if stat is None:
        return "-"
    pct = stat["pct"]
    if compact:
        se = "" if pct["se"] is None else f"±{pct['se']:.1f}"
        return f"{pct['mean']:+.1f}{se}%"
    se = "" if pct["se"] is None else f" ± {pct['se']:.1f}"
    return f"{pct['mean']:+.1f}{se} % ({stat['lower_on']}/{stat['of']} lower)"


def _counts(counts: Sequence[int | None] | None) -> str:
    """Each repeat's count, ``0 0 1`` (``-`` for a repeat recorded before they were counted)."""
    if not counts:
        return "-"
    return " ".join("-" if c is None else str(c) for c in counts)


def repeat_lines(
    rows: Sequence[Mapping[str, Any]], figures: Sequence[str] = FIGURES, compact: bool = False
) -> list[tuple[str, str, list[str]]]:
    """(policy, phase, cells) per row of the repeats table: repeats that met R_th, each
    repeat's scaling actions in the phase, then for each of ``figures`` its mean ± sd (ms) and
    its paired difference from the first policy."""
    out = []
    for row in rows:
        for p in row["phases"]:
            cells = [f"{p['met']}/{p['repeats']}", _counts(p.get("scaling_actions"))]
            for key in figures:
                cells += [
                    _ms(p[key], "±" if compact else " ± "),
                    _vs(p[f"{key}_vs_first"], compact),
                ]
            out.append((row["policy"], p["phase"], cells))
    return out


REPEAT_HEADERS = (
    "met",
    "scaling",
    "worst ms",
    "vs first",
    "every request ms",
    "vs first",
    "p95 ms",
    "vs first",
)
"""The page's columns after policy and phase, one pair per figure of ``FIGURES``."""


def print_repeat_summary(
    scenario: str, rows: Sequence[Mapping[str, Any]], console: Console
) -> None:
    """The worst instance's mean and every request's mean per policy and phase (the 95th
    percentiles are in the JSON and on the results page)."""
    n = rows[0]["phases"][0]["repeats"] if rows and rows[0]["phases"] else 0
    first = rows[0]["policy"] if rows else ""
    table = FitTable(
        title=f"{scenario}, {n} repeats: mean±sd ms; vs {first}: paired, mean±se",
        title_justify="left",
        together=(5, 7),  # each difference beside its figure
    )
    for header in ("policy", "phase", "met", "scaling", "worst", "vs", "all", "vs"):
        left = header in ("policy", "phase")
        table.add_column(header, justify="left" if left else "right", no_wrap=True)
    for policy, phase, cells in repeat_lines(rows, FIGURES[:2], compact=True):
        table.add_row(policy, phase, *cells)
    console.print(table)

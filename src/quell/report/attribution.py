"""Soroban's report: per run, the latency and its provider part (a table, a per-request
attribution plot, a PNG), the Fig. 3 heatmap over cells of antagonist workers × service load,
and a self-contained HTML page."""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from quell.attribute.apply import Attribution
from quell.errors import InputError, Problem
from quell.report.plots import save_figure

MS = 1e3


@dataclass(frozen=True)
class Cell:
    """One heatmap cell: its row (antagonist workers), column (service load) and value."""

    row: float
    column: float
    provider_p99_seconds: float


def plot_request_attribution(attr: Attribution, path: Path, title: str) -> Path:
    """Left: each request's latency against its provider part (the line y = x is complete
    attribution). Right: the latency's CDF and the CDF of the service's own part."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    wall = attr.wall_seconds * MS
    prov = attr.provider_seconds * MS
    rows = np.random.default_rng(0).permutation(len(wall))[:20_000]
    ax1.scatter(wall[rows], prov[rows], s=2, alpha=0.3, color="tab:red")
    top = float(np.percentile(wall, 99.9)) if len(wall) else 1.0
    ax1.plot([0, top], [0, top], color="k", lw=0.8)
    ax1.set_xlim(0, top)
    ax1.set_ylim(0, top)
    ax1.set_xlabel("request latency (ms)")
    ax1.set_ylabel("attributed to the provider (ms)")
    ax1.set_title("per request")
    for values, label, color in (
        (wall, "latency", "tab:red"),
        (attr.service_seconds * MS, "service's own part", "tab:blue"),
    ):
        xs = np.sort(values)
        ax2.plot(xs, np.arange(1, len(xs) + 1) / max(len(xs), 1), label=label, color=color)
    ax2.set_xlim(0, top)
    ax2.set_xlabel("ms")
    ax2.set_ylabel("CDF")
    ax2.legend(loc="lower right")
    ax2.set_title("distribution")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def heatmap_grid(cells: Sequence[Cell]) -> tuple[list[float], list[float], np.ndarray]:
    """Rows and columns (sorted) and the matrix of provider p99 seconds (NaN where no cell)."""
    rows = sorted({c.row for c in cells})
    cols = sorted({c.column for c in cells})
    grid = np.full((len(rows), len(cols)), np.nan)
    for c in cells:
        grid[rows.index(c.row), cols.index(c.column)] = c.provider_p99_seconds
    return rows, cols, grid


def plot_heatmap(
    cells: Sequence[Cell],
    path: Path,
    row_label: str,
    column_label: str,
    title: str,
    row_names: Mapping[float, str] | None = None,
    column_names: Mapping[float, str] | None = None,
) -> Path:
    """The Fig. 3 heatmap: each cell's provider-attributed p99 in ms. ``row_names`` and
    ``column_names`` label the rows' and columns' values (default: the values)."""
    from matplotlib.figure import Figure

    rows, cols, grid = heatmap_grid(cells)
    fig = Figure(figsize=(max(4.5, 2.0 + 1.1 * len(cols)), max(3.0, 1.6 + 0.6 * len(rows))))
    ax = fig.subplots()
    image = ax.imshow(grid * MS, cmap="Reds", origin="lower", aspect="auto")
    high = float(np.nanmax(grid)) if np.any(np.isfinite(grid)) else 0.0
    for i in range(len(rows)):
        for j in range(len(cols)):
            if math.isfinite(grid[i, j]):
                color = "white" if grid[i, j] > 0.6 * high else "black"
                text = f"{grid[i, j] * MS:.1f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=9, color=color)
    ax.set_xticks(range(len(cols)), [(column_names or {}).get(c, f"{c:g}") for c in cols])
    ax.set_yticks(range(len(rows)), [(row_names or {}).get(r, f"{r:g}") for r in rows])
    ax.set_xlabel(column_label)
    ax.set_ylabel(row_label)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="ms")
    fig.tight_layout()
    return save_figure(fig, path)


ATTRIBUTION_COLUMNS: tuple[str, ...] = (
    "request_id",
    "request_class",
    "wall_seconds",
    "excess_seconds",
    "excess_low_seconds",
    "excess_high_seconds",
    "provider_seconds",
    "service_seconds",
)
"""The per-request attribution file's columns (``quell attribute predict --out``, a lab run's
``attribution/<id>.csv.gz``)."""


def write_attribution_csv(path: Path, attr: Attribution) -> Path:
    """Each request's attribution as CSV at ``path``, gzip-compressed (with mtime 0, so the
    same attribution writes the same bytes) when the name ends in ``.gz``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(ATTRIBUTION_COLUMNS)
    w.writerows(
        zip(
            attr.request_id.tolist(),
            attr.request_class.tolist(),
            attr.wall_seconds.tolist(),
            attr.excess_seconds.tolist(),
            attr.low_seconds.tolist(),
            attr.high_seconds.tolist(),
            attr.provider_seconds.tolist(),
            attr.service_seconds.tolist(),
            strict=True,
        )
    )
    data = text.getvalue().encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def read_attribution_csv(path: Path) -> Attribution:
    """An attribution file written by ``write_attribution_csv``; a damaged one raises
    ``InputError`` naming it."""
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw).decode() if path.name.endswith(".gz") else raw.decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(str(path), [Problem("", f"unreadable: {exc}")]) from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows or tuple(rows[0]) != ATTRIBUTION_COLUMNS:
        expected = ", ".join(ATTRIBUTION_COLUMNS)
        raise InputError(str(path), [Problem("header", f"not {expected}")])
    body = rows[1:]
    if any(len(r) != len(ATTRIBUTION_COLUMNS) for r in body):
        raise InputError(str(path), [Problem("", "a row with the wrong number of fields")])
    cols = list(zip(*body, strict=True)) if body else [()] * len(ATTRIBUTION_COLUMNS)
    try:
        floats = [np.asarray(c, dtype=np.float64) for c in cols[2:]]
        request_id = np.asarray(cols[0], dtype=np.int64)
    except ValueError as exc:
        raise InputError(str(path), [Problem("", f"not a number: {exc}")]) from None
    return Attribution(
        request_id=request_id,
        request_class=np.asarray(cols[1], dtype=np.str_),
        wall_seconds=floats[0],
        excess_seconds=floats[1],
        low_seconds=floats[2],
        high_seconds=floats[3],
        provider_seconds=floats[4],
    )


SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("requests", "requests"),
    ("p50", "p50_seconds"),
    ("p90", "p90_seconds"),
    ("p99", "p99_seconds"),
    ("provider p50", "provider_p50_seconds"),
    ("provider p90", "provider_p90_seconds"),
    ("provider p99", "provider_p99_seconds"),
    ("provider share", "provider_share"),
)
"""(header, key); latencies in ms."""


def summary_cells(summary: dict[str, Any]) -> list[str]:
    cells = []
    for _, key in SUMMARY_COLUMNS:
        v = summary.get(key)
        if v is None:
            cells.append("-")
        elif key == "requests":
            cells.append(str(v))
        elif key == "provider_share":
            cells.append(f"{100 * v:.1f} %")
        else:
            cells.append(f"{v * MS:.2f}")
    return cells


def render_attribution_html(
    title: str,
    model: dict[str, Any],
    runs: Sequence[tuple[str, dict[str, Any]]],
    images: Sequence[str],
) -> str:
    """The report page: the model, a row per run, the plots by relative path."""
    head = "".join(f"<th>{escape(h)}</th>" for h, _ in SUMMARY_COLUMNS)
    body = "".join(
        f"<tr><td>{escape(name)}</td>"
        + "".join(f'<td class="num">{escape(c)}</td>' for c in summary_cells(s))
        + "</tr>"
        for name, s in runs
    )
    model_rows = "".join(
        f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>" for k, v in model.items()
    )
    imgs = "".join(f'<p><img src="{escape(i)}" alt="{escape(i)}"></p>' for i in images)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "th,td{border:1px solid #ccc;padding:.25em .7em}td.num{text-align:right}"
        "img{max-width:100%;border:1px solid #ddd}</style></head><body>"
        f"<h1>{escape(title)}</h1><h2>Model</h2><table>{model_rows}</table>"
        f"<h2>Runs</h2><p>Latencies in ms.</p><table><thead><tr><th>run</th>{head}</tr></thead><tbody>{body}</tbody>"
        f"</table><h2>Plots</h2>{imgs}</body></html>\n"
    )

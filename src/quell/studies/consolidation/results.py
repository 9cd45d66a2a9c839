"""The consolidation study's results (docs/results/consolidation.md) and figures, from study
records (``quell study consolidation`` writes one per spec and environment: the spec and every
point's measurement, the CPU series kept as histograms).

Per curve (the scheduler or the lab, a cap pair, Sys_Const's users, Sys_Inc's index of
dispersion, CTP) Sys_Const's mean response time against Sys_Inc's users, the mean over the
seeds and its spread (least–most); the curve's base (Sys_Inc at its fewest users), peak and
last value, whether it is non-monotonic (a peak inside the sweep that the last point falls
from by more than both points' spreads), the peak's degradation (peak / base); between curves
that differ only in CTP, the loss (peak − base) without CTP over the loss with it, the seed's
"factor of two"."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quell.errors import InputError, Problem

FORMAT = "quell-consolidation-study"
VERSION = 1
BIN_PCT = 5.0
"""Histogram bins: [0, 5] %, (5, 10] %, …, (95, 100] % of the shared core (a group held at
its 50 % quota counts in (45, 50], not above it)."""
SAMPLES_PER_2S = 20


def histograms(series_pct: Sequence[float]) -> dict[str, list[int]]:
    """Counts of a 0.1 s CPU series per ``BIN_PCT`` bin, and of its 2 s means (the seed's
    esxtop step)."""
    n = len(series_pct) // SAMPLES_PER_2S * SAMPLES_PER_2S
    two = [
        sum(series_pct[i : i + SAMPLES_PER_2S]) / SAMPLES_PER_2S
        for i in range(0, n, SAMPLES_PER_2S)
    ]
    return {"100ms": _counts(series_pct), "2s": _counts(two)}


def _counts(values: Sequence[float]) -> list[int]:
    bins = int(100 / BIN_PCT)
    out = [0] * bins
    for v in values:
        out[min(bins - 1, max(0, math.ceil(v / BIN_PCT) - 1))] += 1
    return out


@dataclass(frozen=True)
class Curve:
    label: str
    caps: tuple[float, float]
    const_users: int
    dispersion: float
    ctp: bool
    competitor_pct: float = 0.0
    competitor_idle: bool = False

    def name(self) -> str:
        ctp = ", CTP" if self.ctp else ""
        idle = " idle-weight" if self.competitor_idle else ""
        spin = f",{idle} spinner {self.competitor_pct:g} %" if self.competitor_pct > 0 else ""
        return (
            f"{self.label}, caps {self.caps[0]:g}/{self.caps[1]:g}, Const {self.const_users},"
            f" I = {self.dispersion:g}{ctp}{spin}"
        )


@dataclass(frozen=True)
class Cell:
    """One point over its seeds."""

    inc_users: int
    seeds: int
    const_rt_s: list[float]
    inc_rt_s: list[float]
    const_x: list[float]
    inc_x: list[float]
    const_cpu: list[float]
    inc_cpu: list[float]
    const_throttled: list[int]
    inc_throttled: list[int]
    const_hist: dict[str, list[int]]
    inc_hist: dict[str, list[int]]

    @staticmethod
    def mean(values: Sequence[float]) -> float:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return sum(finite) / len(finite) if finite else math.nan


def load(data: Path) -> list[dict[str, Any]]:
    """Every study record in ``data``, by name."""
    docs = []
    for path in sorted(data.glob("*.json")):
        doc: dict[str, Any] = json.loads(path.read_text())
        if doc.get("format") == FORMAT:
            docs.append(doc)
    return docs


def curves(doc: dict[str, Any]) -> dict[Curve, list[Cell]]:
    """A record's points grouped into curves, each a list of cells by Sys_Inc's users."""
    groups: dict[Curve, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for p in doc["points"]:
        pt = p["point"]
        c = Curve(
            p["label"],
            (pt["const"]["cap_pct"], pt["inc"]["cap_pct"]),
            pt["const"]["users"],
            pt["dispersion_index"],
            pt["ctp"],
            pt.get("competitor_cpu_pct", 0.0),
            pt.get("competitor_idle", False),
        )
        groups[c][pt["inc"]["users"]].append(p)
    out: dict[Curve, list[Cell]] = {}
    for c in sorted(
        groups,
        key=lambda c: (
            c.label,
            c.caps,
            c.const_users,
            c.dispersion,
            c.ctp,
            c.competitor_pct,
            c.competitor_idle,
        ),
    ):
        cells = []
        for inc, ps in sorted(groups[c].items()):
            co = [p["systems"]["const"] for p in ps]
            ic = [p["systems"]["inc"] for p in ps]
            cells.append(
                Cell(
                    inc,
                    len(ps),
                    [s["mean_rt_seconds"] for s in co],
                    [s["mean_rt_seconds"] for s in ic],
                    [s["throughput_per_second"] for s in co],
                    [s["throughput_per_second"] for s in ic],
                    [s["db_cpu_pct"] for s in co],
                    [s["db_cpu_pct"] for s in ic],
                    [s["throttled_periods_total"] for s in co],
                    [s["throttled_periods_total"] for s in ic],
                    _sum_hists([s["cpu_hist"] for s in co]),
                    _sum_hists([s["cpu_hist"] for s in ic]),
                )
            )
        out[c] = cells
    return out


def _sum_hists(hs: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    return {k: [sum(col) for col in zip(*(h[k] for h in hs), strict=True)] for k in hs[0]}


@dataclass(frozen=True)
class Shape:
    base_s: float
    peak_s: float
    peak_at: int
    last_s: float
    non_monotonic: bool

    @property
    def degradation(self) -> float:
        return self.peak_s / self.base_s if self.base_s > 0 else math.nan


def shape(cells: list[Cell]) -> Shape:
    """A curve's base, peak, last value and whether it is non-monotonic (module docstring)."""
    means = [Cell.mean(c.const_rt_s) for c in cells]
    k = max(range(len(means)), key=lambda i: means[i] if math.isfinite(means[i]) else -1.0)
    peak, last = cells[k], cells[-1]
    falls = min(peak.const_rt_s) > max(last.const_rt_s)
    return Shape(means[0], means[k], peak.inc_users, means[-1], 0 < k < len(cells) - 1 and falls)


def _ms(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{1e3 * v:.1f}"


def _spread_ms(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    return f"{_ms(Cell.mean(finite))} ({_ms(min(finite))}–{_ms(max(finite))})"


def _settings(doc: dict[str, Any]) -> list[str]:
    s = doc["spec"]
    lines = [
        f"Environment **{doc['env']}**; {len(s['seeds'])} seeds ({', '.join(map(str, s['seeds']))});"
        f" think time {s['think_time_seconds']:g} s, heavy share {s['heavy_share']:g},"
        f" ramp {s['ramp_seconds']:g} s, measured {s['measure_seconds']:g} s;"
        f" Sys_Const[{s['resources']['const']}], Sys_Inc[{s['resources']['inc']}].",
    ]
    if doc["env"] == "sim":
        sim = s["sim"]
        lines.append(
            f"Simulator: light {1e3 * sim['light_cpu_seconds']:g} ms, heavy"
            f" {1e3 * sim['heavy_cpu_seconds']:g} ms of database CPU; quantum"
            f" {1e3 * sim['quantum_seconds']:g} ms, period {1e3 * sim['period_seconds']:g} ms,"
            f" pick {sim['pick']}"
            + (f" (memory {sim['memory_seconds']:g} s" if sim["pick"] == "least_used" else "")
            + (", wake-up preemption)" if sim["pick"] == "least_used" and sim["preempt"] else "")
            + (")" if sim["pick"] == "least_used" and not sim["preempt"] else "")
            + "."
        )
    return lines


def _curve_table(cs: dict[Curve, list[Cell]]) -> list[str]:
    lines = [
        "| curve | base ms | peak ms | at Inc users | last ms | peak / base | non-monotonic |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c, cells in cs.items():
        if len(cells) < 2:
            continue
        sh = shape(cells)
        lines.append(
            f"| {c.name()} | {_ms(sh.base_s)} | {_ms(sh.peak_s)} | {sh.peak_at} |"
            f" {_ms(sh.last_s)} | {sh.degradation:.2f} | {'yes' if sh.non_monotonic else 'no'} |"
        )
    return lines


def _ctp_lines(cs: dict[Curve, list[Cell]]) -> list[str]:
    out = []
    for c, cells in cs.items():
        if c.ctp:
            continue
        twin = Curve(c.label, c.caps, c.const_users, c.dispersion, True)
        if twin not in cs or len(cells) < 2:
            continue
        a, b = shape(cells), shape(cs[twin])
        loss_a, loss_b = a.peak_s - a.base_s, b.peak_s - b.base_s
        if loss_b > 0:
            verdict = f"**{loss_a / loss_b:.2f}×** smaller with CTP (the seed: about 2×)"
        else:
            verdict = "no loss with CTP"
        out.append(
            f"* {c.name()}: peak {_ms(a.peak_s)} ms without CTP, {_ms(b.peak_s)} ms with it;"
            f" loss (peak − base) {_ms(loss_a)} → {_ms(loss_b)} ms, {verdict}."
        )
    return out


def _cpu_table(cs: dict[Curve, list[Cell]]) -> list[str]:
    """Each curve's mean CPU per system at its peak (the seed's Table III)."""
    lines = [
        "| curve | at Inc users | Const CPU % | Inc CPU % | total % | throttled Const / Inc |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, cells in cs.items():
        if len(cells) < 2:
            continue
        peak = next(cell for cell in cells if cell.inc_users == shape(cells).peak_at)
        a, b = Cell.mean(peak.const_cpu), Cell.mean(peak.inc_cpu)
        lines.append(
            f"| {c.name()} | {peak.inc_users} | {a:.1f} | {b:.1f} | {a + b:.1f} |"
            f" {Cell.mean(peak.const_throttled):.0f} / {Cell.mean(peak.inc_throttled):.0f} |"
        )
    return lines


def _point_table(cs: dict[Curve, list[Cell]]) -> list[str]:
    lines = [
        "| curve | Inc users | Const RT ms (least–most) | Inc RT ms | Const X/s | Inc X/s |"
        " Const CPU % | Const CPU ms / request | Inc CPU % | throttled Const / Inc |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, cells in cs.items():
        for cell in cells:
            # the tier's CPU per request, per seed (CPU % of the core x 10 ms / requests per s)
            per_request = [
                10.0 * u / x for u, x in zip(cell.const_cpu, cell.const_x, strict=True) if x > 0
            ]
            lines.append(
                f"| {c.name()} | {cell.inc_users} | {_spread_ms(cell.const_rt_s)} |"
                f" {_ms(Cell.mean(cell.inc_rt_s))} | {Cell.mean(cell.const_x):.1f} |"
                f" {Cell.mean(cell.inc_x):.1f} | {Cell.mean(cell.const_cpu):.1f} |"
                f" {Cell.mean(per_request):.2f} | {Cell.mean(cell.inc_cpu):.1f} |"
                f" {Cell.mean(cell.const_throttled):.0f} / {Cell.mean(cell.inc_throttled):.0f} |"
            )
    return lines


def render(data: Path, image_dir: str = "../img/consolidation") -> str:
    """The page, from every study record in ``data``; figures named as ``write_figures``
    writes them, linked under ``image_dir`` (relative to the page)."""
    out = [
        "# Consolidation study results",
        "",
        f"Generated by `quell study consolidation-results --data {data}` from the study records"
        " there (each written by `quell study consolidation SPEC`). Do not edit by hand. The"
        " model, the scaling and every choice the seed leaves open:"
        " [docs/papers/consolidation.md](../papers/consolidation.md).",
        "",
        "Response times are Sys_Const's mean over completed requests in the measured window;"
        " each point is the mean over its seeds, with the least and most seed in brackets."
        " *base* is Sys_Const at Sys_Inc's fewest users, *peak / base* the degradation.",
    ]
    for doc in load(data):
        name = doc["name"]
        cs = curves(doc)
        out += ["", f"## {doc['spec'].get('title') or name} (`{name}`, {doc['env']})", ""]
        if doc["spec"].get("description"):
            out += [doc["spec"]["description"].strip(), ""]
        out += _settings(doc)
        out += ["", "### Curves", "", *_curve_table(cs)]
        out += ["", "### Mean CPU at each curve's peak (Table III)", "", *_cpu_table(cs)]
        ctp = _ctp_lines(cs)
        if ctp:
            out += ["", "### Cross-tier priority", "", *ctp]
        out += [
            "",
            f"![Sys_Const's response time]({image_dir}/{name}-rt.png)",
            "",
            f"![CPU histograms at the peak]({image_dir}/{name}-cpu.png)",
            "",
            f"![Throttled periods]({image_dir}/{name}-throttled.png)",
            "",
            "### Every point",
            "",
            *_point_table(cs),
        ]
    return "\n".join(out) + "\n"


def _panels(cs: dict[Curve, list[Cell]]) -> dict[tuple[str, tuple[float, float]], list[Curve]]:
    panels: dict[tuple[str, tuple[float, float]], list[Curve]] = defaultdict(list)
    for c in cs:
        panels[(c.label, c.caps)].append(c)
    return panels


def _save_small(fig: Any, path: Path) -> Path:
    """``fig`` as a PNG of at most 256 colours (a third of the bytes of a full-colour one:
    the figures are kept in docs/)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    buf.seek(0)
    with Image.open(buf) as img:
        img.convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)
    return path


def write_figures(data: Path, out_dir: Path) -> list[Path]:
    """For each study record in ``data``: ``<name>-rt.png`` (Sys_Const's response time, and
    beside it Sys_Inc's, against Sys_Inc's users, a row per scheduler and cap pair: Fig. 2, 4,
    6, 7, 8), ``<name>-cpu.png`` (each system's CPU histograms at 0.1 s and 2 s at each panel's
    first curve's peak: Fig. 3, 5), ``<name>-throttled.png`` (throttled periods)."""
    from matplotlib.figure import Figure

    written = []
    for doc in load(data):
        cs = curves(doc)
        panels = _panels(cs)
        n = len(panels)
        fig = Figure(figsize=(10.0, 3.0 * n))
        figt = Figure(figsize=(6.5, 2.6 * n))
        figc = Figure(figsize=(8.0, 2.6 * n))
        for row, ((label, caps), members) in enumerate(panels.items()):
            ax = fig.add_subplot(n, 2, 2 * row + 1)
            axi = fig.add_subplot(n, 2, 2 * row + 2)
            axt = figt.add_subplot(n, 1, row + 1)
            for c in members:
                cells = cs[c]
                xs = [cell.inc_users for cell in cells]
                ys = [1e3 * Cell.mean(cell.const_rt_s) for cell in cells]
                lo = [y - 1e3 * min(cell.const_rt_s) for y, cell in zip(ys, cells, strict=True)]
                hi = [1e3 * max(cell.const_rt_s) - y for y, cell in zip(ys, cells, strict=True)]
                tag = (
                    f"Const {c.const_users}, I={c.dispersion:g}"
                    + (" CTP" if c.ctp else "")
                    + (" idle-weight" if c.competitor_idle else "")
                    + (f" spinner {c.competitor_pct:g} %" if c.competitor_pct > 0 else "")
                )
                line = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=tag)
                axi.plot(
                    xs,
                    [1e3 * Cell.mean(cell.inc_rt_s) for cell in cells],
                    marker="o",
                    ms=3,
                    color=line[0].get_color(),
                    label=tag,
                )
                axt.plot(
                    xs,
                    [Cell.mean(cell.const_throttled) for cell in cells],
                    marker="o",
                    ms=3,
                    label=f"{tag}: Const",
                )
                axt.plot(
                    xs,
                    [Cell.mean(cell.inc_throttled) for cell in cells],
                    ls="--",
                    label=f"{tag}: Inc",
                )
            ax.set_title(f"Sys_Const: {label}, caps {caps[0]:g}/{caps[1]:g}", fontsize=9)
            ax.set_ylabel("mean RT (ms)")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=6)
            axi.set_title(f"Sys_Inc: {label}, caps {caps[0]:g}/{caps[1]:g}", fontsize=9)
            axi.set_yscale("log")
            axt.set_title(f"{label}, caps {caps[0]:g}/{caps[1]:g}", fontsize=9)
            axt.set_ylabel("throttled periods")
            axt.legend(fontsize=6)
            first = members[0]
            peak = max(cs[first], key=lambda cell: Cell.mean(cell.const_rt_s))
            for col, step in enumerate(("100ms", "2s")):
                axc = figc.add_subplot(n, 2, 2 * row + col + 1)
                edges = [BIN_PCT * i for i in range(len(peak.const_hist[step]))]
                for who, h in (("Const", peak.const_hist[step]), ("Inc", peak.inc_hist[step])):
                    total = sum(h) or 1
                    axc.bar(
                        [e + (0 if who == "Const" else BIN_PCT / 2) for e in edges],
                        [v / total for v in h],
                        width=BIN_PCT / 2,
                        align="edge",
                        label=who,
                    )
                axc.set_title(
                    f"{label} {caps[0]:g}/{caps[1]:g}, Const {first.const_users},"
                    f" Inc {peak.inc_users}: {step}",
                    fontsize=8,
                )
                axc.set_xlabel("CPU % of the shared core", fontsize=7)
                axc.set_ylabel("share of samples", fontsize=7)
                axc.legend(fontsize=6)
        for ax in fig.axes[-2:]:
            ax.set_xlabel("Sys_Inc users")
        for ax in figt.axes[-1:]:
            ax.set_xlabel("Sys_Inc users")
        fig.tight_layout()
        figt.tight_layout()
        figc.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        for f, suffix in ((fig, "rt"), (figc, "cpu"), (figt, "throttled")):
            written.append(_save_small(f, out_dir / f"{doc['name']}-{suffix}.png"))
    return written


def write_page(data: Path, out: Path, figures: Path) -> None:
    """The page at ``out`` and its figures in ``figures`` (linked relative to the page), from
    the study records in ``data``; a record of no known form is an ``InputError``."""
    if not data.is_dir():
        raise InputError(str(data), [Problem("", "not a directory")])
    try:
        page = render(data, image_dir=os.path.relpath(figures, out.parent))
        write_figures(data, figures)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(
            str(data), [Problem("", f"a record is not of a known form: {exc}")]
        ) from None
    out.write_text(page)

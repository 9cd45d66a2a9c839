"""Fit the multicore model on one configuration of a lab run and blind-predict the others; the
relative errors in the layout of the paper's Table 3, a plot of the model over the measured
points (PNG) and an HTML page, written into ``RUN_DIR/report``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quell.core.files import load_json
from quell.core.schema import validation_problems
from quell.errors import InputError, Problem
from quell.models.multicore import Discipline, MulticoreModel, Prediction, as_discipline
from quell.models.multicore_fit import MulticoreEstimator, RatePoint
from quell.studies.multicore.measure import PLAN_FILE, read_points

SATURATED = 0.9
"""A point whose throughput is below this share of its offered rate is past the knee; the μ2
likelihood fit leaves those out (the paced closed-loop load is no longer Poisson there)."""


class PlanFile(BaseModel):
    """What the fit reads of a run's ``plan.json`` (the file holds the whole plan and more)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    cores: Annotated[list[int], Field(min_length=1)]
    connections: Annotated[int, Field(ge=1)]


@dataclass(frozen=True)
class ConfigResult:
    config: str
    interrupt_cores: int
    points: list[RatePoint]
    predictions: list[Prediction | None]
    blind: bool

    def errors(self) -> dict[str, float | None]:
        """Mean relative errors (model − measured)/measured over the predicted rates: |·| for
        response time and throughput, signed (like Table 3's last row) for utilisation."""
        m = self.interrupt_cores
        rt: list[float] = []
        tput: list[float] = []
        u_int: list[float] = []
        u_oth: list[float] = []
        for pt, pr in zip(self.points, self.predictions, strict=True):
            if pr is None:
                continue
            rt.append(abs(pr.mean_response_s - pt.mean_response_s) / pt.mean_response_s)
            tput.append(abs(pr.throughput_rps - pt.throughput_rps) / pt.throughput_rps)
            for c, u in enumerate(pt.util_per_core):
                (u_int if c < m else u_oth).append((pr.util_per_core[c] - u) / u)

        def mean(v: list[float]) -> float | None:
            return float(np.mean(v)) if v else None

        def mean_abs(v: list[float]) -> float | None:
            return float(np.mean(np.abs(v))) if v else None

        return {
            "rt": mean(rt),
            "throughput": mean(tput),
            "util_interrupt_cores": mean(u_int),
            "util_interrupt_cores_abs": mean_abs(u_int),
            "util_other_cores": mean(u_oth),
            "util_other_cores_abs": mean_abs(u_oth),
            "rates_compared": float(len(rt)),
        }


def _predict_each(model: MulticoreModel, rates: Sequence[float]) -> list[Prediction | None]:
    out: list[Prediction | None] = []
    for r in rates:
        try:
            out.append(model.predict([r])[0])
        except InputError:
            out.append(None)  # unstable at this rate: no prediction
    return out


def fit_run(
    run_dir: Path, fit_config: str = "one", discipline: Discipline = "paper"
) -> tuple[MulticoreEstimator, list[ConfigResult], dict[str, Any]]:
    rows = read_points(run_dir)
    plan_path = run_dir / PLAN_FILE
    plan = load_json(plan_path, "measurement plan")
    try:
        known = PlanFile.model_validate(plan)
    except ValidationError as err:
        raise InputError(str(plan_path), validation_problems(err)) from None
    cores = len(known.cores)
    configs: dict[str, tuple[int, list[RatePoint]]] = {}
    for config, m, point, errors in rows:
        if errors == 0 or point.responses > 100 * errors:
            configs.setdefault(config, (m, []))[1].append(point)
    if fit_config not in configs:
        raise InputError(
            str(run_dir),
            [Problem("config", f"no measured points for configuration {fit_config!r}")],
        )
    m_fit, fit_points = configs[fit_config]
    usable = [p for p in fit_points if p.throughput_rps >= SATURATED * p.rate_rps]
    capacity = max(1, known.connections // m_fit)
    est = MulticoreEstimator(cores, m_fit, capacity, discipline).fit(usable)
    results = []
    for config, (m, points) in configs.items():
        model = est.model(interrupt_cores=m, capacity=max(1, known.connections // m))
        preds = _predict_each(model, [p.rate_rps for p in points])
        results.append(ConfigResult(config, m, points, preds, blind=config != fit_config))
    return est, results, plan


def fit_document(est: MulticoreEstimator, results: Sequence[ConfigResult]) -> dict[str, Any]:
    return {
        "fit": {
            "cores": est.cores,
            "interrupt_cores": est.interrupt_cores,
            "discipline": est.discipline,
            "mu1_rps": est.mu1_,
            "mu1_se_rps": est.mu1_se_,
            "p": est.p_,
            "p_se": est.p_se_,
            "mu2_rps": est.mu2_,
            "mu2_se_rps": est.mu2_se_,
            "chi2": est.chi2_,
            "dof": est.dof_,
        },
        "configs": [
            {
                "config": r.config,
                "interrupt_cores": r.interrupt_cores,
                "blind": r.blind,
                "errors": r.errors(),
                "points": [
                    {
                        "rate": pt.rate_rps,
                        "measured": {
                            "E_T_s": pt.mean_response_s,
                            "throughput_rps": pt.throughput_rps,
                            "util_per_core": list(pt.util_per_core),
                            "softirq_per_core": list(pt.softirq_per_core),
                        },
                        "model": None if pr is None else pr.as_dict()["system"],
                    }
                    for pt, pr in zip(r.points, r.predictions, strict=True)
                ],
            }
            for r in results
        ],
    }


def _pct(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{100 * v:.1f}"


def error_rows(results: Sequence[ConfigResult]) -> list[list[str]]:
    """Table 3's layout: one column per configuration, rows RT / throughput / utilisation."""
    rows = [
        ["", *[f"{r.config} (m={r.interrupt_cores}){' blind' if r.blind else ''}" for r in results]]
    ]
    errs = [r.errors() for r in results]
    rows.append(["Response time", *[_pct(e["rt"]) for e in errs]])
    rows.append(["Throughput", *[_pct(e["throughput"]) for e in errs]])
    rows.append(["Util. core 0..m−1 (signed)", *[_pct(e["util_interrupt_cores"]) for e in errs]])
    rows.append(["Util. core m..n−1 (signed)", *[_pct(e["util_other_cores"]) for e in errs]])
    rows.append(["Util. all cores |·|", *[_pct(_all_abs(r)) for r in results]])
    return rows


def _all_abs(r: ConfigResult) -> float | None:
    vals = [
        abs(pr.util_per_core[c] - u) / u
        for pt, pr in zip(r.points, r.predictions, strict=True)
        if pr is not None
        for c, u in enumerate(pt.util_per_core)
    ]
    return float(np.mean(vals)) if vals else None


def write_report(
    run_dir: Path, est: MulticoreEstimator, results: Sequence[ConfigResult], doc: dict[str, Any]
) -> Path:
    from matplotlib.figure import Figure

    from quell.report.plots import save_figure

    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    fig: Any = Figure(figsize=(11, 9), layout="constrained")
    ax_rt, ax_tp, ax_u0, ax_u1 = fig.subplots(2, 2).ravel()
    colours = {"one": "tab:red", "spread": "tab:blue"}
    for r in results:
        colour = colours.get(r.config, "tab:gray")
        rates = np.array([p.rate_rps for p in r.points])
        label = f"{r.config} (m={r.interrupt_cores})"
        rt = np.array([p.mean_response_s for p in r.points]) * 1e3
        err = np.array([p.response_sd_s / math.sqrt(p.responses) for p in r.points]) * 1e3
        ax_rt.errorbar(rates, rt, yerr=err, fmt="o", color=colour, label=f"{label} measured")
        ax_tp.plot(rates, [p.throughput_rps for p in r.points], "o", color=colour)
        for c in range(len(r.points[0].util_per_core)):
            ax = ax_u0 if c == 0 else ax_u1
            ax.plot(rates, [p.util_per_core[c] for p in r.points], "o", color=colour)
            ax.plot(rates, [p.softirq_per_core[c] for p in r.points], "x", color=colour)
        grid = np.linspace(max(1.0, rates.min() * 0.5), rates.max() * 1.05, 120)
        model = est.model(interrupt_cores=r.interrupt_cores)
        preds = [p for p in _predict_each(model, grid.tolist()) if p is not None]
        g = np.array([p.rate_rps for p in preds])
        style = "--" if r.blind else "-"
        kind = "blind prediction" if r.blind else "fitted model"
        ax_rt.plot(
            g,
            [p.mean_response_s * 1e3 for p in preds],
            style,
            color=colour,
            label=f"{label} {kind}",
        )
        ax_tp.plot(g, [p.throughput_rps for p in preds], style, color=colour)
        ax_u0.plot(g, [p.util_per_core[0] for p in preds], style, color=colour)
        ax_u1.plot(g, [p.util_per_core[-1] for p in preds], style, color=colour)
    ax_rt.set(
        xlabel="offered rate (req/s)", ylabel="mean response time (ms)", title="Response time"
    )
    ax_tp.set(xlabel="offered rate (req/s)", ylabel="throughput (req/s)", title="Throughput")
    ax_u0.set(
        xlabel="offered rate (req/s)", ylabel="busy (o) and soft-irq (x) share", title="CPU 0"
    )
    ax_u1.set(
        xlabel="offered rate (req/s)", ylabel="busy (o) and soft-irq (x) share", title="last CPU"
    )
    ax_rt.legend(fontsize=8)
    png = out / "multicore.png"
    save_figure(fig, png)
    f = doc["fit"]
    rows = error_rows(results)
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>"
        + f"<td>{escape(row[0])}</td>"
        + "".join(f'<td class="num">{escape(c)}</td>' for c in row[1:])
        + "</tr>"
        for row in rows[1:]
    )
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>multicore model: {escape(run_dir.name)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:.25em .7em}}td.num{{text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>Multicore model: {escape(run_dir.name)}</h1>
<p>Fitted on <b>{escape(", ".join(r.config for r in results if not r.blind))}</b> ({escape(est.discipline)} discipline):
μ1 = {f["mu1_rps"]:.0f} ± {f["mu1_se_rps"]:.0f} req/s, p = {f["p"]:.3f} ± {f["p_se"]:.3f},
μ2 = {f["mu2_rps"]:.0f} ± {f["mu2_se_rps"]:.0f} req/s (χ² = {f["chi2"]:.3g} on {f["dof"]} dof).</p>
<table><caption>Mean relative error between model and measurement (%)</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<img src="multicore.png" alt="model over measured points">
</body></html>
"""
    (out / "index.html").write_text(html)
    (out / "fit.json").write_text(json.dumps(doc, indent=2) + "\n")
    return out


@dataclass(frozen=True)
class Fitted:
    """``fit``'s outcome: the configuration fitted on, its document (``fit_document``), Table
    3's rows (``error_rows``) and where the report was written."""

    fit_config: str
    discipline: str
    doc: dict[str, Any]
    error_rows: list[list[str]]
    report_dir: Path


def fit(run_dir: Path, fit_config: str = "one", discipline: str = "paper") -> Fitted:
    """``quell model multicore fit``: ``fit_run`` on ``fit_config``, the others predicted blind,
    the report written into ``run_dir/report`` (``write_report``)."""
    est, results, _ = fit_run(run_dir, fit_config, as_discipline(discipline))
    doc = fit_document(est, results)
    out = write_report(run_dir, est, results, doc)
    return Fitted(fit_config, est.discipline, doc, error_rows(results), out)

"""An attribution model applied to run directories of one's own service (``quell attribute
predict`` and ``report``): per run, each request's attribution (a CSV), the latency and its
provider part; for a report, the per-request plot of each run, the heatmap over the runs' cells
and an HTML page. And what a fit scored (``quell attribute fit``), for a person.

The runs are read as ``quell.report.records`` reads them. A model without a class for records
that have none (connections that sent no request line, such as HAProxy's TCP health checks in
a lab run's ``instrument/<id>/``) attributes a run without them, and says how many it left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from quell.attribute.apply import attribute
from quell.attribute.bundle import AttributionModel, load_attribution_model
from quell.core.files import load_json
from quell.errors import InputError, Problem
from quell.report.attribution import (
    SUMMARY_COLUMNS,
    Cell,
    plot_heatmap,
    plot_request_attribution,
    render_attribution_html,
    summary_cells,
    write_attribution_csv,
)
from quell.report.fit import FitTable as Table
from quell.report.records import Run, read_run

if TYPE_CHECKING:
    from rich.console import Console

CELL_FILE = "cell.json"
"""Beside a run's records: its heatmap cell (``antagonist_workers`` and ``load``)."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class AttributedRuns:
    """Per run, its name and its attribution's summary; for a report, its images and page."""

    rows: list[tuple[str, dict[str, Any]]]
    images: list[str] = field(default_factory=list)
    html: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"runs": [{"run": n} | s for n, s in self.rows]}
        if self.html is not None:
            doc |= {"images": self.images, "html": str(self.html)}
        return doc


def attributable_run(model: AttributionModel, path: Path, say: Say = lambda m: None) -> Run:
    """``path``'s run as ``model`` can attribute it: records with no class left out (and
    said) when the model has no such class."""
    run = read_run(path)
    if "" in model.classes:
        return run
    keep = run.records.request_class != ""
    if keep.all():
        return run
    if not keep.any():
        message = "only records with no request class (connections that sent no request)"
        raise InputError(str(path), [Problem("request_class", message)])
    say(
        f"{path}: {int((~keep).sum())} record(s) with no request class left out (connections "
        "that sent no request line, such as health checks)"
    )
    return Run(run.name, run.records.select(keep), run.psi)


def predict_runs(
    model: Path,
    runs: Sequence[Path],
    out: Path | None = None,
    level: float = 0.95,
    say: Say = lambda m: None,
) -> AttributedRuns:
    """``quell attribute predict``: each run's requests attributed by the model bundle at
    ``model``, their interval at ``level``; with ``out``, the per-request CSV (of one run) or
    a directory of them (``NN-<run>.csv``, several)."""
    if not 0.0 < level < 1.0:
        raise InputError("--level", [Problem("", f"must be between 0 and 1, got {level}")])
    bundle = load_attribution_model(model)
    rows = []
    for path in runs:
        run = attributable_run(bundle, path, say)
        attr = attribute(bundle, run.records, run.psi, level, run.name)
        rows.append((run.name, attr.summary()))
        if out is not None:
            target = out if len(runs) == 1 else out / f"{len(rows):02d}-{path.name}.csv"
            write_attribution_csv(target, attr)
    return AttributedRuns(rows)


def _cell(path: Path, provider_p99_seconds: float) -> Cell | None:
    """The heatmap cell of a run directory with a ``cell.json``, else ``None``."""
    cell_file = path / CELL_FILE
    if not (path.is_dir() and cell_file.is_file()):
        return None
    doc = load_json(cell_file, "heatmap cell")
    try:
        return Cell(float(doc["antagonist_workers"]), float(doc["load"]), provider_p99_seconds)
    except (KeyError, TypeError, ValueError):
        message = "needs numbers antagonist_workers and load"
        raise InputError(str(cell_file), [Problem("", message)]) from None


def report_runs(
    model: Path, runs: Sequence[Path], out: Path, say: Say = lambda m: None
) -> AttributedRuns:
    """``quell attribute report``: each run attributed (``predict_runs``), its per-request
    plot (``requests-NN.png``), the heatmap over the runs' cells (``heatmap.png``, when each
    has a cell.json) and ``index.html`` in ``out``."""
    bundle = load_attribution_model(model)
    out.mkdir(parents=True, exist_ok=True)
    rows, images, cells = [], [], []
    for i, path in enumerate(runs, start=1):
        run = attributable_run(bundle, path, say)
        attr = attribute(bundle, run.records, run.psi, source=run.name)
        summary = attr.summary()
        rows.append((run.name, summary))
        png = f"requests-{i:02d}.png"
        plot_request_attribution(attr, out / png, path.name)
        images.append(png)
        cell = _cell(path, float(summary["provider_p99_seconds"]))
        if cell is not None:
            cells.append(cell)
    if cells:
        plot_heatmap(
            cells,
            out / "heatmap.png",
            "antagonist workers",
            "service load",
            "latency attributed to the provider, p99",
        )
        images.insert(0, "heatmap.png")
    meta = bundle.data.meta
    model_doc = {
        "file": str(model),
        "trained": meta.created,
        "requests": meta.n_train,
        "labels": meta.labels,
        "features": ", ".join(bundle.features),
        "classes": ", ".join(bundle.classes),
    } | {f"held-out {k}": f"{v:.4g}" for k, v in meta.scores.items()}
    page = render_attribution_html("Latency attribution", model_doc, rows, images)
    (out / "index.html").write_text(page)
    return AttributedRuns(rows, images, out / "index.html")


def print_runs(attributed: AttributedRuns, console: Console) -> None:
    """Per run: its requests' latency and provider part (ms), the provider's share."""
    table = Table(title="latency and its provider part (ms)", title_justify="left")
    table.add_column("run", overflow="fold")
    for h, _ in SUMMARY_COLUMNS:
        table.add_column(h.replace("provider ", "prov. "), justify="right")
    for name, summary in attributed.rows:
        table.add_row(escape(name), *summary_cells(summary))
    console.print(table)


# -- a fit, for a person ---------------------------------------------------------------------------
def _scores(
    console: Console,
    title: str,
    scores: list[dict[str, Any]],
    fit_seconds: dict[str, float],
    goals: dict[str, bool | None],
) -> None:
    table = Table(title=escape(title), title_justify="left")
    for h in ("model", "R²", "MAE ms", "RMSE ms", "95 % coverage", "fit s"):
        table.add_column(h, justify="left" if h == "model" else "right")
    for s in scores:
        cov = "-" if s["coverage"] is None else f"{100 * s['coverage']:.1f} %"
        fit_s = fit_seconds.get(s["model"])
        table.add_row(
            s["model"],
            f"{s['r2']:.3f}",
            f"{1e3 * s['mae_seconds']:.3f}",
            f"{1e3 * s['rmse_seconds']:.3f}",
            cov,
            "-" if fit_s is None else f"{fit_s:.1f}",
        )
    console.print(table)
    if goals:
        words = {True: "met", False: "NOT met", None: "-"}
        console.print(
            "targets: R² ≥ 0.8 "
            + words[goals.get("r2")]
            + "; 95 % interval covers 93-97 % "
            + words[goals.get("coverage")]
            + "; MAE ≥ 30 % below the run-queue wait's "
            + words[goals.get("mae_vs_runq")],
            markup=False,
            highlight=False,
        )


def _calibration(cal: dict[str, Any] | None) -> str:
    if cal is None:
        return (
            "sparse_gp's interval as fitted"
            " (not calibrated: --no-calibrate, or fewer than two contended runs)"
        )
    per_class = ", ".join(f"{c} x{v:.2f}" for c, v in cal["class_scales"].items())
    return (
        f"sparse_gp's interval calibrated by leaving {len(cal['groups'])} runs out in turn"
        f" ({cal['requests']} requests): sd x{cal['scale']:.2f}"
        + (f"; per class {per_class}" if per_class else "")
    )


def _floor(floor: dict[str, Any] | None) -> str:
    if not floor or floor["method"] == "none":
        return "provider floor: none (every positive predicted excess is the provider's)"
    return (
        f"provider floor: {1e3 * floor['seconds']:.3f} ms, the {100 * floor['quantile']:g} %"
        f" quantile of the predicted excess of {floor['requests']} uncontended requests"
    )


def _agreement(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = Table(title="percentile against paired labels", title_justify="left")
    for h in ("run", "paired", "MAE ms", "p95 |diff| ms", "correlation", "p99 pct/paired ms"):
        table.add_column(h, justify="left" if h == "run" else "right")
    for r in rows:
        table.add_row(
            escape(r["run"]),
            str(r["n_paired"]),
            f"{1e3 * r['mae_seconds']:.3f}",
            f"{1e3 * r['p95_abs_difference_seconds']:.3f}",
            f"{r['correlation']:.3f}",
            f"{1e3 * r['percentile_p99_seconds']:.2f} / {1e3 * r['paired_p99_seconds']:.2f}",
        )
    console.print(table)


def print_fit(doc: dict[str, Any], console: Console) -> None:
    """A fit's document (``FitResult.as_dict``): every model's scores on the held-out requests
    and runs against the targets, how the interval was calibrated, the provider floor, and
    how far percentile and paired labels differ."""
    title = f"held-out requests: {doc['n_test']} (trained on {doc['n_train']})"
    _scores(console, title, doc["scores"], doc["fit_seconds"], doc["acceptance"])
    for name, held in doc["held_out"].items():
        n = held["scores"][0]["n"] if held["scores"] else 0
        _scores(console, f"{name}: {n} requests", held["scores"], {}, held["acceptance"])
    console.print(_calibration(doc["calibration"]), markup=False, highlight=False)
    console.print(_floor(doc["floor"]), markup=False, highlight=False)
    _agreement(console, doc["label_agreement"])

"""Attribution in a lab run (the scenario's ``attribution`` option, docs/reference/attribution.md): per
instrumented instance, its requests' attribution by the scenario's model, written to
``attribution/<id>.csv.gz`` of the run directory at the end of the run, and read back from
there by ``quell lab report``: a summary per instance, the per-request attribution plot and a
heatmap of the provider's p99 over the run's phases × load level.

The records are the run's ``instrument/<id>/requests.csv.gz``, read and checked as
``quell attribute predict`` reads them (``quell.instrument.log.read_records``, then
``quell.attribute.records.check_records``) and attributed by the same function
(``quell.attribute.apply.attribute``), with no PSI series (a lab run records none on the
records' clock; the scenario check refuses a model that reads one). Records without a request
id (``request_id`` -1: HAProxy's health checks, which carry no request) are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from quell.attribute.apply import Attribution, attribute
from quell.attribute.bundle import AttributionModel
from quell.attribute.records import Records, check_records
from quell.errors import InputError, Problem, QuellError
from quell.instrument.log import CSV_NAME, read_records
from quell.report.attribution import (
    Cell,
    plot_heatmap,
    plot_request_attribution,
    read_attribution_csv,
    write_attribution_csv,
)

ATTRIBUTION_DIR: Final = "attribution"
SUFFIX: Final = ".csv.gz"
INSTRUMENT_DIR: Final = "instrument"
MIN_CELL_REQUESTS: Final = 20
"""A heatmap cell with fewer requests is left empty: its p99 would be one or two requests."""
LOAD_LEVELS: Final = 3


def attribution_file(run_dir: Path, instance_id: str) -> Path:
    return run_dir / ATTRIBUTION_DIR / f"{instance_id}{SUFFIX}"


def instance_records(run_dir: Path, instance_id: str) -> Records:
    """The instance's checked records with a request id, from the run directory."""
    path = run_dir / INSTRUMENT_DIR / instance_id / CSV_NAME
    if not path.is_file():
        raise InputError(str(path), [Problem("", "no per-request records (instrument: true?)")])
    table = read_records(path)
    table = table[table["request_id"] >= 0].reset_index(drop=True)
    if len(table) == 0:
        raise InputError(str(path), [Problem("", "no request with an id in the records")])
    return check_records(table, str(path))


def attribute_run(
    run_dir: Path,
    instance_ids: Sequence[str],
    model: AttributionModel,
    on_done: Callable[[str, Path], None] = lambda iid, path: None,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Attribute each instance's requests and write ``attribution/<id>.csv.gz`` as each is
    done; returns (summary per instance, errors of the instances that could not be)."""
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for iid in instance_ids:
        try:
            records = instance_records(run_dir, iid)
            attr = attribute(model, records, None, source=f"instance {iid}")
            path = write_attribution_csv(attribution_file(run_dir, iid), attr)
        except (QuellError, OSError) as exc:
            errors.append(f"attribution of {iid}: {exc}")
            continue
        out[iid] = attr.summary() | {"file": str(path)}
        on_done(iid, path)
    return out, errors


def stored_attributions(run_dir: Path) -> dict[str, Attribution]:
    """The run's attribution files, by instance id (empty without any)."""
    folder = run_dir / ATTRIBUTION_DIR
    files = sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
    return {f.name.removesuffix(SUFFIX): read_attribution_csv(f) for f in files}


@dataclass(frozen=True)
class GridAxes:
    """The single run's heatmap: rows are its phases, columns load levels."""

    cells: list[Cell]
    row_names: dict[float, str]
    column_names: dict[float, str]


def phase_load_cells(
    attr: Attribution,
    start_ns: NDArray[np.int64],
    first_send_s: float,
    phases: Sequence[tuple[str, float, float]],
    levels: int = LOAD_LEVELS,
) -> GridAxes:
    """Cells of the provider's p99 by phase × load level. A request's run time is its start on
    the records' clock less the first request's, plus ``first_send_s`` (when the load generator
    sent the first request, on the run's clock); its load, the requests that started in the
    same second, each rate a level when there are at most ``levels`` of them, else ``levels``
    bins cut at the rates' quantiles; each level named by its mean rate. A cell of fewer than ``MIN_CELL_REQUESTS`` requests is left out."""
    if len(start_ns) == 0:
        return GridAxes([], {}, {})
    rel_s = (start_ns - start_ns.min()) / 1e9
    t = rel_s + first_send_s
    second = np.floor(rel_s).astype(np.int64)
    per_second = np.bincount(second)
    load = per_second[second].astype(np.float64)
    distinct = np.unique(load)
    if len(distinct) <= levels:  # each rate a level of its own
        level = np.searchsorted(distinct, load)
    else:
        inner = np.unique(np.quantile(load, np.linspace(0, 1, levels + 1)[1:-1]))
        level = np.searchsorted(inner, load, side="right")
    column_names: dict[float, str] = {}
    for k in np.unique(level):
        column_names[float(k)] = f"{load[level == k].mean():.0f} req/s"
    cells: list[Cell] = []
    row_names: dict[float, str] = {}
    for i, (name, start, end) in enumerate(phases):
        last = i == len(phases) - 1
        in_phase = (t >= start) & ((t <= end) if last else (t < end))
        for k in column_names:
            mask = in_phase & (level == k)
            if mask.sum() >= MIN_CELL_REQUESTS:
                p99 = float(np.percentile(attr.provider_seconds[mask], 99))
                cells.append(Cell(float(i), k, p99))
                row_names[float(i)] = name
    used = {c.column for c in cells}
    return GridAxes(cells, row_names, {k: v for k, v in column_names.items() if k in used})


def write_run_plots(
    run_dir: Path,
    out_dir: Path,
    phases: Sequence[tuple[str, float, float]],
    first_send_s: dict[str, float],
) -> tuple[dict[str, dict[str, Any]], list[tuple[str, Path]]]:
    """From the stored attribution files: a summary per instance and its plots (the per-request
    attribution, the phase × load heatmap when a cell has enough requests)."""
    summaries: dict[str, dict[str, Any]] = {}
    plots: list[tuple[str, Path]] = []
    for iid, attr in stored_attributions(run_dir).items():
        summaries[iid] = attr.summary() | {"file": str(attribution_file(run_dir, iid))}
        png = plot_request_attribution(
            attr, out_dir / f"attribution-{iid}.png", f"{iid}: latency and its provider part"
        )
        plots.append(
            (f"{iid}: each request's latency and the part attributed to the provider", png)
        )
        try:
            records = instance_records(run_dir, iid)
        except QuellError:
            continue  # the records are gone: the per-request plot alone
        by_id = dict(zip(records["request_id"].tolist(), records["start_ns"].tolist(), strict=True))
        if not all(r in by_id for r in attr.request_id.tolist()):
            continue
        start_ns = np.asarray([by_id[r] for r in attr.request_id.tolist()], dtype=np.int64)
        grid = phase_load_cells(attr, start_ns, first_send_s.get(iid, 0.0), phases)
        if grid.cells:
            heat = plot_heatmap(
                grid.cells,
                out_dir / f"attribution-heatmap-{iid}.png",
                "phase",
                "load (requests started in the same second)",
                f"{iid}: latency attributed to the provider, p99 (ms)",
                row_names=grid.row_names,
                column_names=grid.column_names,
            )
            plots.append((f"{iid}: provider-attributed p99 by phase and load", heat))
    return summaries, plots

"""What the campaign's runs show (``quell.studies.attribution.campaign``): the model fitted on the
training runs, scored on held-out seeds and held-out stressor kinds beside the baselines; the
Fig. 3 grid of provider-attributed p99; no false attribution in clean cells; the customer's own
slowdowns attributed to the service. One JSON document, from which the results page is drawn.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from quell.attribute.apply import Attribution, attribute
from quell.attribute.features import EBPF_FEATURES, EBPF_RECENT_FEATURES, available_features
from quell.attribute.labels import percentile_labels
from quell.core.files import load_json
from quell.experiment.attribution import (
    FitSettings,
    TrainingSet,
    combine,
    fit_attribution,
    training_set,
)
from quell.report.records import Run, read_run
from quell.studies.attribution.campaign import (
    GRID_TENANTS,
    HELD_OUT_KINDS,
    HELD_OUT_STRESS_NG,
    LOADS,
    p99_scatter_seconds,
    periodic_cells,
    test_cells,
    train_cells,
)

Progress = Callable[[str], None]


def export_run(src: Path, dst: Path) -> Path:
    """Keep a measured run compactly: its records as ``requests.csv.gz`` (the instrumentation's
    table), its PSI samples as ``psi.csv.gz`` and its cell."""
    import gzip

    from quell.instrument.log import read_records as read_logs
    from quell.instrument.log import write_records

    dst.mkdir(parents=True, exist_ok=True)
    write_records(read_logs(src / "logs"), dst / "requests.csv.gz")
    with (src / "psi.csv").open("rb") as fin, gzip.open(dst / "psi.csv.gz", "wb", 9) as fout:
        shutil.copyfileobj(fin, fout)
    (dst / "psi.csv").unlink(missing_ok=True)
    for name in ("cell.json", "scans.csv"):
        if name != "scans.csv" or (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    return dst


def _cells(data: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for cell in (*train_cells(), *test_cells(), *periodic_cells()):
        path = data / cell.name / "cell.json"
        if path.is_file():
            out[cell.name] = load_json(path, "cell")
    return out


def _groups(
    cells: dict[str, dict[str, Any]], prefix: str, kinds: Sequence[str] | None
) -> list[tuple[str, list[str]]]:
    """Per service load, the clean run of ``prefix`` and its contended runs (of ``kinds``)."""
    groups = []
    for load in LOADS:
        clean = f"{prefix}-clean-w{load}"
        if clean not in cells:
            continue
        contended = [
            n
            for n, c in cells.items()
            if n.startswith(prefix + "-")
            and c["workers"] == load
            and c["antagonist_workers"] > 0
            and (kinds is None or c["stressor"] in kinds)
        ]
        groups.append((clean, sorted(contended)))
    return groups


def _read(data: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Run], list[str], list[str]]:
    """The campaign's cells and runs in ``data``, the features every run has, the classes."""
    cells = _cells(data)
    runs = {name: read_run(data / name, name) for name in cells}
    names = None
    for run in runs.values():
        have = available_features(run.records, run.psi)
        names = list(have) if names is None else [n for n in names if n in have]
    classes = sorted({c for r in runs.values() for c in r.records.request_class.tolist()})
    if names is None:
        from quell.errors import InputError, Problem

        raise InputError(str(data), [Problem("", "no run of the campaign's cells here")])
    return cells, runs, names, classes


def analyse(data: Path, settings: FitSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Fit, score and attribute over the runs in ``data``; the document of the results page.
    When the runs carry the eBPF split's features, the same is done once more without them
    (the GP alone, ``without_ebpf``): what the split adds on the same runs."""
    note = progress or (lambda _: None)
    cells, runs, names, classes = _read(data)
    runs = {n: r for n, r in runs.items() if not n.startswith("periodic-")}
    cells = {n: c for n, c in cells.items() if not n.startswith("periodic-")}
    doc = _fitted(data, cells, runs, names, classes, settings, note)
    base = [n for n in names if n not in EBPF_FEATURES + EBPF_RECENT_FEATURES]
    if len(base) < len(names):
        note("again without the eBPF split's features")
        plain = replace(settings, baselines=False)
        without = _fitted(data, cells, runs, base, classes, plain, note)
        doc["without_ebpf"] = {k: without[k] for k in ("fit", "grid", "customer")}
    return doc


def _fitted(
    data: Path,
    cells: dict[str, dict[str, Any]],
    runs: dict[str, Run],
    names: list[str],
    classes: list[str],
    settings: FitSettings,
    note: Progress,
) -> dict[str, Any]:
    def build(groups: list[tuple[str, list[str]]], include: bool) -> TrainingSet:
        return combine(
            [
                training_set(
                    runs[clean], [runs[c] for c in contended], "percentile", include, names, classes
                )
                for clean, contended in groups
                if include or contended
            ]
        )

    train_groups = _groups(cells, "train", None)
    data_train = build(train_groups, True)
    seen_kinds = sorted({c["stressor"] for n, c in cells.items() if n.startswith("train-")})
    held_out = [
        ("held-out seed, trained kinds", build(_groups(cells, "test", seen_kinds), False)),
        (
            "held-out stress-ng kinds",
            build(_groups(cells, "test", list(HELD_OUT_STRESS_NG)), False),
        ),
        ("held-out kinds, all four", build(_groups(cells, "test", list(HELD_OUT_KINDS)), False)),
    ]
    # each held-out kind alone too: one kind the model fails on hides among the others
    for kind in HELD_OUT_KINDS:
        groups = _groups(cells, "test", [kind])
        if any(contended for _, contended in groups):
            held_out.append((f"held-out kind {kind} alone", build(groups, False)))
    note(f"fitting on {len(data_train.y)} requests")
    # The interval is calibrated by leaving one antagonist kind's training runs out at a time,
    # as the held-out kinds are left out of the training (docs/reference/attribution.md)
    kinds = {
        n: str(c["stressor"])
        for n, c in cells.items()
        if n.startswith("train-") and c["antagonist_workers"] > 0
    }
    result = fit_attribution(data_train, settings, str(data), note, held_out, kinds)
    model = result.model
    doc: dict[str, Any] = {
        "settings": vars(settings),
        "train_runs": [n for n in cells if n.startswith("train-")],
        "test_runs": [n for n in cells if n.startswith("test-")],
        "fit": result.as_dict(),
        "cells": {
            n: {
                k: cells[n][k]
                for k in (
                    "workers",
                    "stressor",
                    "antagonist_workers",
                    "cpu_scale",
                    "served",
                    "seconds",
                )
            }
            for n in cells
        },
    }
    note("attributing the held-out runs")
    attributed = {
        n: attribute(model, r.records, r.psi, source=n)
        for n, r in runs.items()
        if n.startswith("test-")
    }
    doc["runs"] = {n: a.summary() for n, a in attributed.items()}
    doc["grid"] = _grid(attributed, runs)
    doc["customer"] = _customer(attributed)
    return doc


def _grid(attributed: dict[str, Attribution], runs: dict[str, Run]) -> list[dict[str, Any]]:
    """Fig. 3: per cell of the grid, the p99 of the latency, of its provider part and of the
    labels; in the clean cells, the run's own p99 scatter beside the provider part's p99."""
    grid = []
    for tenants in GRID_TENANTS:
        for load in LOADS:
            name = f"test-clean-w{load}" if tenants == 0 else f"test-cpu{tenants}-w{load}"
            if name not in attributed:
                continue
            a = attributed[name]
            row: dict[str, Any] = {
                "run": name,
                "tenants": tenants,
                "workers": load,
                "p99_seconds": float(np.percentile(a.wall_seconds, 99)),
                "provider_p99_seconds": float(np.percentile(a.provider_seconds, 99)),
                "provider_p99_no_floor_seconds": float(
                    np.percentile(a.provider_seconds_without_floor, 99)
                ),
            }
            clean = runs[f"test-clean-w{load}"].records if f"test-clean-w{load}" in runs else None
            if clean is not None:
                labels = percentile_labels(
                    clean.wall_seconds,
                    clean.request_class,
                    a.wall_seconds,
                    a.request_class,
                )
                row["label_p99_seconds"] = float(np.percentile(labels, 99))
            if tenants == 0:
                scatter = p99_scatter_seconds(a.wall_seconds)
                row["own_p99_scatter_seconds"] = scatter
                row["no_false_attribution"] = bool(row["provider_p99_seconds"] <= scatter)
            grid.append(row)
    return grid


def _customer(attributed: dict[str, Attribution]) -> list[dict[str, Any]]:
    """The customer's own slowdowns against the clean one-worker run, request by request: the
    share of their excess attributed to the service."""
    customer = []
    base_name = "test-clean-w1"
    for name, what in (
        ("test-heavy-w1", "requests twice as heavy"),
        ("test-clean-w3", "three service workers instead of one"),
        ("test-clean-w2", "two service workers instead of one"),
    ):
        if name not in attributed or base_name not in attributed:
            continue
        base, other = attributed[base_name], attributed[name]
        ids = np.intersect1d(
            base.request_id[base.request_id >= 0], other.request_id[other.request_id >= 0]
        )
        bi = {int(i): k for k, i in enumerate(base.request_id)}
        oi = {int(i): k for k, i in enumerate(other.request_id)}
        b = np.array([bi[int(i)] for i in ids])
        o = np.array([oi[int(i)] for i in ids])
        excess = float((other.wall_seconds[o] - base.wall_seconds[b]).sum())
        to_provider = float((other.provider_seconds[o] - base.provider_seconds[b]).sum())
        customer.append(
            {
                "run": name,
                "what": what,
                "requests": len(ids),
                "mean_excess_seconds": excess / max(len(ids), 1),
                "mean_to_provider_seconds": to_provider / max(len(ids), 1),
                "service_share": 1.0 - to_provider / excess if excess > 0 else None,
            }
        )
    return customer


def _in_spans(start_ns: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Which requests started while a scan ran (``spans``: rows of start, end)."""
    inside = np.zeros(len(start_ns), dtype=bool)
    for lo, hi in spans:
        inside |= (start_ns >= lo) & (start_ns < hi)
    return inside


def analyse_periodic(
    data: Path, settings: FitSettings, progress: Progress | None = None
) -> dict[str, Any]:
    """Fig. 4: the model fitted on the training runs in ``data`` attributes the service beside a
    light background tenant and beside it and the periodic scan (schedule seed 3), and alone;
    the p90 of the provider part, of its labels (against the run alone) and of the latency in
    each, and among the requests that started while a scan ran."""
    note = progress or (lambda _: None)
    cells, runs, names, classes = _read(data)
    clean, base, scan = (c.name for c in periodic_cells())
    missing = [n for n in (clean, base, scan) if n not in runs]
    if missing or not any(n.startswith("train-") for n in runs):
        from quell.errors import InputError, Problem

        need = missing or ["train-*"]
        raise InputError(str(data), [Problem("", f"no measured run {n}") for n in need])
    groups = _groups(cells, "train", None)
    train = combine(
        [
            training_set(runs[c], [runs[x] for x in con], "percentile", True, names, classes)
            for c, con in groups
        ]
    )
    note(f"fitting on {len(train.y)} requests")
    model = fit_attribution(train, settings, str(data), note).model
    spans = np.loadtxt(data / scan / "scans.csv", delimiter=",", skiprows=1, ndmin=2)
    out: dict[str, Any] = {
        "settings": vars(settings),
        "scan_run": {
            k: cells[scan][k]
            for k in ("scan_mb", "scan_period_s", "served", "seconds", "tenant_load_pct")
        },
        "floor_seconds": model.floor_seconds,
        "scans": len(spans),
        "scan_seconds_mean": float(np.mean(spans[:, 1] - spans[:, 0]) / 1e9)
        if len(spans)
        else None,
    }
    for name in (clean, base, scan):
        a = attribute(model, runs[name].records, runs[name].psi, source=name)
        row: dict[str, Any] = {
            "requests": len(a.wall_seconds),
            "p90_seconds": float(np.percentile(a.wall_seconds, 90)),
            "provider_p90_seconds": float(np.percentile(a.provider_seconds, 90)),
            "provider_p90_no_floor_seconds": float(
                np.percentile(a.provider_seconds_without_floor, 90)
            ),
        }
        if name != clean:
            labels = percentile_labels(
                runs[clean].records.wall_seconds,
                runs[clean].records.request_class,
                runs[name].records.wall_seconds,
                runs[name].records.request_class,
            )
            row["label_p90_seconds"] = float(np.percentile(labels, 90))
        if name == scan:
            inside = _in_spans(runs[name].records.columns["start_ns"], spans)
            row["during_scans"] = int(inside.sum())
            if inside.any():
                row["p90_during_scans_seconds"] = float(np.percentile(a.wall_seconds[inside], 90))
                row["provider_p90_during_scans_seconds"] = float(
                    np.percentile(a.provider_seconds[inside], 90)
                )
                row["provider_p90_during_scans_no_floor_seconds"] = float(
                    np.percentile(a.provider_seconds_without_floor[inside], 90)
                )
        out[name.split("-")[1]] = row
    return out


def _measured(runs_dir: Path) -> list[Path]:
    """The campaign's measured runs in ``runs_dir`` (each a directory with its cell.json)."""
    from quell.errors import InputError, Problem

    measured = sorted(p.parent for p in runs_dir.glob("*/cell.json")) if runs_dir.is_dir() else []
    if not measured:
        raise InputError(str(runs_dir), [Problem("", "no measured run (*/cell.json) here")])
    return measured


def keep_runs(measured: Sequence[Path], kept: Path, progress: Progress | None = None) -> None:
    """Each measured run kept compactly under ``kept``: a run of per-thread logs exported
    (``export_run``), a run kept already (``requests.csv.gz``) copied unless it is there."""
    note = progress or (lambda _: None)
    for run in measured:
        if (run / "logs").is_dir():
            export_run(run, kept / run.name)
            note(f"kept {run.name}")
        elif (run / "requests.csv.gz").is_file() and run.resolve() != (kept / run.name).resolve():
            shutil.copytree(run, kept / run.name, dirs_exist_ok=True)
            note(f"kept {run.name}")


def analyse_campaign(
    runs_dir: Path,
    data: Path,
    n_inducing: int = 200,
    max_iters: int = 50,
    seed: int = 0,
    exact_points: int = 1000,
    progress: Progress | None = None,
) -> Path:
    """``quell attribute analyse``: the measured runs of ``runs_dir`` kept under
    ``data/runs/``, ``analyse`` over them, its document written to ``data/results.json``
    (returned)."""
    from quell.core.files import write_json
    from quell.studies.attribution.results import RESULTS_FILE

    kept = data / "runs"
    keep_runs(_measured(runs_dir), kept, progress)
    settings = FitSettings(n_inducing, max_iters, seed, 0.2, exact_points, True)
    doc = analyse(kept, settings, progress)
    write_json(data / RESULTS_FILE, doc)
    return data / RESULTS_FILE


def periodic_campaign(
    runs_dir: Path,
    data: Path,
    n_inducing: int = 200,
    max_iters: int = 50,
    seed: int = 0,
    progress: Progress | None = None,
) -> Path:
    """``quell attribute periodic``: ``analyse_periodic`` over the measured runs of
    ``runs_dir`` (kept in a temporary directory for it), written to ``data/periodic.json``
    (returned). Fig. 4 reads the model's mean alone: its interval is not calibrated."""
    import tempfile

    from quell.core.files import write_json
    from quell.studies.attribution.results import PERIODIC_FILE

    measured = _measured(runs_dir)
    with tempfile.TemporaryDirectory() as tmp:
        kept = Path(tmp)
        keep_runs(measured, kept)
        settings = FitSettings(n_inducing, max_iters, seed, 0.2, 10, True, calibrate=False)
        doc = analyse_periodic(kept, settings, progress)
    data.mkdir(parents=True, exist_ok=True)
    write_json(data / PERIODIC_FILE, doc)
    return data / PERIODIC_FILE

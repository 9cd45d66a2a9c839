"""What the campaign's runs show (``quell.studies.attribution.campaign``): the model fitted on the
training runs, scored on held-out seeds and held-out stressor kinds beside the baselines; the
Fig. 3 grid of provider-attributed p99; no false attribution in clean cells; the customer's own
slowdowns attributed to the service. One JSON document, from which the results page is drawn.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quell.attribute.apply import attribute
from quell.attribute.features import available_features
from quell.attribute.labels import percentile_labels
from quell.core.files import load_json
from quell.studies.attribution.campaign import (
    GRID_TENANTS,
    HELD_OUT_KINDS,
    LOADS,
    p99_scatter_seconds,
    test_cells,
    train_cells,
)
from quell.studies.attribution.pipeline import (
    FitSettings,
    Run,
    TrainingSet,
    combine,
    fit_attribution,
    training_set,
)
from quell.studies.attribution.runs import read_psi, read_records

Progress = Callable[[str], None]


def export_run(src: Path, dst: Path) -> Path:
    """Keep a measured run compactly: its records as ``requests.csv.gz`` (the instrumentation's
    table), its PSI samples and its cell."""
    from quell.instrument.log import read_records as read_logs
    from quell.instrument.log import write_records

    dst.mkdir(parents=True, exist_ok=True)
    write_records(read_logs(src / "logs"), dst / "requests.csv.gz")
    for name in ("psi.csv", "cell.json"):
        shutil.copyfile(src / name, dst / name)
    return dst


def _run(data: Path, name: str) -> Run:
    return Run(name, read_records(data / name), read_psi(data / name))


def _cells(data: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for cell in (*train_cells(), *test_cells()):
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


def analyse(data: Path, settings: FitSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Fit, score and attribute over the runs in ``data``; the document of the results page."""
    note = progress or (lambda _: None)
    cells = _cells(data)
    runs = {name: _run(data, name) for name in cells}
    names = None
    for run in runs.values():
        have = available_features(run.records, run.psi)
        names = list(have) if names is None else [n for n in names if n in have]
    classes = sorted({c for r in runs.values() for c in r.records.request_class.tolist()})
    assert names is not None

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
        ("held-out kinds", build(_groups(cells, "test", list(HELD_OUT_KINDS)), False)),
    ]
    note(f"fitting on {len(data_train.y)} requests")
    result = fit_attribution(data_train, settings, str(data), note, held_out)
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
    doc["grid"] = grid
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
    doc["customer"] = customer
    return doc

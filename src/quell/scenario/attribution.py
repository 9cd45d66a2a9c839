"""The scenario's ``attribution`` option: which model bundle a lab run attributes its
instrumented instances' requests with, checked with the rest of the scenario."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from quell.errors import InputError, Problem
from quell.scenario.model import Scenario

if TYPE_CHECKING:
    from quell.attribute.bundle import AttributionModel

KEY = "attribution.model"
CLASS_BYTES = 47
"""The instrumentation cuts a request's class to this many bytes (docs/reference/attribution.md)."""


def attribution_model_path(scenario: Scenario, base_dir: Path) -> Path | None:
    """The bundle the scenario names, resolved in the scenario's folder (``None``: no option)."""
    if scenario.attribution is None:
        return None
    path = Path(scenario.attribution.model)
    return path if path.is_absolute() else base_dir / path


def request_class(path: str) -> str:
    """The class the lab's instrumented lighttpd gives a request of ``path``."""
    return path.split("?", 1)[0].encode()[:CLASS_BYTES].decode(errors="ignore")


def check_attribution(scenario: Scenario, base_dir: Path | None) -> list[Problem]:
    """Every problem with the scenario's ``attribution`` option: no instrumented instance; the
    bundle missing, unreadable, foreign or of an unknown version; features a lab run does not
    record (PSI series, eBPF); request paths of a class the model was not trained on. With
    ``base_dir`` ``None`` the bundle is not read."""
    if scenario.attribution is None:
        return []
    from quell.attribute.bundle import load_attribution_model  # numpy, scipy: only when asked

    problems: list[Problem] = []
    if not any(i.instrument for i in scenario.instances):
        message = "needs at least one instance with instrument: true"
        problems.append(Problem("attribution", message))
    path = attribution_model_path(scenario, base_dir or Path("."))
    if base_dir is None or path is None:
        return problems
    try:
        bundle = load_attribution_model(path)
    except InputError as exc:
        for p in exc.problems:
            where = f" ({p.location})" if p.location else ""
            problems.append(Problem(KEY, f"{path}{where}: {p.message}"))
        return problems
    return problems + _fits_the_lab(scenario, bundle, path)


def _fits_the_lab(scenario: Scenario, bundle: AttributionModel, path: Path) -> list[Problem]:
    from quell.attribute.features import (
        BASE_FEATURES,
        EBPF_FEATURES,
        EBPF_RECENT_FEATURES,
        RECENT_FEATURES,
    )

    problems: list[Problem] = []
    ebpf = scenario.attribution is not None and scenario.attribution.ebpf
    recorded = BASE_FEATURES + RECENT_FEATURES
    recorded += EBPF_FEATURES + EBPF_RECENT_FEATURES if ebpf else ()
    needs = [f for f in bundle.features if f not in recorded]
    if needs:
        without = "no PSI series" + ("" if ebpf else "; the eBPF part only with ebpf: true")
        message = (
            f"{path}: reads {', '.join(needs)}, which a lab run does not record"
            f" ({without}): fit the model on runs with records alone"
        )
        problems.append(Problem(KEY, message))
    lighttpd_only = all(i.server == "lighttpd" for i in scenario.instances if i.instrument)
    if lighttpd_only:
        for k, req in enumerate(scenario.workload.requests or []):
            cls = request_class(req.path)
            if cls not in bundle.classes:
                message = (
                    f"class {cls!r} is not one the attribution model was trained on"
                    f" ({', '.join(bundle.classes)})"
                )
                problems.append(Problem(f"workload.requests[{k}].path", message))
    return problems

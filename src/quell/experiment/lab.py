"""A lab run: check, bring up, run, report, and always tear down."""

from __future__ import annotations

import contextlib
import json
import logging
import resource
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from quell.attribute.bundle import AttributionModel, load_attribution_model
from quell.errors import ComponentError
from quell.experiment.run import (
    ProgressFn,
    new_run_dir,
    no_progress,
    prepare_run_dir,
    run_scenario,
)
from quell.lab.environment import LabEnvironment
from quell.lab.preflight import preflight
from quell.lab.process import terminate_on_signals
from quell.report.run_attribution import attribute_run
from quell.report.summary import summarize
from quell.scenario.attribution import attribution_model_path
from quell.scenario.model import Scenario
from quell.scenario.policy import build_policy, with_policy_balancer
from quell.signals.cgroup import detect_layout
from quell.signals.machine import read_machine

__all__ = ["attribute_lab_run", "raise_fd_limit", "run_lab"]

log = logging.getLogger(__name__)


def raise_fd_limit(wanted: int = 65536) -> None:
    """HAProxy, the servers and the load generator inherit this; open loops need many sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run_lab(
    scenario: Scenario,
    scenario_path: Path,
    runs_dir: Path,
    progress: Callable[[], AbstractContextManager[ProgressFn]] = no_progress,
) -> dict[str, Any]:
    """Check, bring up, run and tear down. ``progress`` opens the progress display; it is
    opened only once the pre-start checks have passed, so a refusal shows no bar."""
    scenario = with_policy_balancer(scenario)
    schedule = preflight(scenario, scenario_path.parent, str(scenario_path))
    policy = build_policy(scenario.policy, scenario, scenario_path.parent)
    model_path = attribution_model_path(scenario, scenario_path.parent)
    model = load_attribution_model(model_path) if model_path is not None else None
    raise_fd_limit()
    layout = detect_layout()
    run_dir = new_run_dir(runs_dir, scenario, "lab")
    store = prepare_run_dir(run_dir, scenario, scenario_path, "lab")
    env = LabEnvironment(scenario, scenario_path.parent, run_dir, layout, schedule=schedule)
    # what it ran on: a working set sized to one machine's cache fits in another's
    store.set_meta(run_tag=env.tag.value, machine=read_machine().as_dict())
    summary: dict[str, Any] | None = None
    with terminate_on_signals(), progress() as report_progress:
        try:
            env.start(status=lambda step: report_progress(0.0, step))
            summary = run_scenario(scenario, env, policy, store, report_progress)
        finally:
            try:
                env.close()
            except ComponentError as exc:
                log.error("%s; run `quell lab clean` to remove what is left", exc)
            if summary is None:  # interrupted: keep what was measured, summarised
                with contextlib.suppress(Exception):
                    store.add_requests(env.take_requests())
                    store.commit()
                    partial = summarize(store)
                    (run_dir / "summary.json").write_text(json.dumps(partial, indent=2) + "\n")
            store.close()
    if model is not None and summary is not None:
        summary = attribute_lab_run(run_dir, scenario, model, summary)
    return summary


def attribute_lab_run(
    run_dir: Path, scenario: Scenario, model: AttributionModel, summary: dict[str, Any]
) -> dict[str, Any]:
    """The scenario's ``attribution``: each instrumented instance's requests attributed into
    ``attribution/<id>.csv.gz``, their summary under ``attribution`` in the run's summary (and
    summary.json), what failed under ``attribution_errors``."""
    ids = [i.id for i in scenario.instances if i.instrument]
    done, errors = attribute_run(run_dir, ids, model)
    for e in errors:
        log.error("%s", e)
    summary = summary | {"attribution": done} | ({"attribution_errors": errors} if errors else {})
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary

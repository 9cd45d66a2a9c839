"""Run a scenario against any Environment: the same code drives the lab and the simulator.

Creates the run directory, fires the scenario's timed events on environments that can stage
them, records every snapshot, decision and event as it happens, shows progress, and writes the
phase summary at the end."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from quell.core.action import Decision
from quell.core.environment import Environment, Policy
from quell.core.loop import ControlLoop, LoopReport, TimedCall
from quell.core.observation import Snapshot
from quell.report.summary import summarize
from quell.scenario.model import Event, Scenario
from quell.store.run import RequestRecord, RunStore

ProgressFn = Callable[[float, str], None]
"""Called with (seconds of the run done, current phase name)."""
ProgressBar = Callable[[float, str], contextlib.AbstractContextManager[ProgressFn]]
"""Opens a progress display over (total seconds, label) for a block; the block moves it."""


@contextlib.contextmanager
def no_progress() -> Iterator[ProgressFn]:
    """A progress display that shows nothing."""
    yield lambda done, phase: None


T = TypeVar("T")


def least_stolen(
    run: Callable[[], T],
    steal_pct: Callable[[T], float | None],
    bound_pct: float,
    attempts: int,
    on_refused: Callable[[T], None] = lambda _: None,
) -> tuple[T, list[T]]:
    """Run until a run's CPU steal (``steal_pct`` of it, ``None`` for none measured) is at most
    ``bound_pct``, ``attempts`` runs at most. Returns the run kept — the first within the bound,
    else the least stolen — and every run over the bound, in order (the kept one among them
    when none was within it). ``on_refused`` sees each over-bound run as soon as it ends, so a
    caller can record it before the next run starts."""
    over: list[tuple[float, T]] = []
    for _ in range(attempts):
        result = run()
        steal = steal_pct(result)
        if steal is None or steal <= bound_pct:
            return result, [r for _, r in over]
        over.append((steal, result))
        on_refused(result)
    return min(over, key=lambda sr: sr[0])[1], [r for _, r in over]


@runtime_checkable
class RequestSource(Protocol):
    """An environment that also yields client-side per-request records."""

    def take_requests(self) -> list[RequestRecord]: ...


@runtime_checkable
class Staged(Protocol):
    """An environment that can stage a scenario's timed events (start and stop neighbours)."""

    def trigger(self, event: Event) -> None: ...


def event_calls(
    events: Sequence[Event], environment: Environment, on_event: Callable[[Event], None]
) -> list[TimedCall]:
    """The scenario's events as the control loop's timed calls: each triggers ``environment``
    (when it can stage events), then ``on_event``."""

    def call(ev: Event) -> Callable[[], None]:
        def fire() -> None:
            if isinstance(environment, Staged):
                environment.trigger(ev)
            on_event(ev)

        return fire

    return [(ev.at_s, call(ev)) for ev in events]


def scenario_loop(
    scenario: Scenario,
    environment: Environment,
    policy: Policy,
    on_snapshot: Callable[[Snapshot], None] = lambda s: None,
    on_decision: Callable[[float, Decision], None] = lambda t, d: None,
    on_event: Callable[[Event], None] = lambda e: None,
    on_cycle_error: Callable[[float, str], None] = lambda t, msg: None,
) -> ControlLoop:
    """The control loop of ``scenario``: its interval and duration, its events on time."""
    return ControlLoop(
        environment,
        policy,
        scenario.interval_s,
        scenario.duration_s,
        timed=event_calls(scenario.events, environment, on_event),
        on_snapshot=on_snapshot,
        on_decision=on_decision,
        on_cycle_error=on_cycle_error,
    )


_PLAIN = re.compile(r"[^A-Za-z0-9._-]+")


def unique_run_dir(root: Path, label: str) -> Path:
    """``root/<timestamp>-<label>``, with ``-2``, ``-3``... if that exists already. ``label``
    (which carries a scenario's free-text name) keeps letters, digits, '.', '_' and '-', each
    run of anything else becoming one '_': the directory is one plain name inside ``root``,
    whatever the name holds ('../../etc', '$(reboot)', a newline)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / f"{stamp}-{_PLAIN.sub('_', label)}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def new_run_dir(root: Path, scenario: Scenario, environment: str) -> Path:
    return unique_run_dir(root, f"{environment}-{scenario.name}")


def closing_phase(phases: Sequence[tuple[str, float, float]], time_s: float) -> str:
    """The phase of the interval a snapshot taken at ``time_s`` closes: the one the instant
    just before ``time_s`` falls in (the last phase from its end on)."""
    t = time_s - 1e-9
    return next((name for name, start, end in phases if start <= t < end), phases[-1][0])


def prepare_run_dir(
    run_dir: Path,
    scenario: Scenario,
    scenario_path: Path | None,
    environment: str,
    base_dir: Path | None = None,
) -> RunStore:
    """A new run store in ``run_dir`` with the scenario and, as ``scenario_dir``, the directory
    its relative paths (model files) resolve in: ``base_dir``, else the scenario file's."""
    store = RunStore.create(run_dir)
    if scenario_path is not None:
        shutil.copyfile(scenario_path, run_dir / "scenario.yaml")
    base = base_dir if base_dir is not None else scenario_path.parent if scenario_path else None
    if base is not None:
        store.set_meta(scenario_dir=str(base.resolve()))
    store.set_meta(
        scenario=scenario.name,
        environment=environment,
        seed=scenario.seed,
        duration_s=scenario.duration_s,
        interval_s=scenario.interval_s,
        phases=[list(p) for p in scenario.phases()],
        started_at=time.time(),
        scenario_json=scenario.model_dump(mode="json"),
    )
    return store


def run_scenario(
    scenario: Scenario,
    environment: Environment,
    policy: Policy,
    store: RunStore,
    progress: ProgressFn = lambda done, phase: None,
) -> dict[str, Any]:
    """Drive ``environment`` with ``policy`` for the scenario's duration; returns the summary."""
    phases = scenario.phases()
    # checked once: isinstance against a runtime-checkable protocol inspects the class each time
    requests = environment if isinstance(environment, RequestSource) else None

    def on_snapshot(snap: Snapshot) -> None:
        store.add_snapshot(snap)
        if requests is not None:
            store.add_requests(requests.take_requests())
        store.commit()
        progress(snap.time_s, closing_phase(phases, snap.time_s))

    def on_decision(t: float, d: Decision) -> None:
        store.add_decision(t, policy.name, d)

    def on_event(ev: Event) -> None:
        store.add_event(ev.at_s, "event", phase=ev.phase, start=ev.start, stop=ev.stop)

    def on_error(t: float, msg: str) -> None:
        store.add_event(t, "cycle_error", message=msg)

    loop = scenario_loop(
        scenario,
        environment,
        policy,
        on_snapshot=on_snapshot,
        on_decision=on_decision,
        on_event=on_event,
        on_cycle_error=on_error,
    )
    report: LoopReport = loop.run()
    if requests is not None:
        store.add_requests(requests.take_requests())
    store.set_meta(cycle_errors=report.cycle_errors, ticks=report.ticks, finished_at=time.time())
    summary = summarize(store)
    (store.path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary

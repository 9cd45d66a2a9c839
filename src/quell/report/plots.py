"""PNG plots of one run: response time, throughput and utilisation per instance over time, with
the run's phases shaded and named and its events marked. Drawn with matplotlib's Agg canvas
directly, so nothing touches pyplot's global state."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quell.core.observation import Observation

Phase = tuple[str, float, float]
EventRow = tuple[float, str, dict[str, Any]]

RT_PNG = "response_time.png"
THROUGHPUT_PNG = "throughput.png"
UTILISATION_PNG = "utilisation.png"

_DPI = 100
_SIZE_IN = (10.0, 4.2)
_STEPS = "steps-pre"
"""A value is drawn over its interval, which ends at the observation's ``time_s``."""


@dataclass(frozen=True)
class Series:
    """One instance's values over time, ``nan`` where the interval has no value."""

    times_s: list[float]
    values: list[float]


def series(
    observations: Sequence[Observation], instance_id: str, value: Callable[[Observation], Any]
) -> Series:
    obs = [o for o in observations if o.instance_id == instance_id]
    vals: list[float] = []
    for o in obs:
        v = value(o)
        vals.append(math.nan if v is None else float(v))
    return Series([o.time_s for o in obs], vals)


def event_label(kind: str, detail: dict[str, Any]) -> str:
    """Short text for an event marker: ``phase +started -stopped``, or the event kind."""
    if kind != "event":
        return kind.replace("_", " ")
    parts = []
    if detail.get("phase"):
        parts.append(str(detail["phase"]))
    parts += [f"+{a}" for a in detail.get("start") or []]
    parts += [f"-{a}" for a in detail.get("stop") or []]
    return " ".join(parts) or "event"


def _decorate(ax: Any, phases: Sequence[Phase], events: Sequence[EventRow], top: bool) -> None:
    """Shade every other phase, name the phases (top axes only) and mark every event."""
    from matplotlib.transforms import blended_transform_factory

    trans = blended_transform_factory(ax.transData, ax.transAxes)
    for k, (name, start, end) in enumerate(phases):
        if k % 2 == 1:
            ax.axvspan(start, end, color="0.92", zorder=0)
        if top:
            ax.text(
                (start + end) / 2.0,
                1.01,
                name,
                transform=trans,
                ha="center",
                va="bottom",
                fontsize=9,
                fontweight="bold",
            )
    for t, kind, detail in events:
        colour = "tab:red" if kind == "cycle_error" else "0.35"
        ax.axvline(t, color=colour, linestyle="--", linewidth=0.9, zorder=1)
        ax.text(
            t,
            0.98,
            " " + event_label(kind, detail),
            transform=trans,
            rotation=90,
            ha="left",
            va="top",
            fontsize=7,
            color=colour,
        )


def _x_limits(phases: Sequence[Phase], observations: Sequence[Observation]) -> tuple[float, float]:
    end = max([e for _, _, e in phases] + [o.time_s for o in observations] + [1.0])
    return 0.0, end


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (with the Agg backend, whatever the default)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def _figure(rows: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    width, height = _SIZE_IN
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)
    return fig, [row[0] for row in axes]


def _finish(
    axes: list[Any],
    phases: Sequence[Phase],
    events: Sequence[EventRow],
    observations: Sequence[Observation],
) -> None:
    lo, hi = _x_limits(phases, observations)
    for k, ax in enumerate(axes):
        _decorate(ax, phases, events, top=k == 0)
        ax.set_xlim(lo, hi)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8, framealpha=0.8)
    axes[-1].set_xlabel("time since start (s)")


Actions = Sequence[tuple[float, Sequence[dict[str, Any]]]]
"""(time, actions as the run store keeps them) of each decision."""


def action_marks(decisions: Actions) -> dict[str, list[float]]:
    """The times of the instances added, removed and of the weight changes a run's policy
    made (one mark per decision and kind)."""
    out: dict[str, list[float]] = {"add": [], "remove": [], "weights": []}
    kinds = {"AddInstance": "add", "RemoveInstance": "remove", "SetWeight": "weights"}
    for t, actions in decisions:
        seen = {kinds[a["type"]] for a in actions if a.get("type") in kinds}
        for kind in seen:
            out[kind].append(float(t))
    return out


def _mark_actions(ax: Any, decisions: Actions, target_rt_s: float | None) -> None:
    """R_th as a horizontal line; instances added (green) and removed (red) as vertical lines;
    weight changes as ticks along the bottom."""
    from matplotlib.transforms import blended_transform_factory

    if target_rt_s is not None:
        ax.axhline(target_rt_s * 1e3, color="k", linestyle="--", linewidth=1.2, label="R_th")
    marks = action_marks(decisions)
    for kind, colour, label in (("add", "tab:green", "added"), ("remove", "tab:red", "removed")):
        for k, t in enumerate(marks[kind]):
            ax.axvline(
                t,
                color=colour,
                linestyle="-.",
                linewidth=0.9,
                alpha=0.7,
                label=f"instance {label}" if k == 0 else None,
            )
    if marks["weights"]:
        trans = blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(
            marks["weights"],
            [0.01] * len(marks["weights"]),
            linestyle="none",
            marker="|",
            markersize=8,
            color="0.35",
            transform=trans,
            label="weights changed",
        )


def plot_response_time(
    observations: Sequence[Observation],
    instance_ids: Sequence[str],
    phases: Sequence[Phase],
    events: Sequence[EventRow],
    path: Path,
    target_rt_s: float | None = None,
    decisions: Actions = (),
) -> Path:
    fig, axes = _figure(1)
    ax = axes[0]
    _mark_actions(ax, decisions, target_rt_s)
    for k, iid in enumerate(instance_ids):
        colour = f"C{k % 10}"
        mean = series(observations, iid, lambda o: _ms(o.mean_rt_seconds))
        p95 = series(observations, iid, lambda o: _ms(o.p95_rt_seconds))
        ax.plot(mean.times_s, mean.values, color=colour, label=f"{iid} mean", drawstyle=_STEPS)
        ax.plot(
            p95.times_s,
            p95.values,
            color=colour,
            linestyle=":",
            label=f"{iid} p95",
            drawstyle=_STEPS,
        )
    ax.set_ylabel("response time (ms)")
    axes[0].set_title("Response time per interval", pad=16, fontsize=11)
    _finish(axes, phases, events, observations)
    return save_figure(fig, path)


def plot_throughput(
    observations: Sequence[Observation],
    instance_ids: Sequence[str],
    phases: Sequence[Phase],
    events: Sequence[EventRow],
    path: Path,
) -> Path:
    fig, axes = _figure(1)
    ax = axes[0]
    for k, iid in enumerate(instance_ids):
        s = series(observations, iid, lambda o: o.throughput_rps)
        ax.plot(s.times_s, s.values, color=f"C{k % 10}", label=iid, drawstyle=_STEPS)
    ax.set_ylabel("throughput (req/s)")
    axes[0].set_title("Throughput per interval", pad=16, fontsize=11)
    _finish(axes, phases, events, observations)
    return save_figure(fig, path)


def plot_utilisation(
    observations: Sequence[Observation],
    instance_ids: Sequence[str],
    phases: Sequence[Phase],
    events: Sequence[EventRow],
    path: Path,
) -> Path:
    fig, axes = _figure(2)
    cpu_ax, util_ax = axes
    for k, iid in enumerate(instance_ids):
        colour = f"C{k % 10}"
        cpu = series(observations, iid, lambda o: o.cpu_util)
        util = series(observations, iid, lambda o: o.util_pct)
        cpu_ax.plot(cpu.times_s, cpu.values, color=colour, label=iid, drawstyle=_STEPS)
        util_ax.plot(util.times_s, util.values, color=colour, label=iid, drawstyle=_STEPS)
    cpu_ax.set_ylabel("CPU (cores)")
    util_ax.set_ylabel("bottleneck util (%)")
    axes[0].set_title(
        "CPU utilisation and bottleneck utilisation per interval", pad=16, fontsize=11
    )
    _finish(axes, phases, events, observations)
    return save_figure(fig, path)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def write_plots(
    observations: Sequence[Observation],
    phases: Sequence[Phase],
    events: Sequence[EventRow],
    out_dir: Path,
    target_rt_s: float | None = None,
    decisions: Actions = (),
) -> list[tuple[str, Path]]:
    """Write the three PNGs into ``out_dir``; returns (title, path) for each. The response
    times carry R_th (``target_rt_s``) and the policy's actions (``decisions``)."""
    ids = sorted({o.instance_id for o in observations})
    rt_title = "Response time (mean and p95)"
    if target_rt_s is not None or decisions:
        rt_title += ", R_th, instances added and removed, weight changes"
    return [
        (
            rt_title,
            plot_response_time(
                observations, ids, phases, events, out_dir / RT_PNG, target_rt_s, decisions
            ),
        ),
        (
            "Throughput",
            plot_throughput(observations, ids, phases, events, out_dir / THROUGHPUT_PNG),
        ),
        (
            "CPU utilisation and util %",
            plot_utilisation(observations, ids, phases, events, out_dir / UTILISATION_PNG),
        ),
    ]

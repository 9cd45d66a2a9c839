"""The plots of a live controller's page: the last hour (or ``window_s``) of its run store,
response time per instance with R_th and the policy's actions marked, throughput, and CPU
and bottleneck utilisation; the same figures as a run report's, over a sliding window. Beside
them, what the users felt per request over the last five minutes and the last hour
(``users_section``: the run report's figures, ``quell.report.felt``, over HAProxy's log)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from quell.report.felt import felt, felt_html
from quell.report.plots import plot_response_time, plot_throughput, plot_utilisation
from quell.store.run import RunStore

LIVE_PLOTS = ("response_time.png", "throughput.png", "utilisation.png")
"""The file names ``write_live_plots`` writes, in page order."""


def write_live_plots(
    run_dir: Path, out_dir: Path, target_rt_s: float | None, window_s: float = 3600.0
) -> list[Path]:
    """Write ``LIVE_PLOTS`` into ``out_dir`` from the last ``window_s`` of the run store in
    ``run_dir`` (read while the controller writes it); returns their paths."""
    store = RunStore.open(run_dir)
    try:
        since = store.last_time_s() - window_s
        observations = store.observations(since_s=since)
        decisions = [(t, a) for t, _, _, a in store.decisions() if t >= since]
    finally:
        store.close()
    ids = sorted({o.instance_id for o in observations})
    out_dir.mkdir(parents=True, exist_ok=True)
    rt, tput, util = (out_dir / name for name in LIVE_PLOTS)
    return [
        plot_response_time(observations, ids, (), (), rt, target_rt_s, decisions),
        plot_throughput(observations, ids, (), (), tput),
        plot_utilisation(observations, ids, (), (), util),
    ]


USER_SPANS: tuple[tuple[str, float], ...] = (("last 5 min", 300.0), ("last hour", 3600.0))
"""The spans of the page's table of what users felt: (label, seconds)."""

Span = tuple[str, float | None, NDArray[Any], NDArray[Any]]
"""(label, the end of its first interval or ``None``, active times, answered flags)."""


def users_section(
    spans: Sequence[Span], now_s: float, timeout_s: float, target_rt_s: float | None
) -> str:
    """The page's table: per span what its users felt (``felt``), the span labelled with
    what it covers when the controller has been up for less."""
    rows = []
    for label, first_s, rt, answered in spans:
        if first_s is not None:
            label += f" (from {first_s:.0f} s, {now_s - first_s:.0f} s)"
        rows.append(([label], felt(rt, answered, timeout_s, target_rt_s).to_dict()))
    return "<h2>What users felt</h2>" + felt_html(rows, ("span",), target_rt_s, timeout_s)

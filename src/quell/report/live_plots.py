"""The plots of a live controller's page: the last hour (or ``window_s``) of its run store,
response time per instance with R_th and the policy's actions marked, throughput, and CPU
and bottleneck utilisation; the same figures as a run report's, over a sliding window."""

from __future__ import annotations

from pathlib import Path

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

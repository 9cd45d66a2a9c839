"""One page per comparison: the policies side by side, one column each, over the same time axis:
response times (the request-weighted fleet mean and the worst instance's mean per interval, with
R_th), the instances serving, and the weights in force (each instance's share of the weights in
a small fleet; in a large one, how many instances have a weight above 0); under it, per policy
and phase, what the users felt per request (``quell.report.felt``)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quell.report.felt import felt_html, policy_rows
from quell.report.plots import save_figure
from quell.store.run import RunStore

COMPARE_PNG = "comparison.png"
COMPARE_HTML = "comparison.html"
PER_INSTANCE_WEIGHTS = 8
"""Up to this many instances in a run, each instance's weight share is drawn."""


def _series(run_dir: Path) -> dict[str, Any]:
    """Per interval: fleet mean RT, worst instance mean RT, instances reporting; the weights
    in force after each decision."""
    with RunStore.open(run_dir) as store:
        cols = store.observation_columns("oldest_in_flight_seconds")
        decisions = store.decisions()
    t = np.asarray(cols["time_s"], dtype=float)
    req = np.asarray(cols["requests"], dtype=float)
    rt = np.asarray(cols["mean_rt_s"], dtype=float)
    times = np.unique(t)
    mean, worst, count = [], [], []
    for x in times.tolist():
        at = t == x
        ok = at & (req > 0) & np.isfinite(rt)
        w = req[ok].sum()
        mean.append(float((rt[ok] * req[ok]).sum() / w) if w else np.nan)
        worst.append(float(rt[ok].max()) if ok.any() else np.nan)
        count.append(int(at.sum()))
    weights: dict[str, int] = {}
    w_times: list[float] = []
    w_states: list[dict[str, int]] = []
    for dt, _, _, actions in decisions:
        changed = False
        for a in actions:
            if a.get("type") == "SetWeight":
                weights[str(a["instance_id"])] = int(a["weight"])
                changed = True
            elif a.get("type") == "RemoveInstance":
                weights.pop(str(a["instance_id"]), None)
                changed = True
        if changed:
            w_times.append(float(dt))
            w_states.append(dict(weights))
    return {
        "times": times,
        "mean_ms": np.asarray(mean) * 1e3,
        "worst_ms": np.asarray(worst) * 1e3,
        "count": np.asarray(count),
        "w_times": w_times,
        "w_states": w_states,
        "ids": sorted({str(i) for i in cols["instance"].tolist()}),
    }


def _weights(ax: Any, s: dict[str, Any]) -> None:
    ids = sorted({i for st in s["w_states"] for i in st})
    if not ids:  # no weight set, or only instances added and removed without one
        ax.text(0.5, 0.5, "no weight set", ha="center", va="center", transform=ax.transAxes)
        return
    if len(ids) <= PER_INSTANCE_WEIGHTS:
        for k, iid in enumerate(ids):
            share = []
            for st in s["w_states"]:
                total = sum(st.values())
                share.append(100.0 * st.get(iid, 0) / total if total else np.nan)
            ax.plot(s["w_times"], share, drawstyle="steps-post", color=f"C{k}", label=iid)
        ax.set_ylabel("weight share (%)")
        ax.legend(loc="upper left", fontsize=7)
    else:
        ax.plot(
            s["w_times"],
            [sum(1 for v in st.values() if v > 0) for st in s["w_states"]],
            drawstyle="steps-post",
        )
        ax.set_ylabel("instances weighted > 0")


def write_comparison_page(
    title: str,
    runs: Sequence[tuple[str, Path]],
    target_rt_s: float | None,
    out_dir: Path,
    users: Mapping[str, Mapping[str, Mapping[str, Any]] | None] | None = None,
    timeout_s: float | None = None,
) -> Path:
    """``out_dir``/comparison.png (a column per policy) and comparison.html around it, with
    ``users`` (policy → phase → ``Felt.to_dict()``, counted at ``timeout_s``) in a table."""
    from matplotlib.figure import Figure

    data = [(name, _series(d)) for name, d in runs]
    n = max(len(data), 1)
    fig = Figure(figsize=(4.2 * n, 9.0), layout="constrained")
    axes = fig.subplots(3, n, sharex=True, squeeze=False)
    rt_top = max(
        [float(np.nanmax(s["worst_ms"])) for _, s in data if np.isfinite(s["worst_ms"]).any()]
        + [0.0]
    )
    cap = 3.0 * target_rt_s * 1e3 if target_rt_s else rt_top
    for col, (name, s) in enumerate(data):
        rt_ax, n_ax, w_ax = axes[0][col], axes[1][col], axes[2][col]
        rt_ax.plot(s["times"], s["mean_ms"], drawstyle="steps-pre", label="fleet mean")
        rt_ax.plot(s["times"], s["worst_ms"], drawstyle="steps-pre", label="worst instance")
        if target_rt_s is not None:
            rt_ax.axhline(target_rt_s * 1e3, color="k", linestyle="--", label="R_th")
        rt_ax.set_ylim(0, max(min(rt_top, cap), 1.0) * 1.05)
        rt_ax.set_title(name)
        rt_ax.legend(loc="upper left", fontsize=7)
        n_ax.plot(s["times"], s["count"], drawstyle="steps-pre", color="C2")
        n_ax.set_ylim(bottom=0)
        _weights(w_ax, s)
        w_ax.set_xlabel("time since start (s)")
        for ax in (rt_ax, n_ax, w_ax):
            ax.grid(True, alpha=0.3)
        if col == 0:
            rt_ax.set_ylabel("mean response time (ms)")
            n_ax.set_ylabel("instances reporting")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out_dir / COMPARE_PNG)
    rows = "".join(
        f"<li>{html.escape(name)}: <code>{html.escape(str(d))}</code></li>" for name, d in runs
    )
    rows_felt = policy_rows(users or {})
    felt = felt_html(rows_felt, ("policy", "phase"), target_rt_s, timeout_s) if rows_felt else ""
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        "<p>Each column one policy on the same load and neighbours: response times per "
        "interval (the fleet's request-weighted mean and the worst instance's mean, R_th "
        "dashed; the axis stops at 3 × R_th), instances reporting, and the weights in force.</p>"
        f"<img src='{COMPARE_PNG}' style='max-width:100%'>"
        f"{felt}"
        f"<h2>Runs</h2><ul>{rows}</ul></body></html>\n"
    )
    path = out_dir / COMPARE_HTML
    path.write_text(page, encoding="utf-8")
    return path

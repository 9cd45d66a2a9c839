"""The per-phase summary of a run: the JSON that ``lab run --json`` and ``sim run --json`` print.

Shape: ``{"run_dir", "environment", "scenario", "rt_source", "cycle_errors", "complete",
"data_end_s", "target_rt_s", "timeout_s", "phases": [{"name", "start_s", "end_s", "observed_s",
"steal_pct", "instances": {ID: {"requests", "errors", "throughput_rps", "mean_rt_ms", "p95_rt_ms",
"cpu_util", "util_pct"}}, "users"}]}``.

``users`` is what the users felt per request over every request sent in the phase, whichever
instance it went to and whether it was answered or not (``quell.report.felt``: the share above
R_th and above 2 × R_th, the p99, an unanswered request counted at the scenario's
``workload.timeout_s``); ``None`` in a run without per-request records.

Response times come from the client-side per-request log when the run has one, else from the
per-interval observations (weighted by requests; p95 is then the request-weighted mean of the
interval p95s, an approximation the summary flags with ``"rt_source": "intervals"``).

A run is ``complete`` when its store records ``finished_at``. A run killed mid-way has data only
up to ``data_end_s`` (the end of its last recorded interval): each phase's ``observed_s`` is the
part of the phase that data covers, and throughput is requests per observed second (``None``
for a phase the run never reached). ``steal_pct`` is the machine's mean CPU steal over the phase
(``None`` where the environment measures none, as the simulator)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quell.report.felt import phase_felt
from quell.store.run import RunStore

INSTANCE_METRICS: tuple[str, ...] = (
    "requests",
    "errors",
    "throughput_rps",
    "mean_rt_ms",
    "p95_rt_ms",
    "cpu_util",
    "util_pct",
)


def _clean(x: float | None, digits: int = 3) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits)


def _ratio(total: float | None, weight: float | None) -> float | None:
    return total / weight if total is not None and weight else None


def _by_server(req: dict[str, NDArray[Any]]) -> dict[str, NDArray[np.intp]]:
    """Indices of the request records of each answering instance, grouped once."""
    servers, codes = np.unique(req["server"].astype(str), return_inverse=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(servers.size + 1))
    return {str(s): order[bounds[k] : bounds[k + 1]] for k, s in enumerate(servers)}


def run_limits(meta: dict[str, Any]) -> tuple[float | None, float | None]:
    """R_th (``target.mean_rt_s``) and the workload's timeout of the scenario a run recorded
    in its meta; ``None`` for what it has not (no target, or a store without its scenario)."""
    scn = meta.get("scenario_json")
    if not isinstance(scn, dict):
        return None, None
    target = scn.get("target")
    workload = scn.get("workload")
    rt = target.get("mean_rt_s") if isinstance(target, dict) else None
    timeout = workload.get("timeout_s") if isinstance(workload, dict) else None
    num = (int, float)
    return (
        float(rt) if isinstance(rt, num) else None,
        float(timeout) if isinstance(timeout, num) else None,
    )


def summarize(store: RunStore) -> dict[str, Any]:
    meta = store.meta()
    target_s, timeout_s = run_limits(meta)
    phases = meta.get("phases", [])
    ids = store.instance_ids()
    req = store.request_arrays() if store.request_count() else None
    groups = _by_server(req) if req is not None else {}
    empty = np.empty(0, dtype=np.intp)
    complete = "finished_at" in meta
    data_end_s = store.last_time_s()
    out_phases = []
    for name, start, end in phases:
        observed_end = end if complete else min(end, data_end_s)
        length = max(observed_end - start, 0.0)
        agg = store.interval_aggregates(start, end)
        insts: dict[str, Any] = {}
        for iid in ids:
            a = agg.get(iid, {})
            entry: dict[str, Any] = {
                "cpu_util": _clean(a.get("cpu_util")),
                "util_pct": _clean(a.get("util_pct"), 2),
            }
            if req is not None:
                idx = groups.get(iid, empty)
                send = req["send_s"][idx]
                status = req["status"][idx]
                sel = (send >= start) & (send < end)
                ok = sel & (status >= 200) & (status < 400)
                lat = req["latency_s"][idx][ok]
                lat = lat[np.isfinite(lat)]
                n = int(ok.sum())
                entry["requests"] = n
                entry["errors"] = int((sel & ~ok).sum())
                entry["mean_rt_ms"] = _clean(float(lat.mean()) * 1e3) if lat.size else None
                entry["p95_rt_ms"] = (
                    _clean(float(np.percentile(lat, 95)) * 1e3) if lat.size else None
                )
            else:
                n = int(a.get("requests") or 0)
                entry["requests"] = n
                entry["errors"] = int(a.get("errors") or 0)
                mean_s = _ratio(a.get("rt_sum"), a.get("rt_weight"))
                p95_s = _ratio(a.get("p95_sum"), a.get("p95_weight"))
                entry["mean_rt_ms"] = _clean(mean_s * 1e3) if mean_s is not None else None
                entry["p95_rt_ms"] = _clean(p95_s * 1e3) if p95_s is not None else None
            entry["throughput_rps"] = _clean(n / length) if length > 0 else None
            insts[iid] = {k: entry[k] for k in INSTANCE_METRICS}
        out_phases.append(
            {
                "name": name,
                "start_s": start,
                "end_s": end,
                "observed_s": _clean(length),
                "steal_pct": _clean(store.steal_pct(start, end)),
                "instances": insts,
                "users": (
                    phase_felt(req, start, end, timeout_s, target_s).to_dict()
                    if req is not None and timeout_s is not None
                    else None
                ),
            }
        )
    return {
        "run_dir": str(store.path),
        "environment": meta.get("environment"),
        "scenario": meta.get("scenario"),
        "rt_source": "requests" if req is not None else "intervals",
        "cycle_errors": meta.get("cycle_errors", 0),
        "complete": complete,
        "data_end_s": _clean(data_end_s),
        "target_rt_s": target_s,
        "timeout_s": timeout_s,
        "phases": out_phases,
    }

"""The per-phase summary of a run: the JSON that ``lab run --json`` and ``sim run --json`` print.

Shape: ``{"run_dir", "environment", "scenario", "rt_source", "cycle_errors", "complete",
"data_end_s", "phases": [{"name", "start_s", "end_s", "observed_s", "instances": {ID:
{"requests", "errors", "throughput_rps", "mean_rt_ms", "p95_rt_ms", "cpu_util",
"util_pct"}}}]}``.

Response times come from the client-side per-request log when the run has one, else from the
per-interval observations (weighted by requests; p95 is then the request-weighted mean of the
interval p95s, an approximation the summary flags with ``"rt_source": "intervals"``).

A run is ``complete`` when its store records ``finished_at``. A run killed mid-way has data only
up to ``data_end_s`` (the end of its last recorded interval): each phase's ``observed_s`` is the
part of the phase that data covers, and throughput is requests per observed second (``None``
for a phase the run never reached)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from quell.core.observation import Observation
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


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _weighted(pairs: list[tuple[int, float | None]]) -> float | None:
    """Request-weighted mean over the intervals that measured a value (``None`` ones are left
    out of both the sum and the weight, so an unmeasured interval never counts as 0 s)."""
    known = [(k, v) for k, v in pairs if k > 0 and v is not None]
    total = sum(k for k, _ in known)
    return sum(k * v for k, v in known) / total if total else None


def _in_phase(obs: Observation, start: float, end: float) -> bool:
    mid = obs.time_s - obs.interval_s / 2.0
    return start <= mid < end


def summarize(store: RunStore) -> dict[str, Any]:
    meta = store.meta()
    phases = meta.get("phases", [])
    observations = store.observations()
    ids = store.instance_ids()
    req = store.request_arrays() if store.request_count() else None
    complete = "finished_at" in meta
    data_end_s = max((o.time_s for o in observations), default=0.0)
    out_phases = []
    for name, start, end in phases:
        observed_end = end if complete else min(end, data_end_s)
        length = max(observed_end - start, 0.0)
        insts: dict[str, Any] = {}
        for iid in ids:
            obs = [o for o in observations if o.instance_id == iid and _in_phase(o, start, end)]
            entry: dict[str, Any] = {
                "cpu_util": _clean(_mean([o.cpu_util for o in obs])),
                "util_pct": _clean(_mean([o.util_pct for o in obs]), 2),
            }
            if req is not None:
                sel = (req["server"] == iid) & (req["send_s"] >= start) & (req["send_s"] < end)
                ok = sel & (req["status"] >= 200) & (req["status"] < 400)
                lat = req["latency_s"][ok]
                lat = lat[np.isfinite(lat)]
                n = int(ok.sum())
                entry["requests"] = n
                entry["errors"] = int((sel & ~ok).sum())
                entry["mean_rt_ms"] = _clean(float(lat.mean()) * 1e3) if lat.size else None
                entry["p95_rt_ms"] = (
                    _clean(float(np.percentile(lat, 95)) * 1e3) if lat.size else None
                )
            else:
                n = sum(o.requests for o in obs)
                entry["requests"] = n
                entry["errors"] = sum(o.errors for o in obs)
                mean_s = _weighted([(o.requests, o.mean_rt_seconds) for o in obs])
                p95_s = _weighted([(o.requests, o.p95_rt_seconds) for o in obs])
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
                "instances": insts,
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
        "phases": out_phases,
    }

"""The per-phase summary of a run: the JSON that ``lab run --json`` and ``sim run --json`` print.

Shape: ``{"run_dir", "environment", "phases": [{"name", "start_s", "end_s", "instances": {ID:
{"requests", "throughput_rps", "mean_rt_ms", "p95_rt_ms", "cpu_util", "util_pct"}}}]}``.
Response times come from the client-side per-request log when the run has one, else from the
per-interval observations (weighted by requests; p95 is then the request-weighted mean of the
interval p95s, an approximation the summary flags with ``"rt_source": "intervals"``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from quell.core.observation import Observation
from quell.store.run import RunStore


def _clean(x: float | None, digits: int = 3) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits)


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _in_phase(obs: Observation, start: float, end: float) -> bool:
    mid = obs.time_s - obs.interval_s / 2.0
    return start <= mid < end


def summarize(store: RunStore) -> dict[str, Any]:
    meta = store.meta()
    phases = meta.get("phases", [])
    observations = store.observations()
    ids = store.instance_ids()
    req = store.request_arrays() if store.request_count() else None
    out_phases = []
    for name, start, end in phases:
        length = end - start
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
                entry["requests"] = int(ok.sum())
                entry["errors"] = int((sel & ~ok).sum())
                entry["throughput_rps"] = _clean(ok.sum() / length if length > 0 else 0.0)
                entry["mean_rt_ms"] = _clean(lat.mean() * 1e3) if lat.size else None
                entry["p95_rt_ms"] = _clean(np.percentile(lat, 95) * 1e3) if lat.size else None
            else:
                n = sum(o.requests for o in obs)
                w = [(o.requests, o.mean_rt_seconds, o.p95_rt_seconds) for o in obs if o.requests]
                entry["requests"] = n
                entry["errors"] = sum(o.errors for o in obs)
                entry["throughput_rps"] = _clean(n / length if length > 0 else 0.0)
                entry["mean_rt_ms"] = (
                    _clean(sum(k * (m or 0.0) for k, m, _ in w) / n * 1e3) if n else None
                )
                entry["p95_rt_ms"] = (
                    _clean(sum(k * (p or 0.0) for k, _, p in w) / n * 1e3) if n else None
                )
            insts[iid] = {
                k: entry[k]
                for k in (
                    "requests",
                    "errors",
                    "throughput_rps",
                    "mean_rt_ms",
                    "p95_rt_ms",
                    "cpu_util",
                    "util_pct",
                )
            }
        out_phases.append({"name": name, "start_s": start, "end_s": end, "instances": insts})
    return {
        "run_dir": str(store.path),
        "environment": meta.get("environment"),
        "scenario": meta.get("scenario"),
        "rt_source": "requests" if req is not None else "intervals",
        "cycle_errors": meta.get("cycle_errors", 0),
        "phases": out_phases,
    }

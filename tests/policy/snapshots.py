"""Hand-built snapshots and contexts for policy tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quell.core.observation import Observation, Snapshot
from quell.models.bundle import BundleMeta, build_bundle
from quell.policy.context import PolicyContext, ScalingLimits
from quell.probe import ProbeTable, TrainingLevel

INTERVAL_S = 10.0


def snap(t: float, **instances: Mapping[str, Any]) -> Snapshot:
    """A snapshot at ``t`` with one observation per keyword: ``i1={"mean_rt_seconds": 0.2}``.

    ``probe`` in an instance's mapping goes to ``extra["probe_rt_seconds"]``."""
    obs = {}
    for iid, fields in instances.items():
        f = dict(fields)
        probe = f.pop("probe", None)
        extra = {"probe_rt_seconds": probe} if probe is not None else {}
        obs[iid] = Observation(time_s=t, instance_id=iid, interval_s=INTERVAL_S, extra=extra, **f)
    return Snapshot(time_s=t, environment="test", instances=obs)


def context(
    initial: Mapping[str, str] | None = None,
    hosts: tuple[str, ...] | None = ("h2", "h3"),
    target_rt_s: float | None = 0.2,
    min_instances: int = 1,
    max_instances: int | None = None,
    lb_algorithm: str = "roundrobin",
    probe_period_s: float | None = INTERVAL_S,
) -> PolicyContext:
    scaling = (
        None
        if hosts is None
        else ScalingLimits(
            hosts=list(hosts), min_instances=min_instances, max_instances=max_instances
        )
    )
    return PolicyContext(
        interval_s=INTERVAL_S,
        target_rt_s=target_rt_s,
        scaling=scaling,
        initial_instances=dict(initial or {"i1": "h1"}),
        lb_algorithm=lb_algorithm,
        probe_period_s=probe_period_s,
    )


def flat_table(r_iso_s: float = 0.1) -> ProbeTable:
    """R_iso = ``r_iso_s`` at every utilisation, so SF = probe / r_iso_s - 1."""
    levels = [TrainingLevel(u, (r_iso_s, r_iso_s * 1.001, r_iso_s * 0.999)) for u in (10.0, 90.0)]
    return ProbeTable().fit(levels)


def probe_for(sf: float, r_iso_s: float = 0.1) -> float:
    """The probe time that gives severity factor ``sf`` on ``flat_table(r_iso_s)``."""
    return r_iso_s * (1.0 + sf)


def write_bundle(path: Path, r_iso_s: float = 0.1, workload: str = "file-100k") -> Path:
    """A small valid PRIMA model bundle at ``path``: the flat probe table, an RTM that rises
    with U and SF (R = 50 ms x (1 + U/50) x (1 + SF)) and an IM that rises with U_total."""
    meta = BundleMeta(
        workload=workload,
        instance_type="test",
        environment="sim",
        created="2024-01-01T00:00:00Z",
        probe_period_s=INTERVAL_S,
        probe_size_bytes=1_000_000,
    )
    rtm = [
        (u, s, 0.05 * (1 + u / 50) * (1 + s)) for u in (10.0, 50.0, 90.0) for s in (0.0, 1.0, 2.0)
    ]
    im = [(10.0, 0.0), (50.0, 0.5), (90.0, 2.0), (100.0, 3.0)]
    build_bundle(meta, flat_table(r_iso_s), rtm, im).save(path)
    return path

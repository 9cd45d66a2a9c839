"""Hand-built snapshots and contexts for policy tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quell.core.observation import Observation, Snapshot
from quell.policy.context import PolicyContext
from quell.scenario.model import Scaling

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
        else Scaling(hosts=list(hosts), min_instances=min_instances, max_instances=max_instances)
    )
    return PolicyContext(
        interval_s=INTERVAL_S,
        target_rt_s=target_rt_s,
        scaling=scaling,
        initial_instances=dict(initial or {"i1": "h1"}),
        lb_algorithm=lb_algorithm,
        probe_period_s=probe_period_s,
    )

"""Synthetic PRIMA bundles whose capacities are known in closed form.

RTM is a plane, R = A + B·U + C·SF, and IM is SF = K·max(0, U_total − X0), so the effective
capacity solves A + B·U + C·K·(U + U_int − X0) = R_th exactly (where SF > 0)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from quell.models.bundle import BundleMeta, ModelBundle, build_bundle
from quell.probe.table import ProbeTable, TrainingLevel

A, B, C = 0.005, 0.0004, 0.004  # seconds, seconds per %, seconds per unit SF
K, X0 = 0.1, 40.0  # SF per % above the knee, knee in % of the link
R_ISO0, R_ISO_SLOPE = 0.080, 0.0004  # probe time in isolation: 80 ms + 0.4 ms per % of U


def rt(u: float, sf: float) -> float:
    return A + B * u + C * sf


def sf_of_total(u_total: float) -> float:
    return K * max(0.0, u_total - X0)


def capacity(u_int: float, target_rt_s: float) -> float:
    """Closed-form U_max for a neighbour load ``u_int`` (valid where U + U_int ≥ X0)."""
    return (target_rt_s - A - C * K * (u_int - X0)) / (B + C * K)


def probe_table() -> ProbeTable:
    levels = [
        TrainingLevel(u, tuple(R_ISO0 + R_ISO_SLOPE * u + d for d in (-1e-4, 0.0, 1e-4)))
        for u in range(10, 100, 10)
    ]
    return ProbeTable().fit(levels)


def meta(workload: str = "synthetic") -> BundleMeta:
    return BundleMeta(
        workload=workload,
        instance_type="test",
        environment="sim",
        created=dt.datetime(2026, 1, 1, tzinfo=dt.UTC).isoformat(),
        probe_period_s=10.0,
        probe_size_bytes=1_000_000,
    )


def linear_bundle(workload: str = "synthetic") -> ModelBundle:
    us = np.arange(0.0, 101.0, 10.0)
    sfs = np.arange(0.0, 8.01, 1.0)
    rtm = [(float(u), float(s), rt(u, s)) for u in us for s in sfs]
    totals = np.arange(0.0, 121.0, 5.0)
    im = [(float(x), sf_of_total(x)) for x in totals]
    return build_bundle(meta(workload), probe_table(), rtm, im, im_resolution_pct=5.0)


def write_linear_bundle(path: Path, workload: str = "synthetic") -> Path:
    linear_bundle(workload).save(path)
    return path


SHIFT = 0.5
"""Level bundle: the hinge moves right by SHIFT per % of the instance's own U, as when SF
depends on how U_total splits between the instance and its neighbours."""


def level_sf(u: float, u_total: float) -> float:
    return K * max(0.0, u_total - X0 - SHIFT * u)


def level_capacity(u_int: float, target_rt_s: float) -> float:
    """Closed-form U_max of the level bundle (where SF > 0 at the capacity)."""
    return (target_rt_s - A - C * K * (u_int - X0)) / (B + C * K * (1.0 - SHIFT))


def level_bundle(workload: str = "synthetic") -> ModelBundle:
    us = np.arange(0.0, 101.0, 10.0)
    sfs = np.arange(0.0, 8.01, 1.0)
    rtm = [(float(u), float(s), rt(u, s)) for u in us for s in sfs]
    im = [
        (float(x), level_sf(u, x), float(u), float(u))
        for u in np.arange(0.0, 101.0, 20.0)
        for x in np.arange(u, 161.0, 5.0)
    ]
    return build_bundle(meta(workload), probe_table(), rtm, im, im_resolution_pct=5.0)

"""Checks on run summaries that every environment must pass for the same scenario file."""

from __future__ import annotations

from typing import Any


def phase_rt(summary: dict[str, Any], phase: str, instance: str) -> float:
    p = next(p for p in summary["phases"] if p["name"] == phase)
    rt = p["instances"][instance]["mean_rt_ms"]
    assert rt is not None, f"{instance} answered no request in {phase}"
    return float(rt)


def assert_cohosted_instance_slows_alone(summary: dict[str, Any]) -> tuple[float, float]:
    """interference-smoke: i2's mean RT at least doubles while iperf3 floods its host's link;
    i1, on another host, stays within ±25 % of its own baseline. Returns (i2 ratio, i1 change)."""
    base_i1, base_i2 = phase_rt(summary, "baseline", "i1"), phase_rt(summary, "baseline", "i2")
    noisy_i1 = phase_rt(summary, "interference", "i1")
    noisy_i2 = phase_rt(summary, "interference", "i2")
    assert noisy_i2 >= 2.0 * base_i2, (summary["environment"], base_i2, noisy_i2)
    assert abs(noisy_i1 - base_i1) <= 0.25 * base_i1, (summary["environment"], base_i1, noisy_i1)
    return noisy_i2 / base_i2, noisy_i1 / base_i1 - 1.0

"""Sweep one apache setting of a scenario in the simulator, with and without its antagonists:
the mean response time and throughput at each value, as IC2's Section 3.2 measures them (its
Fig. 2). ``scenarios/ic2/sweep.py`` prints the sweeps of ``scenarios/ic2/sim-sweep.yaml``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from quell.core.observation import SERVER_SETTING_KEYS
from quell.scenario.model import ApacheSettings, Scenario
from quell.sim.environment import SimEnvironment


@dataclass(frozen=True)
class SweepPoint:
    """One run: the setting's value, whether the antagonists ran, and what the clients saw
    after the warm-up: requests completed, their throughput, and the mean response time by
    Little's law, ∫ requests in the instances dt / requests completed, which counts the time of
    requests still waiting at the end (a user that never gets a worker) as the mean of the
    completed ones cannot."""

    value: float
    interference: bool
    requests: int
    throughput_rps: float
    mean_rt_s: float
    completed_mean_rt_s: float


def with_setting(scenario: Scenario, setting: str, value: float, interference: bool) -> Scenario:
    """``scenario`` with ``setting`` (a ``SERVER_SETTING_KEYS`` name) at ``value`` on every
    apache instance, and without its events (so without antagonists) unless ``interference``."""
    if setting not in SERVER_SETTING_KEYS:
        raise ValueError(f"unknown setting {setting!r} (known: {', '.join(SERVER_SETTING_KEYS)})")
    instances = [
        inst.model_copy(
            update={
                "apache": ApacheSettings.model_validate(
                    (inst.apache or ApacheSettings()).model_dump() | {setting: value}
                )
            }
        )
        if inst.server == "apache"
        else inst
        for inst in scenario.instances
    ]
    events = scenario.events if interference else []
    return scenario.model_copy(update={"instances": instances, "events": events})


def run_point(scenario: Scenario, warmup_s: float, base_dir: Path = Path(".")) -> SweepPoint:
    """Run ``scenario`` in the simulator (its events at their times) and measure it after
    ``warmup_s`` (``value`` and ``interference`` of the point left 0 and False)."""
    env = SimEnvironment(scenario, base_dir)
    events = sorted(scenario.events, key=lambda e: e.at_s)
    n, rt_sum, area0 = 0, 0.0, 0.0
    t, step = 0.0, scenario.interval_s
    try:
        while t < scenario.duration_s:
            while events and events[0].at_s <= t:
                env.trigger(events.pop(0))
            t = min(t + step, scenario.duration_s)
            env.clock.sleep_until(t)
            snap = env.observe()
            if t <= warmup_s:
                area0 = float(env.core_.i_area_.sum())
                continue
            for obs in snap.instances.values():
                if obs.mean_rt_seconds is not None:
                    n += obs.requests
                    rt_sum += obs.requests * obs.mean_rt_seconds
        area = float(env.core_.i_area_.sum()) - area0
    finally:
        env.close()
    nan = float("nan")
    span = scenario.duration_s - warmup_s
    return SweepPoint(0.0, False, n, n / span, area / n if n else nan, rt_sum / n if n else nan)


def sweep(
    scenario: Scenario,
    setting: str,
    values: Sequence[float],
    warmup_s: float,
    base_dir: Path = Path("."),
) -> list[SweepPoint]:
    """Each value of ``setting`` without interference, then each with the scenario's events."""
    out = []
    for interference in (False, True):
        for v in values:
            point = run_point(with_setting(scenario, setting, v, interference), warmup_s, base_dir)
            out.append(replace(point, value=v, interference=interference))
    return out

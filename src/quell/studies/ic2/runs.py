"""Runs of the synthetic server (``synthetic``), with IC2 off or on, and a bootstrap ``Runner``
over them: the closed loop the lab and the simulator will run, in a few milliseconds.

With IC2 on, every interval the policy decides on the server's observation and each
``ReconfigureServer`` it returns is carried out on the server at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from quell.core.action import Decision, ReconfigureServer
from quell.core.observation import Observation, Snapshot
from quell.core.rng import component_rng
from quell.detect.dataset import Dataset, Phase, Runner, concat, from_run
from quell.detect.evaluate import Switch
from quell.detect.labels import Timeline
from quell.detect.tree import CostSensitiveTree
from quell.policy.ic2 import Ic2Params, Ic2Policy
from quell.policy.ic2.update import Settings
from quell.studies.ic2.synthetic import (
    ServerModel,
    SyntheticServer,
    ambient_timeline,
    periodic_timeline,
)

INSTANCE = "web1"
INTERVAL_S = 5.0
"""The paper's measurement period."""
BASELINE = Settings(max_request_workers=64, keepalive_timeout_s=5.0, php_max_children=16)
TRAIN_INTENSITIES = (0.3, 0.6, 1.0, 0.45, 0.8)
"""Training uses cache antagonists only, of varying intensity (the paper: Dcopy only)."""


@dataclass
class SyntheticRun:
    timeline: Timeline
    observations: list[Observation] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    switches: list[Switch] = field(default_factory=list)
    """When IC2 switched the server's configuration (time, to the interference one)."""


def ic2_params(**overrides: object) -> Ic2Params:
    """IC2's parameters for the synthetic server (its baseline, 8 threads per child)."""
    base: dict[str, object] = {
        "detector": "(in memory)",
        **BASELINE.as_dict(),
        "threads_per_child": 8,
    }
    return Ic2Params.model_validate({**base, **overrides})


def run_synthetic(
    seed: int,
    name: str,
    timeline: Timeline,
    duration_s: float,
    policy: Ic2Policy | None = None,
    model: ServerModel | None = None,
    ambient: bool = True,
    graceful: bool = True,
) -> SyntheticRun:
    """One run: the server under ``timeline`` (and, if ``ambient``, unlabelled neighbours of
    its own), IC2 off (``policy`` None) or on. Streams are named by ``name``."""
    extra = ambient_timeline(component_rng(seed, f"ic2/ambient/{name}"), duration_s)
    server = SyntheticServer(
        component_rng(seed, f"ic2/server/{name}"),
        timeline,
        BASELINE,
        extra if ambient else None,
        model,
        INSTANCE,
        graceful,
    )
    out = SyntheticRun(timeline)
    for k in range(1, int(duration_s / INTERVAL_S) + 1):
        t = k * INTERVAL_S
        obs = server.observe(t, INTERVAL_S)
        out.observations.append(obs)
        if policy is None:
            continue
        decision = policy.decide(Snapshot(t, "synthetic", {INSTANCE: obs}))
        out.decisions.append(decision)
        for a in decision.actions:
            if isinstance(a, ReconfigureServer):
                now = server.settings_
                server.reconfigure(replace(now, **dict(a.settings)), t)  # type: ignore[arg-type]
                target = policy.instances_[INSTANCE].chain.config_
                out.switches.append((t, target == "I2"))
    return out


def training_timeline(duration_s: float, run: int) -> Timeline:
    """A phase's k-th run: cache antagonists, 240 s on and off, intensities rotated per run."""
    k = run % len(TRAIN_INTENSITIES)
    return periodic_timeline(
        duration_s, intensities=TRAIN_INTENSITIES[k:] + TRAIN_INTENSITIES[:k], kinds=("cache",)
    )


def synthetic_runner(
    seed: int,
    runs: int,
    duration_s: float,
    features: tuple[str, ...],
    params: Ic2Params | None = None,
) -> Runner:
    """A bootstrap ``Runner``: ``runs`` runs of ``duration_s`` per phase, IC2 on with the tree
    given (phases II and III) with ``params`` (default ``ic2_params()``)."""
    p = params or ic2_params()

    def run(phase: Phase, tree: CostSensitiveTree | None) -> Dataset:
        parts = []
        for r in range(runs):
            timeline = training_timeline(duration_s, r)
            policy = None if tree is None else Ic2Policy(tree, p)
            done = run_synthetic(seed, f"phase-{phase}/{r}", timeline, duration_s, policy)
            parts.append(from_run(done.observations, timeline, features, run=r))
        on = "off" if tree is None else "on"
        return concat(parts, f"synthetic, phase {phase}, IC2 {on}: {runs} x {duration_s:g} s")

    return run


__all__ = [
    "BASELINE",
    "INSTANCE",
    "INTERVAL_S",
    "SyntheticRun",
    "ic2_params",
    "run_synthetic",
    "synthetic_runner",
    "training_timeline",
]

"""One check every registered policy must pass (in the spirit of river's estimator checks).

A small fake environment serves a scripted run: calm, interference on one instance, a surge
on all of them, instances that report nothing, one that vanishes unannounced, a quiet end and
an empty snapshot. It boots what a policy adds, drains what it removes and keeps the weights it
sets. For every decision: ``decide`` does not raise; actions name only instances of the snapshot
or ones the same decision adds; weights are in 0..256; new ids are fresh and well formed; a
decision with actions says why; ``detail`` is strict JSON; and the same run twice decides the
same (no clocks, no global randomness).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quell.core.action import AddInstance, Decision, RemoveInstance, SetWeight
from quell.core.environment import Policy
from quell.core.observation import Observation, Snapshot
from quell.policy import POLICIES, PolicyFactory, policy_class
from quell.policy.context import PolicyContext, ScalingLimits
from tests.detect.trees import write_detector
from tests.policy.snapshots import INTERVAL_S, write_bundle

ID = re.compile(r"^[a-z][a-z0-9_]{0,11}$")
BOOT_TICKS = 3
MODEL = "model.json"
DETECTOR = "detector.json"
PARAMS: dict[str, dict[str, Any]] = {
    "lsf": {"model": MODEL},
    "prima": {"model": MODEL},
    "ic2": {
        "detector": DETECTOR,
        "max_request_workers": 32,
        "keepalive_timeout_s": 5,
        "php_max_children": 16,
        "threads_per_child": 8,
    },
}
"""Parameters a policy cannot be built without; ``MODEL`` is a small valid bundle in base_dir,
``DETECTOR`` a detector whose verdict follows the response time (``tests.detect.trees``)."""
PARAMS["defence"] = {"prima": PARAMS["prima"], "ic2": PARAMS["ic2"]}
ACTS = {"rr", "lc", "lsf", "lr", "threshold", "prima", "ic2", "target", "defence"}
"""Policies the scripted run must move to at least one action."""


class FakeEnvironment:
    """Load ``load_pct`` (in % of one instance) split by weight; ``slow`` instances suffer
    interference (3x RT, SF 1, 1.5x CPU); ``blank`` instances report nothing measured."""

    def __init__(self, weights: dict[str, int]) -> None:
        self.weight = dict(weights)
        self.booting: dict[str, tuple[int, int]] = {}
        self.draining: dict[str, int] = {}
        self.tick = 0

    def observe(self, load_pct: float, slow: set[str], blank: set[str]) -> Snapshot:
        self.tick += 1
        for iid, (ready, w) in list(self.booting.items()):
            if ready <= self.tick:
                self.weight[iid] = w
                del self.booting[iid]
        t = self.tick * INTERVAL_S
        total = sum(self.weight.values())
        obs = {}
        for iid, w in self.weight.items():
            share = w / total if total else 1 / len(self.weight)
            obs[iid] = self._obs(t, iid, load_pct * share, iid in slow, iid in blank, w)
        for iid in list(self.draining):
            obs[iid] = self._obs(t, iid, 0.0, False, False, 0)
            self.draining[iid] -= 1
            if self.draining[iid] < 0:
                del self.draining[iid]
        return Snapshot(t, "fake", obs)

    @staticmethod
    def _obs(t: float, iid: str, util: float, slow: bool, blank: bool, w: int) -> Observation:
        if blank:
            return Observation(t, iid, INTERVAL_S)
        rt = 0.05 / (1 - min(util, 95.0) / 100) * (3 if slow else 1)
        probe = 0.1 * (1 + (1.0 if slow else 0.0) + util / 200)
        n = round(util * 10)
        return Observation(
            t,
            iid,
            INTERVAL_S,
            requests=n,
            throughput_rps=n / INTERVAL_S,
            mean_rt_seconds=rt if n else None,
            util_pct=util,
            cpu_util=util / 100 * (1.5 if slow else 1.0),
            weight=w,
            extra={"probe_rt_seconds": probe},
        )

    def vanish(self, iid: str) -> None:
        self.weight.pop(iid, None)

    def apply(self, actions: tuple[Any, ...]) -> None:
        for a in actions:
            if isinstance(a, SetWeight) and a.instance_id in self.weight:
                self.weight[a.instance_id] = a.weight
            elif isinstance(a, AddInstance):
                self.booting[a.instance_id] = (self.tick + BOOT_TICKS, a.weight)
            elif isinstance(a, RemoveInstance) and a.instance_id in self.weight:
                del self.weight[a.instance_id]
                self.draining[a.instance_id] = 1


SCRIPT: list[tuple[float, set[str], set[str]]] = (
    [(60.0, set(), set())] * 5  # calm
    + [(60.0, {"i1"}, set())] * 8  # interference on i1
    + [(180.0, {"i1", "i2"}, set())] * 14  # surge, everyone slow
    + [(120.0, set(), {"i1", "i2"})] * 3  # nothing measured on the initial instances
    + [(10.0, set(), set())] * 16  # quiet
)
VANISH_AT = 31  # i2 disappears without being asked


def check_decision(decision: Decision, snapshot: Snapshot, seen: set[str]) -> None:
    assert isinstance(decision, Decision)
    added = {a.instance_id for a in decision.actions if isinstance(a, AddInstance)}
    for a in decision.actions:
        if isinstance(a, AddInstance):
            assert ID.match(a.instance_id), a
            assert a.instance_id not in seen, f"{a.instance_id} reused"
            assert 0 <= a.weight <= 256, a
        else:
            assert a.instance_id in snapshot.instances or a.instance_id in added, a
        if isinstance(a, SetWeight):
            assert 0 <= a.weight <= 256, a
    if decision.actions:
        assert decision.reason.strip(), decision
    json.dumps(dict(decision.detail), allow_nan=False)


def run(policy: Policy) -> list[Decision]:
    env = FakeEnvironment({"i1": 100, "i2": 50})
    seen: set[str] = {"i1", "i2"}
    decisions = []
    for k, (load, slow, blank) in enumerate(SCRIPT):
        if k == VANISH_AT:
            env.vanish("i2")
        snapshot = env.observe(load, slow, blank)
        decision = policy.decide(snapshot)
        check_decision(decision, snapshot, seen)
        seen |= {a.instance_id for a in decision.actions}
        env.apply(decision.actions)
        decisions.append(decision)
    empty = Snapshot(env.tick * INTERVAL_S + INTERVAL_S, "fake", {})
    decisions.append(policy.decide(empty))
    check_decision(decisions[-1], empty, seen)
    return decisions


def factory(name: str) -> type[PolicyFactory]:
    return policy_class(name)


@pytest.fixture
def builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Policy]:
    write_bundle(tmp_path / MODEL)
    write_detector(tmp_path / DETECTOR)
    ctx = PolicyContext(
        interval_s=INTERVAL_S,
        target_rt_s=0.2,
        scaling=ScalingLimits(hosts=["h3", "h4", "h5"], min_instances=1, max_instances=4),
        base_dir=tmp_path,
        initial_instances={"i1": "h1", "i2": "h2"},
        lb_algorithm="leastconn",
        probe_period_s=INTERVAL_S,
    )

    def build(name: str) -> Policy:
        return factory(name).build(dict(PARAMS.get(name, {})), ctx)

    return build


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_decides_sanely(name: str, builder: Callable[[str], Policy]) -> None:
    first = run(builder(name))
    assert run(builder(name)) == first, "the same run decided differently"
    if name in ACTS:
        assert any(d.actions for d in first), f"{name} never acted in the scripted run"

"""The control loop: ticks at every interval, timed calls at their times, failed cycles counted."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from quell.core.action import Action, Decision, SetWeight
from quell.core.clock import VirtualClock, WallClock
from quell.core.loop import ControlLoop
from quell.core.observation import Observation, Snapshot
from quell.errors import ComponentDiedError, ComponentError


class ScriptedEnv:
    """An environment on a virtual clock that records calls and fails where told."""

    name = "scripted"

    def __init__(self, fail_at: Sequence[float] = (), die_at: float | None = None) -> None:
        self.clock = VirtualClock()
        self.fail_at = set(fail_at)
        self.die_at = die_at
        self.log: list[tuple[float, str]] = []
        self.applied: list[Action] = []

    def observe(self) -> Snapshot:
        t = self.clock.now()
        self.log.append((t, "observe"))
        if t in self.fail_at:
            raise ComponentError("scripted", f"no data at {t}")
        if self.die_at is not None and t >= self.die_at:
            raise ComponentDiedError("scripted", "gone")
        obs = Observation(time_s=t, instance_id="a", interval_s=1.0, requests=int(t))
        return Snapshot(time_s=t, environment=self.name, instances={"a": obs})

    def apply(self, actions: Sequence[Action]) -> None:
        self.applied.extend(actions)

    def close(self) -> None:
        pass


class HalvingPolicy:
    name = "halving"

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision((SetWeight("a", 50),), reason=f"t={snapshot.time_s:g}")


def test_ticks_timed_calls_and_decisions_in_time_order() -> None:
    env = ScriptedEnv()
    decisions: list[tuple[float, Decision]] = []

    def mark(name: str) -> tuple[float, Callable[[], None]]:
        at = {"p2": 2.0, "mid": 2.5}[name]
        return at, lambda: env.log.append((env.clock.now(), f"event:{name}"))

    report = ControlLoop(
        env,
        HalvingPolicy(),
        1.0,
        4.0,
        [mark("p2"), mark("mid")],
        on_decision=lambda t, d: decisions.append((t, d)),
    ).run()
    assert report.ticks == 4 and report.cycle_errors == 0
    # the tick closing [1, 2) comes before the event at 2 s
    assert env.log == [
        (1.0, "observe"),
        (2.0, "observe"),
        (2.0, "event:p2"),
        (2.5, "event:mid"),
        (3.0, "observe"),
        (4.0, "observe"),
    ]
    assert [t for t, _ in decisions] == [1.0, 2.0, 3.0, 4.0]
    assert env.applied == [SetWeight("a", 50)] * 4


def test_a_failed_cycle_is_counted_and_the_loop_goes_on() -> None:
    env = ScriptedEnv(fail_at=[2.0, 3.0])
    errors: list[tuple[float, str]] = []
    report = ControlLoop(
        env, HalvingPolicy(), 1.0, 5.0, on_cycle_error=lambda t, m: errors.append((t, m))
    ).run()
    assert report.ticks == 5
    assert report.cycle_errors == 2
    assert [t for t, _ in errors] == [2.0, 3.0]
    assert "no data at 2.0" in errors[0][1]
    assert len(env.applied) == 3  # decided only on the three good snapshots


def test_a_dead_component_ends_the_run() -> None:
    env = ScriptedEnv(die_at=3.0)
    with pytest.raises(ComponentDiedError):
        ControlLoop(env, HalvingPolicy(), 1.0, 10.0).run()
    assert env.log[-1] == (3.0, "observe")


def test_wall_clock_sleeps_until_the_target_with_injected_time() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(d: float) -> None:
        slept.append(d)
        now[0] += d

    clock = WallClock(monotonic=lambda: now[0], sleep=sleep)
    assert clock.now() == 0.0
    clock.sleep_until(1.2)
    assert clock.now() == pytest.approx(1.2)
    assert slept == pytest.approx([0.5, 0.5, 0.2])  # never sleeps more than 0.5 s at once
    clock.sleep_until(1.0)  # already past: returns at once
    assert len(slept) == 3


def test_virtual_clock_jumps_and_never_goes_back() -> None:
    clock = VirtualClock()
    clock.sleep_until(600.0)
    clock.sleep_until(10.0)
    assert clock.now() == 600.0


class GlancingEnv(ScriptedEnv):
    def glance(self) -> Snapshot:
        t = self.clock.now()
        self.log.append((t, "glance"))
        if t in self.fail_at:
            raise ComponentError("scripted", f"no glance at {t}")
        obs = Observation(time_s=t, instance_id="a", interval_s=0.5)
        return Snapshot(time_s=t, environment=self.name, instances={"a": obs})


class FastPolicy(HalvingPolicy):
    fast_interval_s: float | None = 0.5

    def react(self, glance: Snapshot) -> Decision:
        return Decision((SetWeight("a", 10),), reason=f"glance {glance.time_s:g}")


def test_a_fast_path_glances_between_ticks_and_its_decisions_are_marked() -> None:
    env = GlancingEnv(fail_at=[1.5])
    decisions: list[tuple[float, Decision]] = []
    report = ControlLoop(
        env,
        FastPolicy(),
        1.0,
        2.0,
        [(1.5, lambda: env.log.append((env.clock.now(), "event")))],
        on_decision=lambda t, d: decisions.append((t, d)),
    ).run()
    # the tick only observes; at equal times the event comes before the glance
    assert env.log == [
        (0.5, "glance"),
        (1.0, "observe"),
        (1.5, "event"),
        (1.5, "glance"),
        (2.0, "observe"),
    ]
    assert (report.ticks, report.glances, report.cycle_errors) == (2, 2, 1)
    assert [(t, d.detail.get("fast")) for t, d in decisions] == [
        (0.5, True),
        (1.0, None),
        (2.0, None),
    ]
    assert env.applied == [SetWeight("a", 10), SetWeight("a", 50), SetWeight("a", 50)]


def test_without_a_fast_interval_the_loop_never_glances() -> None:
    env = GlancingEnv()
    policy = FastPolicy()
    policy.fast_interval_s = None
    report = ControlLoop(env, policy, 1.0, 3.0).run()
    assert report.glances == 0 and [w for _, w in env.log] == ["observe"] * 3

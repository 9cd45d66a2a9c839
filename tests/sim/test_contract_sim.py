"""The Environment contract (``quell.core.contract``) over the simulator: every check, each on a
fresh environment, and the runner over one shared environment, for a fleet on links with open-
loop load and for an apache instance with closed-loop users (``ReconfigureServer``). Then
simulators with one flaw each: the check that guards against it must catch it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetMaxConn,
    SetWeight,
)
from quell.core.contract import (
    OWN_CHECKS,
    SHARED_CHECKS,
    EnvironmentFixture,
    OwnCheck,
    SharedCheck,
    check_add_instance,
    check_before_start,
    check_close,
    check_glance,
    check_glance_keeps_observe,
    check_mixed_batch,
    check_reconfigure_server,
    check_remove_instance,
    check_same_seed,
    check_set_max_conn,
    check_set_weight,
    check_snapshot,
    check_unknown_instance,
    check_unsupported_action,
    run_checks,
)
from quell.core.observation import Observation, Snapshot
from quell.errors import ActionError, ContractError
from quell.scenario.model import Scenario
from quell.sim import SimEnvironment
from tests.sim.build import build_scenario

BOOT_S = 5.0
SUPPORTS: frozenset[type[Action]] = frozenset({SetWeight, SetMaxConn, AddInstance, RemoveInstance})


def scenario(seed: int = 5, boot_s: float = BOOT_S) -> Scenario:
    return build_scenario(
        n_hosts=3,
        seed=seed,
        duration_s=300,
        interval_s=1,
        instances=[{"id": "i0", "host": "h0"}, {"id": "i1", "host": "h1"}],
        probe={"period_s": 2, "size_bytes": 50_000},
        scaling={"hosts": ["h2"], "boot_s": boot_s},
    )


def apache_scenario(seed: int = 5) -> Scenario:
    """Two apache instances (a PHP page and a static file), closed-loop users."""
    return build_scenario(
        n_hosts=3,
        seed=seed,
        duration_s=300,
        interval_s=1,
        instances=[
            {"id": "i0", "host": "h0", "server": "apache", "apache": {"threads_per_child": 4}},
            {"id": "i1", "host": "h1", "server": "apache"},
        ],
        pages=[{"path": "/p.php", "working_set_bytes": 100_000, "touches": 20_000}],
        workload={
            "arrival": {"process": "closed", "users": 30, "think_time_s": 0.5, "ramp_s": 2},
            "requests": [{"path": "/f"}, {"path": "/p.php"}],
        },
        probe={"period_s": 2, "size_bytes": 50_000},
        scaling={"hosts": ["h2"], "boot_s": BOOT_S, "server": "apache"},
    )


SETTINGS = {"max_request_workers": 8.0, "keepalive_timeout_s": 1.5, "php_max_children": 3.0}


def sim_fixture(
    create: Callable[[], SimEnvironment] | None = None, **over: Any
) -> EnvironmentFixture[SimEnvironment]:
    s = scenario()
    fx = EnvironmentFixture(
        create=create or (lambda: SimEnvironment(s)),
        serving="i0",
        host="h2",
        supports=SUPPORTS,
        boot_s=BOOT_S,
    )
    return dataclasses.replace(fx, **over)


def apache_fixture(**over: Any) -> EnvironmentFixture[SimEnvironment]:
    s = apache_scenario()
    mine: dict[str, Any] = {
        "create": lambda: SimEnvironment(s),
        "supports": SUPPORTS | {ReconfigureServer},
        "reconfigure": ("i0", SETTINGS),
    }
    return sim_fixture(**(mine | over))


@pytest.mark.parametrize("check", SHARED_CHECKS, ids=lambda c: c.__name__)
def test_the_simulator_passes_each_check_on_a_fresh_environment(check: SharedCheck) -> None:
    fx = sim_fixture()
    env = fx.started()
    try:
        why = check(fx, env)
    finally:
        env.close()
    if check.__name__ == "check_set_cpu_cap":
        assert why == "does not support SetCpuCap"
    elif check.__name__ == "check_reconfigure_server":
        assert why == "does not support ReconfigureServer"
    else:
        assert why is None


@pytest.mark.parametrize("check", SHARED_CHECKS, ids=lambda c: c.__name__)
def test_an_apache_instance_with_closed_loop_users_passes_each_check(check: SharedCheck) -> None:
    fx = apache_fixture()
    env = fx.started()
    try:
        why = check(fx, env)
    finally:
        env.close()
    assert why == ("does not support SetCpuCap" if check.__name__ == "check_set_cpu_cap" else None)


@pytest.mark.parametrize("check", OWN_CHECKS, ids=lambda c: c.__name__)
def test_the_simulator_passes_each_check_of_its_own_environments(check: OwnCheck) -> None:
    why = check(sim_fixture())
    if check is check_before_start:
        assert why == "has no start step: it observes from its creation"
    else:
        assert why is None


def test_the_runner_reports_every_check_over_one_shared_environment() -> None:
    results = {r.check: (r.outcome, r.detail) for r in run_checks(sim_fixture())}
    assert list(results) == [c.__name__ for c in (*SHARED_CHECKS, *OWN_CHECKS)]
    not_applicable = {k for k, (outcome, _) in results.items() if outcome == "not applicable"}
    assert not_applicable == {"check_set_cpu_cap", "check_reconfigure_server", "check_before_start"}
    assert all(
        outcome == "passed" for k, (outcome, _) in results.items() if k not in not_applicable
    )


def test_the_runner_passes_an_apache_instance_with_closed_loop_users() -> None:
    results = {r.check: (r.outcome, r.detail) for r in run_checks(apache_fixture())}
    not_applicable = {k for k, (outcome, _) in results.items() if outcome == "not applicable"}
    assert not_applicable == {"check_set_cpu_cap", "check_before_start"}
    failed = {k: d for k, (outcome, d) in results.items() if outcome == "failed"}
    assert not failed


# -- flawed simulators -----------------------------------------------------------------------------
class Flawed(SimEnvironment):
    """The simulator with its snapshots bent by ``bend`` and its batches by ``act``."""

    def __init__(
        self,
        scenario: Scenario,
        bend: Callable[[Observation], Observation] = lambda o: o,
        act: Callable[[SimEnvironment, Sequence[Action]], None] | None = None,
    ) -> None:
        super().__init__(scenario)
        self.bend = bend
        self.act = act

    def observe(self) -> Snapshot:
        snap = super().observe()
        bent = {k: self.bend(o) for k, o in snap.instances.items()}
        return dataclasses.replace(snap, instances=bent)

    def apply(self, actions: Sequence[Action]) -> None:
        if self.act is None:
            super().apply(actions)
        else:
            self.act(self, actions)

    def plain_apply(self, actions: Sequence[Action]) -> None:
        super().apply(actions)


def swallow_refusals(env: SimEnvironment, actions: Sequence[Action]) -> None:
    try:
        assert isinstance(env, Flawed)
        env.plain_apply(actions)
    except ActionError:
        pass


def all_or_nothing(env: SimEnvironment, actions: Sequence[Action]) -> None:
    """Refuses a whole batch when one action names an unknown instance."""
    assert isinstance(env, Flawed)
    known = set(env.instance_ids_)
    if any(not isinstance(a, AddInstance) and a.instance_id not in known for a in actions):
        raise ActionError(env.name, [(a, "batch refused") for a in actions], [])
    env.plain_apply(actions)


def without(kind: type[Action]) -> Callable[[SimEnvironment, Sequence[Action]], None]:
    def act(env: SimEnvironment, actions: Sequence[Action]) -> None:
        assert isinstance(env, Flawed)
        env.plain_apply([a for a in actions if not isinstance(a, kind)])

    return act


def flawed(**kw: Any) -> Callable[[], SimEnvironment]:
    s = scenario()
    return lambda: Flawed(s, **kw)


def flawed_apache(**kw: Any) -> Callable[[], SimEnvironment]:
    s = apache_scenario()
    return lambda: Flawed(s, **kw)


class NeedsStart(SimEnvironment):
    """A start step whose state ``observe`` reads unguarded: an AttributeError before start."""

    def start(self) -> None:
        self.started_at_s = self.clock.now()

    def observe(self) -> Snapshot:
        assert self.started_at_s >= 0
        return super().observe()


class GlanceObserves(SimEnvironment):
    """A glance that closes observe's interval: the next observe covers only the time since."""

    def glance(self) -> Snapshot:
        return self.observe()


class GlanceFromObserve(SimEnvironment):
    """A glance whose window runs from the last observe, not from the last glance."""

    def glance(self) -> Snapshot:
        snap = super().glance()
        since = snap.time_s - self._last_obs_s
        bent = {
            k: dataclasses.replace(o, interval_s=since, throughput_rps=o.requests / since)
            for k, o in snap.instances.items()
        }
        return dataclasses.replace(snap, instances=bent)


class GlanceAfterClose(SimEnvironment):
    """Glances after ``close``, though it refuses to observe."""

    def glance(self) -> Snapshot:
        closed, self._closed = self._closed, False
        try:
            return super().glance()
        finally:
            self._closed = closed


def reseeded() -> Callable[[], SimEnvironment]:
    """Each environment from another seed, as a simulator on global random state would be."""
    seeds = iter(range(100, 200))
    return lambda: SimEnvironment(scenario(seed=next(seeds)))


FLAWS: list[tuple[str, Callable[[], EnvironmentFixture[Any]], SharedCheck | OwnCheck]] = [
    (
        "throughput is not requests / interval",
        lambda: sim_fixture(flawed(bend=lambda o: dataclasses.replace(o, throughput_rps=1.0))),
        check_snapshot,
    ),
    (
        "the interval is not the time since the last observation",
        lambda: sim_fixture(
            flawed(
                bend=lambda o: dataclasses.replace(
                    o, interval_s=2 * o.interval_s, throughput_rps=o.throughput_rps / 2
                )
            )
        ),
        check_snapshot,
    ),
    (
        "NaN for a value not measured",
        lambda: sim_fixture(flawed(bend=lambda o: dataclasses.replace(o, cpu_util=math.nan))),
        check_snapshot,
    ),
    ("weights ignored", lambda: sim_fixture(flawed(act=without(SetWeight))), check_set_weight),
    ("maxconn ignored", lambda: sim_fixture(flawed(act=without(SetMaxConn))), check_set_max_conn),
    (
        "server settings ignored",
        lambda: apache_fixture(create=flawed_apache(act=without(ReconfigureServer))),
        check_reconfigure_server,
    ),
    (
        "settings in force not shown",
        lambda: apache_fixture(
            create=flawed_apache(bend=lambda o: dataclasses.replace(o, extra={}))
        ),
        check_reconfigure_server,
    ),
    (
        "removal ignored",
        lambda: sim_fixture(flawed(act=without(RemoveInstance))),
        check_remove_instance,
    ),
    (
        "an instance shown before its boot time",
        lambda: sim_fixture(lambda: SimEnvironment(scenario(boot_s=0))),
        check_add_instance,
    ),
    (
        "an instance that never boots in time",
        lambda: sim_fixture(lambda: SimEnvironment(scenario(boot_s=60)), wait_s=5),
        check_add_instance,
    ),
    (
        "an unknown instance silently ignored",
        lambda: sim_fixture(flawed(act=swallow_refusals)),
        check_unknown_instance,
    ),
    (
        "a batch refused whole for one unknown instance",
        lambda: sim_fixture(flawed(act=all_or_nothing)),
        check_mixed_batch,
    ),
    (
        "an unsupported kind said to be supported",
        lambda: sim_fixture(supports=SUPPORTS - {SetMaxConn}),
        check_unsupported_action,
    ),
    (
        "a start step that does not guard observe",
        lambda: sim_fixture(start=lambda env: None),
        check_before_start,
    ),
    (
        "an AttributeError before start",
        lambda: sim_fixture(lambda: NeedsStart(scenario()), start=NeedsStart.start),
        check_before_start,
    ),
    ("another seed each time", lambda: sim_fixture(reseeded()), check_same_seed),
    (
        "a glance closes the interval",
        lambda: sim_fixture(lambda: GlanceObserves(scenario())),
        check_glance_keeps_observe,
    ),
    (
        "a glance closes the interval, seen in its length",
        lambda: sim_fixture(lambda: GlanceObserves(scenario())),
        check_glance,
    ),
    (
        "a glance after a glance covers the time since observe",
        lambda: sim_fixture(lambda: GlanceFromObserve(scenario())),
        check_glance,
    ),
    (
        "glancing after close",
        lambda: sim_fixture(lambda: GlanceAfterClose(scenario())),
        check_close,
    ),
]


@pytest.mark.parametrize(("flaw", "fixture", "check"), FLAWS, ids=[f[0] for f in FLAWS])
def test_each_flaw_is_caught_by_its_check(
    flaw: str, fixture: Callable[[], EnvironmentFixture[Any]], check: SharedCheck | OwnCheck
) -> None:
    fx = fixture()
    with pytest.raises(ContractError) as caught:
        if check in OWN_CHECKS:
            check(fx)  # type: ignore[call-arg]
        else:
            env = fx.started()
            try:
                check(fx, env)  # type: ignore[call-arg]
            finally:
                env.close()
    assert caught.value.check == check.__name__
    assert caught.value.environment == "sim" and caught.value.problems


class OpenAfterClose(SimEnvironment):
    """Observes and acts after ``close``, as the simulator did before the contract."""

    def close(self) -> None:
        pass


def test_observing_after_close_is_caught_and_the_runner_reports_it() -> None:
    s = scenario()
    fx = sim_fixture(lambda: OpenAfterClose(s))
    with pytest.raises(ContractError, match="observe: closed: carried out"):
        check_close(fx)
    results = {r.check: r for r in run_checks(fx)}
    assert results["check_close"].outcome == "failed"
    assert "EnvironmentStateError" in results["check_close"].detail
    assert results["check_snapshot"].outcome == "passed"

"""The contract every Environment keeps, as checks that run over any of them (the lab, the
simulator, a live deployment), the way scikit-learn's ``check_estimator`` runs over every
estimator.

An ``EnvironmentFixture`` tells the checks how to make the environment under test (fresh, and
started), an instance that serves from the start, a host an instance may be added on, which
Action kinds it carries out, and how long to give it. A check returns ``None`` when the
environment kept the contract, or a sentence saying why the check does not apply to it (an
action kind it does not support, no start step); anything found wrong raises ``ContractError``
listing every problem, where (snapshot time, instance, field, action) and what.

``SHARED_CHECKS`` take one started environment and leave it as they found it: its serving
instance serving, weights and caps restored, instances they added removed. They can run one
after the other on a single environment (a lab brings one up for all of them).
``OWN_CHECKS`` make the environments they need. ``run_checks`` runs both and reports each.

What the checks hold an environment to:

* **Life cycle.** Before its start step (where it has one) and after ``close`` an environment
  refuses ``observe`` and ``apply`` with ``EnvironmentStateError`` (state "not started" or
  "closed"); ``close`` may be called twice, started or not.
* **Snapshots.** ``time_s`` is the clock's time when observed; ``interval_s`` > 0 and equal to
  the time since the last observation; the keys are the observations' ``instance_id``\\s;
  ``throughput_rps`` = ``requests`` / ``interval_s``; the response times are given exactly when
  requests completed (``None``, not 0, when none did), ≥ 0 and p50 ≤ p95 ≤ p99; counts ≥ 0;
  ``steal_ratio`` in [0, 1]; PSI per cent in [0, 100]; ``weight`` in 0..256; every value a finite
  number or ``None`` (never NaN); ``extra`` values finite floats.
* **Actions.** Each supported kind shows in the next snapshot: ``SetWeight`` as ``weight``,
  ``SetMaxConn`` as ``extra[MAXCONN_KEY]`` (0 removes the cap: the key goes), ``SetCpuCap`` as
  ``extra[CPU_CAP_KEY]`` (``None`` removes it), ``ReconfigureServer`` as each setting's value
  under ``SERVER_SETTING_KEYS`` on the instance it names, online and (for the settings the
  fixture names) gracefully (an unknown setting is refused with nothing changed), ``AddInstance`` as a new instance from its boot
  time on (never before), ``RemoveInstance`` as its disappearance once drained (for good;
  actions naming it fail from then on).
* **Refusals.** An action naming an unknown instance (or, for ``AddInstance``, an unknown host
  or an id in use) or of a kind the environment does not support is refused with
  ``ActionError`` naming exactly it, and changes nothing; in a batch that mixes refused and
  carried-out actions, ``ActionError.failed`` names exactly the refused ones, ``applied`` the
  others, which are in force in the next snapshot, and the environment goes on observing.
* **Repeatability.** Two environments made alike (same scenario, same seed) observed and acted
  on alike give identical snapshots, unless the fixture says why they cannot (a real machine).
* **Glances.** ``glance`` is refused before the start step and after ``close`` as ``observe``
  is; a glance's snapshot has the fields and units of any other, its ``time_s`` the clock's and
  its ``interval_s`` the time since the last glance or observe (a glance right after a glance
  covers only the time between); and glances do not change what ``observe`` reports: two
  environments made alike, one glanced at between its observations and one not, give
  identical snapshots (where the environment is repeatable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Generic, Literal, TypeVar, get_args

from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetCpuCap,
    SetMaxConn,
    SetWeight,
)
from quell.core.environment import Environment
from quell.core.observation import (
    CPU_CAP_KEY,
    MAXCONN_KEY,
    SERVER_SETTING_KEYS,
    Observation,
    Snapshot,
)
from quell.errors import (
    ActionError,
    ContractError,
    EnvironmentStateError,
    Problem,
    QuellError,
)

E = TypeVar("E", bound=Environment)

ACTION_KINDS: tuple[type[Action], ...] = get_args(Action)
"""Every kind of Action, in the order the checks try them."""
MAX_WEIGHT = 256
SNAPSHOTS = 4
"""How many snapshots ``check_snapshot`` looks at."""
TIME_TOLERANCE_S = 1e-6
GHOST = "ck_ghost"
"""An instance id no environment under test has (ids of the checks start with ``ck_``)."""
NO_HOST = "ck_nohost"

_NOT_STARTED = "not started"
_CLOSED = "closed"


@dataclass(frozen=True)
class EnvironmentFixture(Generic[E]):
    """How to make the environment under test, and what to expect of it."""

    create: Callable[[], E]
    """A new environment, not started; every call one made alike (same scenario, same seed)."""
    serving: str
    """An instance that serves from the start."""
    host: str
    """A host an instance may be added on."""
    supports: frozenset[type[Action]]
    """The Action kinds the environment carries out; the others it must refuse."""
    start: Callable[[E], None] | None = None
    """The environment's start step; ``None``: it observes from its creation."""
    boot_s: float = 0.0
    """How long an added instance boots before it serves."""
    step_s: float = 1.0
    """How long the checks let pass between two observations."""
    wait_s: float = 10.0
    """How long past its boot (or after its removal) an instance may take to show (or go)."""
    not_repeatable: str | None = None
    """Why two environments made alike may give different snapshots; ``None``: they must not."""
    no_glance: str | None = None
    """Why the environment cannot glance (its ``glance`` is refused, and so is a policy with a
    fast path where it runs); ``None``: it must."""
    reconfigure: tuple[str, Mapping[str, float]] | None = None
    """An instance whose server settings ``ReconfigureServer`` changes, and values (of
    ``SERVER_SETTING_KEYS`` settings) it accepts there; ``None``: the environment has none."""
    reconfigure_graceful: Mapping[str, float] | None = None
    """Values the same instance accepts by a graceful reconfiguration (``graceful=True``),
    checked before the online ones; ``None``: they are all it is checked with. An environment
    whose online path takes fewer settings than its graceful one (the lab's) names both."""

    def started(self) -> E:
        env = self.create()
        if self.start is not None:
            try:
                self.start(env)
            except BaseException:
                env.close()
                raise
        return env


SharedCheck = Callable[[EnvironmentFixture[Any], Any], "str | None"]
OwnCheck = Callable[[EnvironmentFixture[Any]], "str | None"]


def sample_action(kind: type[Action], instance_id: str, host: str) -> Action:
    """An action of ``kind`` naming ``instance_id`` (and ``host``, for ``AddInstance``)."""
    made: tuple[Action, ...] = (
        SetWeight(instance_id, 50),
        SetMaxConn(instance_id, 50),
        AddInstance(instance_id, host, weight=50),
        RemoveInstance(instance_id),
        ReconfigureServer(instance_id, {"max_children": 4}),
        SetCpuCap(instance_id, 0.5),
    )
    return next(a for a in made if type(a) is kind)


# -- what one snapshot must look like ------------------------------------------------------------
_COUNTS = ("requests", "errors")
_BYTES = ("net_rx_bytes", "net_tx_bytes")
_RESPONSE_TIMES = ("mean_rt_seconds", "p50_rt_seconds", "p95_rt_seconds", "p99_rt_seconds")
_PERCENT = ("psi_cpu_some_pct", "psi_memory_some_pct", "psi_io_some_pct")
_NON_NEGATIVE = ("throughput_rps", "cpu_util", "runqueue_wait_seconds", "util_pct")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def observation_problems(obs: Observation, where: str) -> list[Problem]:
    """What is wrong with one observation's fields and units (``where`` prefixes locations)."""
    found: list[Problem] = []

    def bad(name: str, message: str) -> None:
        found.append(Problem(f"{where}.{name}", message))

    for f in fields(Observation):
        value = getattr(obs, f.name)
        if f.name in ("instance_id", "extra") or value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            bad(f.name, f"{value!r} is not a number")
        elif not math.isfinite(value):
            bad(f.name, f"{value!r}: an unmeasured value is None, not NaN or infinite")
    if found:
        return found
    for name in (*_COUNTS, *_BYTES):
        value = getattr(obs, name)
        if value is not None and (not _is_int(value) or value < 0):
            bad(name, f"{value!r} is not a count >= 0")
    if not obs.interval_s > 0:
        bad("interval_s", f"{obs.interval_s!r} is not > 0")
    elif not math.isclose(obs.throughput_rps, obs.requests / obs.interval_s, rel_tol=1e-9):
        bad(
            "throughput_rps",
            f"{obs.throughput_rps!r} is not requests / interval_s = "
            f"{obs.requests} / {obs.interval_s!r}",
        )
    for name in _NON_NEGATIVE:
        value = getattr(obs, name)
        if value is not None and value < 0:
            bad(name, f"{value!r} is negative")
    rts = [getattr(obs, name) for name in _RESPONSE_TIMES]
    if obs.requests == 0 and any(rt is not None for rt in rts):
        bad("p50_rt_seconds", f"no request completed, yet response times {rts}: None, not 0")
    elif obs.requests > 0 and any(rt is None for rt in rts):
        bad("p50_rt_seconds", f"{obs.requests} requests completed, yet response times {rts}")
    elif obs.requests > 0:
        _mean, p50, p95, p99 = rts
        if min(rts) < 0:
            bad("mean_rt_seconds", f"negative response time in {rts}")
        if not p50 <= p95 <= p99:
            bad("p95_rt_seconds", f"p50 {p50!r}, p95 {p95!r}, p99 {p99!r} are not in order")
    if obs.steal_ratio is not None and not 0.0 <= obs.steal_ratio <= 1.0:
        bad("steal_ratio", f"{obs.steal_ratio!r} is not a ratio in [0, 1]")
    for name in _PERCENT:
        value = getattr(obs, name)
        if value is not None and not 0.0 <= value <= 100.0:
            bad(name, f"{value!r} is not a per cent in [0, 100]")
    if obs.weight is not None and (not _is_int(obs.weight) or not 0 <= obs.weight <= MAX_WEIGHT):
        bad("weight", f"{obs.weight!r} is not a weight in 0..{MAX_WEIGHT}")
    for key, value in obs.extra.items():
        if not isinstance(key, str):
            bad(f"extra[{key!r}]", "key is not a string")
        if not isinstance(value, float) or not math.isfinite(value):
            bad(f"extra[{key!r}]", f"{value!r} is not a finite float")
    return found


def snapshot_problems(snap: Snapshot, environment: str) -> list[Problem]:
    """What is wrong with one snapshot on its own: its name, its keys, each observation."""
    where = f"snapshot@{snap.time_s!r}"
    found: list[Problem] = []
    if snap.environment != environment:
        found.append(Problem(where, f"environment {snap.environment!r}, not {environment!r}"))
    intervals = {o.interval_s for o in snap.instances.values()}
    if len(intervals) > 1:
        found.append(Problem(where, f"instances report different intervals {sorted(intervals)}"))
    for key, obs in snap.instances.items():
        at = f"{where}/{key}"
        if obs.instance_id != key:
            found.append(Problem(at, f"keyed {key!r}, instance_id {obs.instance_id!r}"))
        if obs.time_s != snap.time_s:
            found.append(Problem(at, f"time_s {obs.time_s!r}, the snapshot's {snap.time_s!r}"))
        found += observation_problems(obs, at)
    return found


# -- helpers ---------------------------------------------------------------------------------------
def _done(env: Environment, check: str, found: Sequence[Problem]) -> None:
    if found:
        raise ContractError(env.name, check, found)


def _next(env: Environment, fx: EnvironmentFixture[Any]) -> Snapshot:
    """Let ``step_s`` pass, then observe."""
    env.clock.sleep_until(env.clock.now() + fx.step_s)
    return env.observe()


def _watch(
    env: Environment,
    fx: EnvironmentFixture[Any],
    until: Callable[[Snapshot], bool],
    within_s: float,
) -> list[Snapshot]:
    """Observe every step until ``until`` holds or ``within_s`` has passed; every snapshot."""
    deadline = env.clock.now() + within_s
    seen: list[Snapshot] = []
    while True:
        snap = _next(env, fx)
        seen.append(snap)
        if until(snap) or snap.time_s >= deadline:
            return seen


def _observation(
    snap: Snapshot, iid: str, found: list[Problem], why: str = ""
) -> Observation | None:
    obs = snap.instances.get(iid)
    if obs is None:
        found.append(Problem(f"snapshot@{snap.time_s!r}", f"{iid!r} is missing{why}"))
    return obs


def _refused(
    env: Environment,
    batch: Sequence[Action],
    failed: Sequence[Action],
    applied: Sequence[Action],
    found: list[Problem],
) -> None:
    """Apply ``batch``; it must raise ``ActionError`` naming exactly ``failed`` and ``applied``."""
    where = f"apply({list(batch)!r})"
    try:
        env.apply(batch)
    except ActionError as exc:
        got = [a for a, _ in exc.failed]
        if got != list(failed):
            found.append(Problem(where, f"failed names {got!r}, not {list(failed)!r}"))
        if list(exc.applied) != list(applied):
            found.append(Problem(where, f"applied names {exc.applied!r}, not {list(applied)!r}"))
        for a, why in exc.failed:
            if not isinstance(why, str) or not why.strip():
                found.append(Problem(where, f"no reason given for {a!r}"))
        if exc.environment != env.name:
            found.append(Problem(where, f"ActionError of {exc.environment!r}, not {env.name!r}"))
    except QuellError as exc:
        found.append(Problem(where, f"raised {type(exc).__name__} ({exc}), not ActionError"))
    else:
        found.append(Problem(where, "accepted: it must be refused with ActionError"))


def _refuses(
    env: Environment, operation: str, call: Callable[[], object], state: str
) -> list[Problem]:
    """``call`` must raise ``EnvironmentStateError`` with ``state``."""
    try:
        call()
    except EnvironmentStateError as exc:
        if exc.state != state:
            return [Problem(operation, f"refused as {exc.state!r}, not {state!r}")]
        return []
    except Exception as exc:  # an AttributeError here is what the check is for
        return [
            Problem(
                operation,
                f"{state}: raised {type(exc).__name__} ({exc}), not EnvironmentStateError",
            )
        ]
    return [Problem(operation, f"{state}: carried out; it must raise EnvironmentStateError")]


def _closes(env: Environment, found: list[Problem], what: str) -> None:
    try:
        env.close()
    except Exception as exc:
        found.append(Problem(what, f"raised {type(exc).__name__}: {exc}"))


def _shows(
    env: Environment,
    fx: EnvironmentFixture[Any],
    action: Action,
    read: Callable[[Observation], object],
    expected: object,
    found: list[Problem],
) -> None:
    """Apply ``action`` (naming the serving instance); the next snapshot must read ``expected``."""
    env.apply([action])
    obs = _observation(_next(env, fx), fx.serving, found)
    if obs is not None and read(obs) != expected:
        found.append(Problem(repr(action), f"next snapshot shows {read(obs)!r}, not {expected!r}"))


# -- checks on one started environment, shared ---------------------------------------------------
def check_snapshot(fx: EnvironmentFixture[E], env: E) -> str | None:
    """Fields and units of every snapshot; its time is the clock's and its interval the time
    since the last observation."""
    found: list[Problem] = []
    prev = _next(env, fx)
    found += snapshot_problems(prev, env.name)
    for _ in range(SNAPSHOTS - 1):
        env.clock.sleep_until(env.clock.now() + fx.step_s)
        before = env.clock.now()
        snap = env.observe()
        after = env.clock.now()
        where = f"snapshot@{snap.time_s!r}"
        if not before <= snap.time_s <= after:
            found.append(Problem(where, f"time_s is not the clock's: it read {before} to {after}"))
        since = snap.time_s - prev.time_s
        for iid, obs in snap.instances.items():
            if abs(obs.interval_s - since) > TIME_TOLERANCE_S:
                found.append(
                    Problem(
                        f"{where}/{iid}.interval_s",
                        f"{obs.interval_s!r}, but the last observation was {since!r} s before",
                    )
                )
        found += snapshot_problems(snap, env.name)
        _observation(snap, fx.serving, found, " (it serves)")
        prev = snap
    _done(env, "check_snapshot", found)
    return None


def _setting_shows(
    fx: EnvironmentFixture[Any],
    env: Environment,
    check: str,
    kind: type[Action],
    read: Callable[[Observation], Any],
    steps: Callable[[Any], Sequence[tuple[Action, object]]],
) -> str | None:
    """Apply each action of ``steps(what read() shows now)`` to the serving instance; the next
    snapshot must show what goes with it."""
    if kind not in fx.supports:
        return f"does not support {kind.__name__}"
    found: list[Problem] = []
    obs = _observation(_next(env, fx), fx.serving, found)
    for action, expected in steps(None if obs is None else read(obs)):
        _shows(env, fx, action, read, expected, found)
    _done(env, check, found)
    return None


def check_set_weight(fx: EnvironmentFixture[E], env: E) -> str | None:
    """``SetWeight`` shows as the instance's ``weight`` in the next snapshot; 0 is allowed."""

    def steps(w0: int | None) -> list[tuple[Action, object]]:
        return [(SetWeight(fx.serving, w), w) for w in (37, 0, 100 if w0 is None else w0)]

    return _setting_shows(fx, env, "check_set_weight", SetWeight, lambda o: o.weight, steps)


def check_set_max_conn(fx: EnvironmentFixture[E], env: E) -> str | None:
    """``SetMaxConn`` shows as ``extra[MAXCONN_KEY]``; ``SetMaxConn(..., 0)`` lifts the cap."""

    def steps(m0: float | None) -> list[tuple[Action, object]]:
        back = [] if m0 is None else [(SetMaxConn(fx.serving, round(m0)), m0)]
        return [(SetMaxConn(fx.serving, 7), 7.0), (SetMaxConn(fx.serving, 0), None), *back]

    def read(o: Observation) -> float | None:
        return o.extra.get(MAXCONN_KEY)

    return _setting_shows(fx, env, "check_set_max_conn", SetMaxConn, read, steps)


def check_set_cpu_cap(fx: EnvironmentFixture[E], env: E) -> str | None:
    """``SetCpuCap`` shows as ``extra[CPU_CAP_KEY]``; ``SetCpuCap(..., None)`` lifts the cap."""

    def steps(c0: float | None) -> list[tuple[Action, object]]:
        return [(SetCpuCap(fx.serving, c), c) for c in (0.5, c0)]

    def read(o: Observation) -> float | None:
        return o.extra.get(CPU_CAP_KEY)

    return _setting_shows(fx, env, "check_set_cpu_cap", SetCpuCap, read, steps)


def check_reconfigure_server(fx: EnvironmentFixture[E], env: E) -> str | None:
    """``ReconfigureServer`` shows each setting's value under ``SERVER_SETTING_KEYS`` in the
    next snapshot: the fixture's ``reconfigure_graceful`` values gracefully, then the old ones
    set back gracefully; its ``reconfigure`` values online (``graceful=False``); one naming an
    unknown setting is refused naming it, with nothing changed; the old values are set back."""
    if ReconfigureServer not in fx.supports:
        return "does not support ReconfigureServer"
    if fx.reconfigure is None:
        return "names no instance whose server settings change"
    iid, settings = fx.reconfigure
    gracefully = dict(fx.reconfigure_graceful or {})
    found: list[Problem] = []

    def shown(snap: Snapshot, keys: Mapping[str, object] = settings) -> dict[str, float | None]:
        obs = _observation(snap, iid, found)
        extra = {} if obs is None else obs.extra
        return {k: extra.get(SERVER_SETTING_KEYS[k]) for k in keys}

    def values(read: Mapping[str, float | None]) -> dict[str, int | float]:
        """What was read, to be sent back: whole numbers as such (a server may take no other)."""
        return {k: int(v) if float(v).is_integer() else v for k, v in read.items() if v is not None}

    everything = {**settings, **gracefully}
    before = shown(_next(env, fx), everything)
    if any(v is None for v in before.values()):
        found.append(Problem(iid, f"does not show its settings in force: {before}"))
        _done(env, "check_reconfigure_server", found)
    if gracefully:
        for action, want in (
            (ReconfigureServer(iid, gracefully), {**before, **gracefully}),
            (ReconfigureServer(iid, values(before)), before),
        ):
            env.apply([action])
            if (now := shown(_next(env, fx), everything)) != want:
                found.append(Problem(repr(action), f"next snapshot shows {now}"))
    old = {k: before[k] for k in settings}
    new = ReconfigureServer(iid, dict(settings), graceful=False)
    env.apply([new])
    if (now := shown(_next(env, fx))) != dict(settings):
        found.append(Problem(repr(new), f"next snapshot shows {now}"))
    bad = ReconfigureServer(iid, {"ck_unknown": 1}, graceful=False)
    _refused(env, [bad], [bad], [], found)
    if (now := shown(_next(env, fx))) != dict(settings):
        found.append(Problem(repr(bad), f"refused, yet the settings show {now}"))
    env.apply([ReconfigureServer(iid, values(old), False)])
    if (now := shown(_next(env, fx))) != old:
        found.append(Problem(iid, f"set back to {old}, the settings show {now}"))
    _done(env, "check_reconfigure_server", found)
    return None


def check_add_instance(fx: EnvironmentFixture[E], env: E) -> str | None:
    """An added instance is in no snapshot before its boot time, then in every one, with the
    weight it was added with."""
    if AddInstance not in fx.supports:
        return "does not support AddInstance"
    found: list[Problem] = []
    iid = "ck_add"
    added_s = env.clock.now()
    env.apply([AddInstance(iid, fx.host, weight=50)])
    seen = _watch(env, fx, lambda s: iid in s.instances, fx.boot_s + fx.wait_s)
    early = [s.time_s for s in seen if iid in s.instances and s.time_s < added_s + fx.boot_s]
    if early:
        found.append(Problem(iid, f"added at {added_s}, booting {fx.boot_s} s, shown at {early}"))
    if iid not in seen[-1].instances:
        found.append(Problem(iid, f"in no snapshot {fx.boot_s + fx.wait_s} s after AddInstance"))
    else:
        obs = _observation(_next(env, fx), iid, found, " after it appeared")
        if obs is not None and obs.weight != 50:
            found.append(Problem(iid, f"added with weight 50, shows {obs.weight!r}"))
    if RemoveInstance in fx.supports:
        env.apply([RemoveInstance(iid, drain=False)])
        _watch(env, fx, lambda s: iid not in s.instances, fx.wait_s)
    _done(env, "check_add_instance", found)
    return None


def check_remove_instance(fx: EnvironmentFixture[E], env: E) -> str | None:
    """A removed instance (drained or not) leaves the snapshots within ``wait_s`` and for good;
    actions naming it fail from then on."""
    if RemoveInstance not in fx.supports:
        return "does not support RemoveInstance"
    if AddInstance not in fx.supports:
        return "needs AddInstance to make instances to remove"
    found: list[Problem] = []
    drained, cut = "ck_drain", "ck_cut"
    env.apply([AddInstance(drained, fx.host), AddInstance(cut, fx.host)])
    seen = _watch(env, fx, lambda s: {drained, cut} <= set(s.instances), fx.boot_s + fx.wait_s)
    if not {drained, cut} <= set(seen[-1].instances):
        problem = Problem("AddInstance", f"{drained!r} and {cut!r} never both served")
        raise ContractError(env.name, "check_remove_instance", [problem])
    env.apply([RemoveInstance(drained, drain=True), RemoveInstance(cut, drain=False)])
    seen = _watch(env, fx, lambda s: not {drained, cut} & set(s.instances), fx.wait_s)
    if left := {drained, cut} & set(seen[-1].instances):
        found.append(Problem("RemoveInstance", f"{sorted(left)} still shown {fx.wait_s} s later"))
    for _ in range(2):
        snap = _next(env, fx)
        if back := {drained, cut} & set(snap.instances):
            found.append(Problem(f"snapshot@{snap.time_s!r}", f"{sorted(back)} came back"))
        _observation(snap, fx.serving, found, " (it serves)")
    for iid in (drained, cut):
        a = SetWeight(iid, 10) if SetWeight in fx.supports else RemoveInstance(iid)
        _refused(env, [a], [a], [], found)
    _done(env, "check_remove_instance", found)
    return None


def check_unknown_instance(fx: EnvironmentFixture[E], env: E) -> str | None:
    """An action naming an unknown instance (``AddInstance``: an unknown host, an id in use) is
    refused alone, and nothing changes."""
    found: list[Problem] = []
    before = _next(env, fx)
    for kind in ACTION_KINDS:
        if kind not in fx.supports:
            continue
        if kind is AddInstance:
            cases: list[Action] = [AddInstance(GHOST, NO_HOST), AddInstance(fx.serving, fx.host)]
        else:
            cases = [sample_action(kind, GHOST, fx.host)]
        for a in cases:
            _refused(env, [a], [a], [], found)
    after = _next(env, fx)
    _unchanged(before, after, fx.serving, found)
    _done(env, "check_unknown_instance", found)
    return None


def _unchanged(before: Snapshot, after: Snapshot, serving: str, found: list[Problem]) -> None:
    """No instance appeared, and the serving instance kept its weight, caps and settings."""
    where = f"snapshot@{after.time_s!r}"
    if new := set(after.instances) - set(before.instances):
        found.append(Problem(where, f"refused actions left {sorted(new)} behind"))
    b, a = before.instances.get(serving), after.instances.get(serving)
    if b is None or a is None:
        found.append(Problem(where, f"{serving!r} missing"))
        return
    if a.weight != b.weight:
        found.append(Problem(where, f"refused actions moved the weight {b.weight} -> {a.weight}"))
    for key in (MAXCONN_KEY, CPU_CAP_KEY, *SERVER_SETTING_KEYS.values()):
        if a.extra.get(key) != b.extra.get(key):
            found.append(
                Problem(
                    where, f"refused actions moved {key} {b.extra.get(key)} -> {a.extra.get(key)}"
                )
            )


def check_mixed_batch(fx: EnvironmentFixture[E], env: E) -> str | None:
    """In a batch of refused and carried-out actions, ``ActionError`` names exactly the refused
    ones; the rest are in force in the next snapshot, and the environment goes on observing."""
    if SetWeight not in fx.supports:
        return "needs SetWeight for an action whose effect shows"
    found: list[Problem] = []
    obs = _observation(_next(env, fx), fx.serving, found)
    w0 = obs.weight if obs is not None and obs.weight is not None else 100
    w = 41 if w0 != 41 else 42
    ok = SetWeight(fx.serving, w)
    bad: list[Action] = [SetWeight(GHOST, 5), AddInstance(GHOST, NO_HOST)]
    if AddInstance not in fx.supports:
        bad[1] = SetWeight(f"{GHOST}2", 6)
    _refused(env, [bad[0], ok, bad[1]], bad, [ok], found)
    for _ in range(2):
        snap = _next(env, fx)
        shown = _observation(snap, fx.serving, found, " after a partly refused batch")
        if shown is not None and shown.weight != w:
            found.append(Problem(repr(ok), f"applied, yet the weight shows {shown.weight!r}"))
        if GHOST in snap.instances:
            found.append(Problem(repr(bad[1]), "refused, yet the instance is shown"))
    env.apply([SetWeight(fx.serving, w0)])
    _done(env, "check_mixed_batch", found)
    return None


def check_unsupported_action(fx: EnvironmentFixture[E], env: E) -> str | None:
    """An action of a kind the environment does not support is refused as an unknown instance
    is: alone, with nothing changed, and by name in a mixed batch."""
    kinds = [k for k in ACTION_KINDS if k not in fx.supports]
    if not kinds:
        return "supports every Action kind"
    found: list[Problem] = []
    before = _next(env, fx)
    unsupported = [
        sample_action(k, "ck_unsup" if k is AddInstance else fx.serving, fx.host) for k in kinds
    ]
    for a in unsupported:
        _refused(env, [a], [a], [], found)
    _unchanged(before, _next(env, fx), fx.serving, found)
    if SetWeight in fx.supports:
        obs = before.instances.get(fx.serving)
        w0 = obs.weight if obs is not None and obs.weight is not None else 100
        ok = SetWeight(fx.serving, 43 if w0 != 43 else 44)
        _refused(env, [unsupported[0], ok], [unsupported[0]], [ok], found)
        shown = _observation(_next(env, fx), fx.serving, found)
        if shown is not None and shown.weight != ok.weight:
            found.append(Problem(repr(ok), f"applied, yet the weight shows {shown.weight!r}"))
        env.apply([SetWeight(fx.serving, w0)])
    _done(env, "check_unsupported_action", found)
    return None


def check_glance(fx: EnvironmentFixture[E], env: E) -> str | None:
    """A glance's fields and units are those of a snapshot; its time is the clock's and its
    ``interval_s`` the time since the last glance or observe, so a glance right after a glance
    covers only the time between; the next observe still covers its whole interval."""
    if fx.no_glance is not None:
        return fx.no_glance
    found: list[Problem] = []
    observed = last = _next(env, fx).time_s
    for step in (fx.step_s / 2, fx.step_s / 4, fx.step_s / 4):
        env.clock.sleep_until(env.clock.now() + step)
        before = env.clock.now()
        g = env.glance()
        after = env.clock.now()
        where = f"glance@{g.time_s!r}"
        if not before <= g.time_s <= after:
            found.append(Problem(where, f"time_s is not the clock's: it read {before} to {after}"))
        for iid, obs in g.instances.items():
            if abs(obs.interval_s - (g.time_s - last)) > TIME_TOLERANCE_S:
                found.append(
                    Problem(
                        f"{where}/{iid}.interval_s",
                        f"{obs.interval_s!r}, but the last glance or observe was "
                        f"{g.time_s - last!r} s before",
                    )
                )
        found += snapshot_problems(g, env.name)
        _observation(g, fx.serving, found, " (it serves)")
        last = g.time_s
    snap = _next(env, fx)
    for iid, obs in snap.instances.items():
        if abs(obs.interval_s - (snap.time_s - observed)) > TIME_TOLERANCE_S:
            found.append(
                Problem(
                    f"snapshot@{snap.time_s!r}/{iid}.interval_s",
                    f"{obs.interval_s!r} after glances, but the last observation was "
                    f"{snap.time_s - observed!r} s before",
                )
            )
    _done(env, "check_glance", found)
    return None


SHARED_CHECKS: tuple[SharedCheck, ...] = (
    check_snapshot,
    check_glance,
    check_set_weight,
    check_set_max_conn,
    check_set_cpu_cap,
    check_reconfigure_server,
    check_add_instance,
    check_remove_instance,
    check_unknown_instance,
    check_mixed_batch,
    check_unsupported_action,
)


# -- checks that make their own environments -----------------------------------------------------
def check_before_start(fx: EnvironmentFixture[E]) -> str | None:
    """Before its start step an environment refuses to observe or act, naming why, and can be
    closed (twice)."""
    if fx.start is None:
        return "has no start step: it observes from its creation"
    found: list[Problem] = []
    env = fx.create()
    try:
        found += _refuses(env, "observe", env.observe, _NOT_STARTED)
        found += _refuses(env, "glance", env.glance, _NOT_STARTED)
        act = SetWeight(fx.serving, 50)
        found += _refuses(env, "apply", lambda: env.apply([act]), _NOT_STARTED)
    finally:
        _closes(env, found, "close() before start")
        _closes(env, found, "close() twice before start")
    _done(env, "check_before_start", found)
    return None


def check_close(fx: EnvironmentFixture[E]) -> str | None:
    """``close`` twice is harmless; a closed environment refuses to observe or act."""
    found: list[Problem] = []
    env = fx.started()
    try:
        _next(env, fx)
    finally:
        _closes(env, found, "close()")
    _closes(env, found, "close() twice")
    found += _refuses(env, "observe", env.observe, _CLOSED)
    found += _refuses(env, "glance", env.glance, _CLOSED)
    act = SetWeight(fx.serving, 50)
    found += _refuses(env, "apply", lambda: env.apply([act]), _CLOSED)
    _done(env, "check_close", found)
    return None


GLANCES = 3
"""How many times ``check_glance_keeps_observe`` glances between two observations."""


def _glancing(env: Environment, fx: EnvironmentFixture[Any]) -> Snapshot:
    """``_next``, glancing ``GLANCES`` times on the way."""
    start = env.clock.now()
    for k in range(1, GLANCES + 1):
        env.clock.sleep_until(start + k * fx.step_s / (GLANCES + 1))
        env.glance()
    env.clock.sleep_until(start + fx.step_s)
    return env.observe()


def _script(
    env: Environment,
    fx: EnvironmentFixture[Any],
    step: Callable[[Environment, EnvironmentFixture[Any]], Snapshot] = _next,
) -> list[Snapshot]:
    snaps = [step(env, fx) for _ in range(3)]
    batch: list[Action] = []
    if SetWeight in fx.supports:
        batch.append(SetWeight(fx.serving, 60))
    if AddInstance in fx.supports:
        batch.append(AddInstance("ck_seed", fx.host))
    env.apply(batch)
    ticks = math.ceil(fx.boot_s / fx.step_s) + 3
    return snaps + [step(env, fx) for _ in range(ticks)]


def check_same_seed(fx: EnvironmentFixture[E]) -> str | None:
    """Two environments made alike, observed and acted on alike, give identical snapshots."""
    return _alike(fx, "check_same_seed", _next)


GLANCE_REL_TOLERANCE = 1e-9
"""How far a value observed after glances may lie from the one observed without, relative: an
environment that runs in steps (the simulator's event core) brings its clocks and areas up to
the glance's time, as it does for an action, and a sum taken in two steps rounds its last bits
differently (a busy-worker mean of 15.000000000000018 against 15.000000000000002)."""


def check_glance_keeps_observe(fx: EnvironmentFixture[E]) -> str | None:
    """Two environments made alike, observed and acted on alike, one glanced at ``GLANCES``
    times between its observations, give the same snapshots: the same instances, counts and
    weights, and every other value within ``GLANCE_REL_TOLERANCE``: a glance closes no
    interval."""
    return _alike(fx, "check_glance_keeps_observe", _glancing, GLANCE_REL_TOLERANCE)


def _same(a: object, b: object, rel: float) -> bool:
    """``a == b``, floats (and mappings of them) within ``rel`` of each other."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=rel * 1e-3)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rel) for k in a)
    return a == b


def _alike(
    fx: EnvironmentFixture[Any],
    check: str,
    second: Callable[[Environment, EnvironmentFixture[Any]], Snapshot],
    rel: float = 0.0,
) -> str | None:
    """Run the script on two environments made alike, the second stepped by ``second``; the
    first snapshot that differs, field by field."""
    if fx.not_repeatable is not None:
        return fx.not_repeatable
    runs: list[list[Snapshot]] = []
    for step in (_next, second):
        env = fx.started()
        try:
            runs.append(_script(env, fx, step))
        finally:
            env.close()
    found: list[Problem] = []
    for a, b in zip(*runs, strict=True):
        if a == b:
            continue
        problems = len(found)
        where = f"snapshot@{a.time_s!r}"
        if set(a.instances) != set(b.instances) or a.time_s != b.time_s:
            found.append(Problem(where, f"{sorted(a.instances)} vs {sorted(b.instances)}"))
        for iid in sorted(set(a.instances) & set(b.instances)):
            oa, ob = a.instances[iid], b.instances[iid]
            for f in fields(Observation):
                va, vb = getattr(oa, f.name), getattr(ob, f.name)
                if not _same(va, vb, rel):
                    found.append(Problem(f"{where}/{iid}.{f.name}", f"{va!r} vs {vb!r}"))
        if len(found) > problems:
            break  # the first snapshot that differs says enough
    _done(env, check, found)
    return None


OWN_CHECKS: tuple[OwnCheck, ...] = (
    check_before_start,
    check_close,
    check_same_seed,
    check_glance_keeps_observe,
)


# -- the runner ------------------------------------------------------------------------------------
Outcome = Literal["passed", "failed", "not applicable"]


@dataclass(frozen=True)
class CheckResult:
    check: str
    outcome: Outcome
    detail: str = ""
    """What was wrong (failed), or why the check does not apply."""


def _outcome(name: str, run: Callable[[], str | None]) -> CheckResult:
    try:
        why = run()
    except ContractError as exc:
        return CheckResult(name, "failed", str(exc))
    except Exception as exc:  # whatever an environment raises, the check failed with it
        return CheckResult(name, "failed", f"raised {type(exc).__name__}: {exc}")
    return CheckResult(name, "passed") if why is None else CheckResult(name, "not applicable", why)


def run_checks(fx: EnvironmentFixture[E]) -> list[CheckResult]:
    """Every check over the environment ``fx`` makes: the shared ones one after the other on
    one started environment (closed at the end), then those that make their own."""
    results: list[CheckResult] = []
    env = fx.started()
    try:
        for shared in SHARED_CHECKS:
            results.append(_outcome(shared.__name__, partial(shared, fx, env)))
    finally:
        env.close()
    for own in OWN_CHECKS:
        results.append(_outcome(own.__name__, partial(own, fx)))
    return results

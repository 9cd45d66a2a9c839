"""What the ``service`` section turns into before the run (``plan_service``, once): request
sizes, slowdown changes, the on/off timeline of host interference, closed-loop users' requests
and think times, and what an apache instance's settings cost."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.errors import InputError, Problem
from quell.scenario.model import ApacheSettings, Host, Instance, Scenario
from quell.scenario.schedule import build_schedule
from quell.scenario.service import (
    ApacheModel,
    DeterministicSize,
    EmpiricalSize,
    ExponentialSize,
    HostInterference,
    OnOffSlowdown,
    ScheduledSlowdown,
    ServiceModel,
    SizeModel,
)
from quell.workload.population import USER_STREAM, draw_block
from quell.workload.schedule import RequestSchedule, mix_schedule
from quell.workload.spec import ClosedLoopSpec

MAX_TAKEN_SHARE = 0.95
"""Neighbours with a bitrate (iperf3 ``bitrate_mbit``, ``service.interference``) take at most
this share of a host's link."""


# -- request sizes ---------------------------------------------------------------------------------
#
# One class per distribution ``service.size`` allows (as Ciw's distributions are): each draws
# samples and states its mean and variance in closed form, which the theory tests hold it to.


class Exponential:
    """Exponential sizes of mean m: variance m²."""

    def __init__(self, mean: float = 1.0) -> None:
        self.mean = mean

    @property
    def variance(self) -> float:
        return self.mean**2

    def sample(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        return np.asarray(self.mean * rng.standard_exponential(n), dtype=np.float64)


class Deterministic:
    """Every size m: variance 0."""

    def __init__(self, mean: float = 1.0) -> None:
        self.mean = mean

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        return np.full(n, self.mean, dtype=np.float64)


class Lognormal:
    """m · exp(σZ − σ²/2), Z standard normal: mean m, variance m² (e^(σ²) − 1)."""

    def __init__(self, mean: float = 1.0, sigma: float = 1.0) -> None:
        self.mean = mean
        self.sigma = sigma

    @property
    def variance(self) -> float:
        return self.mean**2 * math.expm1(self.sigma**2)

    def sample(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        z = rng.standard_normal(n)
        return np.asarray(
            self.mean * np.exp(self.sigma * z - self.sigma**2 / 2.0), dtype=np.float64
        )


class Empirical:
    """One of ``values`` at random, each as likely: their mean and (population) variance."""

    def __init__(self, values: Sequence[float]) -> None:
        self.values = np.asarray(values, dtype=np.float64)

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    @property
    def variance(self) -> float:
        return float(self.values.var())

    def sample(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        return self.values[rng.integers(0, self.values.size, size=n)]


SizeDistribution = Exponential | Deterministic | Lognormal | Empirical


def size_distribution(model: SizeModel) -> SizeDistribution:
    """The distribution ``service.size`` names; of mean 1 when it gives no ``mean_bytes``
    (then each request's size is its own file's times a draw)."""
    if isinstance(model, EmpiricalSize):
        return Empirical(model.values_bytes)
    mean = 1.0 if model.mean_bytes is None else model.mean_bytes
    if isinstance(model, ExponentialSize):
        return Exponential(mean)
    if isinstance(model, DeterministicSize):
        return Deterministic(mean)
    return Lognormal(mean, model.sigma)


def draw_sizes(
    model: SizeModel | None, nominal_bytes: NDArray[np.int64], seed: int
) -> NDArray[np.float64]:
    """Request sizes: the nominal ones (each request's file) or drawn from ``model``, whose mean
    is ``model.mean_bytes`` or, when unset, each request's nominal size."""
    if model is None:
        return nominal_bytes.astype(np.float64)
    return draw_sizes_from(model, nominal_bytes, component_rng(seed, "sim/sizes"))


def draw_sizes_from(
    model: SizeModel | None, nominal_bytes: NDArray[np.int64], rng: np.random.Generator
) -> NDArray[np.float64]:
    """``draw_sizes`` from the generator ``rng``, which goes on from where it is."""
    nominal = nominal_bytes.astype(np.float64)
    if model is None:
        return nominal
    drawn = size_distribution(model).sample(rng, nominal.size)
    if isinstance(model, EmpiricalSize) or model.mean_bytes is not None:
        return drawn
    return nominal * drawn


def slowdown_changes(
    specs: Sequence[ScheduledSlowdown | OnOffSlowdown],
    instance_ids: Sequence[str],
    duration_s: float,
    seed: int,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """(time, instance index, slowdown factor) for every change, sorted by time."""
    index = {iid: k for k, iid in enumerate(instance_ids)}
    times: list[float] = []
    insts: list[int] = []
    factors: list[float] = []
    problems: list[Problem] = []
    owner: dict[str, int] = {}
    for k, spec in enumerate(specs):
        targets = list(instance_ids) if spec.instances is None else spec.instances
        for iid in targets:
            where = f"service.slowdown[{k}].instances"
            if iid not in index:
                problems.append(Problem(where, f"unknown instance {iid!r}"))
                continue
            if iid in owner:
                problems.append(
                    Problem(where, f"{iid!r} already has slowdown[{owner[iid]}] (one per instance)")
                )
                continue
            owner[iid] = k
            i = index[iid]
            if isinstance(spec, ScheduledSlowdown):
                for pt in spec.points:
                    if pt.at_s < duration_s:
                        times.append(pt.at_s)
                        insts.append(i)
                        factors.append(pt.factor)
                continue
            rng = component_rng(seed, f"sim/slowdown/{k}/{iid}")
            start: Literal["on", "off"] = "on" if spec.start_on else "off"
            for t, on in onoff_switches(rng, spec, start, duration_s):
                times.append(t)
                insts.append(i)
                factors.append(spec.factor if on else 1.0)
    if problems:
        raise InputError("service", problems)
    t_arr = np.asarray(times, dtype=np.float64)
    i_arr = np.asarray(insts, dtype=np.int64)
    order = np.lexsort((i_arr, t_arr))
    return t_arr[order], i_arr[order], np.asarray(factors, dtype=np.float64)[order]


def onoff_switches(
    rng: np.random.Generator,
    spec: OnOffSlowdown | HostInterference,
    start: Literal["on", "off", "stationary"],
    duration_s: float,
) -> Iterator[tuple[float, bool]]:
    """(time, on) at 0 and at every switch before ``duration_s`` of an on/off source.

    ``stationary`` starts the source as if it had run for ever: on with probability
    on / (on + off), with the time left in that state exponential (memoryless) or, for fixed
    periods, uniform over the period."""
    fixed = spec.durations == "fixed"

    def length(on: bool) -> float:
        mean = spec.on_seconds if on else spec.off_seconds
        return mean if fixed else float(rng.exponential(mean))

    if start == "stationary":
        on = bool(rng.random() < spec.on_seconds / (spec.on_seconds + spec.off_seconds))
        left = length(on)
        if fixed:
            left *= float(rng.random())
    else:
        on = start == "on"
        left = length(on)
    t = 0.0
    while t < duration_s:
        yield t, on
        t += left
        on = not on
        left = length(on)


def interference_changes(
    specs: Sequence[HostInterference], hosts: Sequence[Host], duration_s: float, seed: int
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """(time, host index, bytes/s the host's neighbours take from then on) at every switch of
    ``service.interference``, sorted by time; the level sums every source on the host.

    Each (source k, host) pair draws from its own stream ``sim/interference/{k}/{host}``, so a
    host's timeline does not depend on which other hosts the source covers."""
    index = {h.id: j for j, h in enumerate(hosts)}
    problems: list[Problem] = []
    times: list[float] = []
    where: list[int] = []
    delta: list[float] = []
    for k, spec in enumerate(specs):
        targets = [h.id for h in hosts] if spec.hosts is None else spec.hosts
        for hid in targets:
            loc = f"service.interference[{k}].hosts"
            j = index.get(hid)
            if j is None:
                problems.append(Problem(loc, f"unknown host {hid!r}"))
                continue
            if hosts[j].link_mbit is None:
                problems.append(Problem(loc, f"host {hid!r} has no link_mbit to interfere on"))
                continue
            rate = spec.bitrate_mbit * 1e6 / 8.0
            rng = component_rng(seed, f"sim/interference/{k}/{hid}")
            was_on = False
            for t, on in onoff_switches(rng, spec, spec.start, duration_s):
                if on != was_on:
                    times.append(t)
                    where.append(j)
                    delta.append(rate if on else -rate)
                was_on = on
    if problems:
        raise InputError("service", problems)
    t_arr = np.asarray(times, dtype=np.float64)
    h_arr = np.asarray(where, dtype=np.int64)
    d_arr = np.asarray(delta, dtype=np.float64)
    seq = np.arange(t_arr.size)
    by_host = np.lexsort((seq, t_arr, h_arr))
    level = np.empty_like(d_arr)
    if by_host.size:
        run = np.cumsum(d_arr[by_host])
        first = np.r_[True, h_arr[by_host][1:] != h_arr[by_host][:-1]]
        offset = np.maximum.accumulate(np.where(first, np.arange(by_host.size), 0))
        base = np.where(offset > 0, run[offset - 1], 0.0)
        lv = run - base
        level[by_host] = np.where(lv < 1e-3, 0.0, lv)  # sums of ± rates: no float residue
    by_time = np.lexsort((seq, t_arr))
    return t_arr[by_time], h_arr[by_time], level[by_time]


# -- closed-loop users ---------------------------------------------------------------------------


def closed_loop_paths(scenario: Scenario) -> RequestSchedule:
    """What closed-loop users ask for: the workload's paths and their sizes, no request yet."""
    wl = scenario.workload
    assert wl.requests is not None  # closed-loop users send the mix, never video sessions
    return mix_schedule(
        np.empty(0),
        tuple(r.path for r in wl.requests),
        np.array([r.weight for r in wl.requests], dtype=np.float64),
        {f.path: f.size_bytes for f in scenario.files}
        | {p.path: p.response_bytes for p in scenario.pages},
        component_rng(scenario.seed, "workload/paths"),
    )


def page_index(scenario: Scenario, paths: Sequence[str]) -> NDArray[np.int64]:
    """Per path, 1 + its place in ``scenario.pages`` when it is a PHP page, else 0."""
    pages = {p.path: k + 1 for k, p in enumerate(scenario.pages)}
    return np.asarray([pages.get(p, 0) for p in paths], dtype=np.int64)


class ClosedLoopDraws:
    """What each closed-loop user asks for and how long it thinks, drawn as the event core asks
    (``EventCore.add_users``) from the user's own stream ``workload/users/<k>`` by the lab's
    own function (``quell.workload.population.draw_block``): request j takes uniforms 2j (its
    path, by inverse CDF over the mix's weights) and 2j + 1 (the think after its answer,
    -Z·ln(1 - u): exponential of mean ``think_time_s``). With ``service.size`` each request's
    size is drawn from the user's stream ``sim/sizes/users/<k>``."""

    def __init__(
        self, scenario: Scenario, paths: RequestSchedule, pages: NDArray[np.int64]
    ) -> None:
        arrival = scenario.workload.arrival
        assert isinstance(arrival, ClosedLoopSpec) and scenario.workload.requests is not None
        self.seed = scenario.seed
        self.think_s = arrival.think_time_s
        self.size_model = scenario.service.size if scenario.service else None
        self.cum = np.cumsum([r.weight for r in scenario.workload.requests], dtype=np.float64)
        self.nominal = np.asarray(paths.sizes_bytes, dtype=np.int64)
        self.pages = pages
        self._rngs: dict[int, tuple[np.random.Generator, np.random.Generator | None]] = {}

    def __call__(
        self, user: int
    ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
        if user not in self._rngs:
            sizes = None
            if self.size_model is not None:
                sizes = component_rng(self.seed, f"sim/sizes/users/{user}")
            self._rngs[user] = (component_rng(self.seed, USER_STREAM.format(user)), sizes)
        rng, sizes_rng = self._rngs[user]
        pick, think = draw_block(rng, self.cum, self.think_s)
        nominal = self.nominal[pick]
        size = (
            nominal.astype(np.float64)
            if sizes_rng is None
            else draw_sizes_from(self.size_model, nominal, sizes_rng)
        )
        return size, self.pages[pick], think


# -- apache instances ------------------------------------------------------------------------------


def apache_cpus(model: ApacheModel, instance: Instance | None, host: Host) -> float:
    """Cores of an apache instance: ``service.apache.cpus``, else the CPUs the instance (or
    else its host) is pinned to, else 2."""
    if model.cpus is not None:
        return model.cpus
    pinned = (instance.cpus if instance is not None else None) or host.cpus
    return float(len(pinned)) if pinned else 2.0


def memory_factor(model: ApacheModel, settings: ApacheSettings) -> float:
    """How much slower an apache instance is under memory pressure: with its workers' and
    php-fpm children's memory M over ``memory_bytes``, 1 + ``swap_slowdown`` × (M / memory − 1)."""
    if model.memory_bytes is None:
        return 1.0
    used = (
        settings.max_request_workers * model.worker_memory_bytes
        + settings.php_max_children * model.php_child_memory_bytes
    )
    return 1.0 + model.swap_slowdown * max(0.0, used / model.memory_bytes - 1.0)


# -- all of it, before a run ----------------------------------------------------------------------

Changes = tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]
"""(time, index, value) of each change, sorted by time."""


@dataclass(frozen=True)
class ServicePlan:
    """What a scenario's workload and ``service`` section turn into before its simulator run."""

    schedule: RequestSchedule
    """The request schedule; for closed-loop users, none (no times: only the paths)."""
    sizes_bytes: NDArray[np.float64]
    """Each scheduled request's size (``service.size``)."""
    pages: NDArray[np.int64]
    """Each path's PHP page (1 + its place in ``scenario.pages``; 0: a static file)."""
    slowdown: Changes
    """``service.slowdown``: (time, instance index in ``scenario.instances``, factor)."""
    interference: Changes
    """``service.interference``: (time, host index, bytes/s the host's neighbours take)."""
    cpus: list[float]
    """Each instance's cores, were it an apache instance (``apache_cpus``)."""
    users: ClosedLoopDraws | None
    """What closed-loop users ask for and think (none for an open-loop workload)."""


def plan_service(
    scenario: Scenario, base_dir: Path, schedule: RequestSchedule | None = None
) -> ServicePlan:
    """The scenario's ``ServicePlan`` (``schedule``: one built already); raises one
    ``InputError`` naming every problem: an instance with no capacity (not an apache instance,
    on a host without ``link_mbit``, and no ``service.capacity_bytes_per_s``), a slowdown or
    interference naming what does not exist."""
    svc = scenario.service or ServiceModel()
    closed = isinstance(scenario.workload.arrival, ClosedLoopSpec)
    if schedule is None:
        schedule = closed_loop_paths(scenario) if closed else build_schedule(scenario, base_dir)
    problems = [
        Problem(
            f"instances[{k}]",
            f"host {inst.host!r} has no link_mbit: set service.capacity_bytes_per_s",
        )
        for k, inst in enumerate(scenario.instances)
        if inst.server != "apache"
        and scenario.host(inst.host).link_mbit is None
        and svc.capacity_bytes_per_s is None
    ]
    empty: Changes = (np.empty(0), np.empty(0, dtype=np.int64), np.empty(0))
    interference, slowdown = empty, empty
    try:
        interference = interference_changes(
            svc.interference, scenario.hosts, scenario.duration_s, scenario.seed
        )
    except InputError as exc:
        problems.extend(exc.problems)
    try:
        slowdown = slowdown_changes(
            svc.slowdown, [i.id for i in scenario.instances], scenario.duration_s, scenario.seed
        )
    except InputError as exc:
        problems.extend(exc.problems)
    if problems:
        raise InputError(scenario.name, problems)
    pages = page_index(scenario, schedule.paths)
    return ServicePlan(
        schedule=schedule,
        sizes_bytes=draw_sizes(svc.size, schedule.size_bytes, scenario.seed),
        pages=pages,
        slowdown=slowdown,
        interference=interference,
        cpus=[apache_cpus(svc.apache, i, scenario.host(i.host)) for i in scenario.instances],
        users=ClosedLoopDraws(scenario, schedule, pages) if closed else None,
    )

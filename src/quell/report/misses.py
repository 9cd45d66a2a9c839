"""Where a run's missed instance-intervals fall against its neighbours' arrivals, and how many of
them no policy that decides at interval boundaries could have avoided at the run's loading.

An instance-interval (instance, (t − Δ, t]) with at least one completed request is *served*; it
*misses* when its mean response time is above R_th (``target.mean_rt_s``). Each miss is placed
by the neighbours' arrivals on its instance's host (a rise of its ``service.interference`` level,
or an event starting an antagonist there):

* ``arrival``: a neighbour arrived in [t − Δ, t) — no policy can see it before the interval ends
  (the settled SLO leaves these out, ``quell.report.slo``);
* ``next``: one arrived in the interval before; ``second``: in the one before that;
* ``on``: a neighbour was there at t − Δ, having arrived earlier;
* ``clear``: no neighbour at t − Δ and none arrived since — the load's own scatter, or requests
  slowed by a neighbour that has left.

and by whether the instance served at weight 0 (only requests sent before its weight went to
0 completed: they were *stranded*) or above.

**What a policy could not have avoided.** A neighbour that arrives while an instance holds
requests slows those requests whatever the policy does next: the policy learns of it at the
interval's end at the earliest, and can then send the instance nothing more, but the requests it
holds complete in the next interval, behind the neighbour. ``arrivals_served`` counts the
intervals a neighbour arrived in on an instance serving at a weight above 0,
``arrivals_in_flight`` those of them at whose end the instance still held a request
(``extra["oldest_in_flight_seconds"]``, which the simulator reports), and
``stranded_intervals`` / ``stranded_misses`` the intervals right after an arrival interval that
the instance served at weight 0, and how many of them missed. A policy that took all load off
every instance at the first decision after its neighbour arrived would still miss about
``arrivals_in_flight × stranded_misses / stranded_intervals`` intervals (``stranded_bound``)
at this run's loading, besides those of the arrival intervals themselves: the most it could
score is ``settled_ceiling`` over the intervals the settled SLO counts (served ones less the
arrival intervals), and ``all_ceiling`` over all served ones. These are estimates at the
run's own loading: a policy that loads each instance less holds fewer requests at an arrival,
at the price of more instances.

**When the fleet itself falls short.** In some intervals even every host the policy may use,
each at its true capacity, could not carry the load within R_th (the oracle's infeasible
intervals, ``quell.models.oracle``): some instance must then be loaded past what meets R_th,
whatever the split. ``short_intervals`` counts those intervals and ``short_misses`` the misses
that fell in them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import OLDEST_KEY, Observation
from quell.errors import InputError, Problem, QuellError
from quell.report.slo import instance_hosts
from quell.scenario.model import Scenario
from quell.scenario.service import ServiceModel
from quell.sim.service import interference_changes
from quell.store.run import RunStore

if TYPE_CHECKING:
    from rich.console import Console

SCENARIO_FILE = "scenario.yaml"
PLACES: tuple[str, ...] = ("arrival", "next", "second", "on", "clear")
PLACE_TEXT = {
    "arrival": "the interval a neighbour arrived in",
    "next": "the next interval",
    "second": "the one after",
    "on": "a neighbour there from before",
    "clear": "no neighbour",
}


@dataclass(frozen=True)
class MissBreakdown:
    target_rt_s: float
    served: int
    """Instance-intervals with at least one completed request."""
    misses: int
    """Of those, the ones whose mean RT is above the target."""
    by_place: dict[str, tuple[int, int]]
    """Misses per place (``PLACES``): (served at a weight above 0, at weight 0)."""
    arrival_served: int
    """Served instance-intervals a neighbour arrived in (whatever the weight)."""
    arrivals_served: int
    """Instance-intervals a neighbour arrived in, on an instance serving at a weight above 0."""
    arrivals_in_flight: int | None
    """Of those, the ones at whose end the instance still held a request (``None``: the
    environment does not say)."""
    stranded_intervals: int
    """Served instance-intervals right after an arrival interval, at weight 0."""
    stranded_misses: int
    """Of those, the ones above the target."""
    short_intervals: int | None = None
    """Intervals in which every host the policy may use together could not carry the load
    within R_th (the oracle's infeasible ones; ``None``: the oracle does not apply)."""
    short_misses: int = 0
    """Misses that fell in those intervals."""
    notes: list[str] = field(default_factory=list)

    @property
    def stranded_bound(self) -> float | None:
        """The misses a policy that took all load off at the first decision after every
        arrival would still have had (``None``: not enough in the run to say)."""
        if self.stranded_intervals == 0 or self.arrivals_in_flight is None:
            return None
        return self.arrivals_in_flight * self.stranded_misses / self.stranded_intervals

    @property
    def settled_ceiling(self) -> float | None:
        bound, counted = self.stranded_bound, self.served - self.arrival_served
        if bound is None or counted <= 0:
            return None
        return 1.0 - bound / counted

    @property
    def all_ceiling(self) -> float | None:
        bound = self.stranded_bound
        if bound is None or self.served == 0:
            return None
        return 1.0 - (bound + sum(self.by_place["arrival"])) / self.served

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MissBreakdown:
        """The breakdown ``to_dict`` (or ``quell sim misses --json``) wrote."""
        return cls(
            target_rt_s=float(d["target_rt_s"]),
            served=int(d["served"]),
            misses=int(d["misses"]),
            by_place={
                p: (int(d["by_place"][p]["weight_above_0"]), int(d["by_place"][p]["weight_0"]))
                for p in PLACES
            },
            arrival_served=int(d["arrival_served"]),
            arrivals_served=int(d["arrivals_served"]),
            arrivals_in_flight=(
                None if d["arrivals_in_flight"] is None else int(d["arrivals_in_flight"])
            ),
            stranded_intervals=int(d["stranded_intervals"]),
            stranded_misses=int(d["stranded_misses"]),
            short_intervals=(
                None if d.get("short_intervals") is None else int(d["short_intervals"])
            ),
            short_misses=int(d.get("short_misses", 0)),
            notes=[str(n) for n in d.get("notes", [])],
        )

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 6) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "target_rt_s": self.target_rt_s,
            "served": self.served,
            "misses": self.misses,
            "by_place": {
                p: {"weight_above_0": a, "weight_0": z} for p, (a, z) in self.by_place.items()
            },
            "arrival_served": self.arrival_served,
            "arrivals_served": self.arrivals_served,
            "arrivals_in_flight": self.arrivals_in_flight,
            "stranded_intervals": self.stranded_intervals,
            "stranded_misses": self.stranded_misses,
            "short_intervals": self.short_intervals,
            "short_misses": self.short_misses,
            "stranded_bound": r(self.stranded_bound, 1),
            "settled_ceiling": r(self.settled_ceiling),
            "all_ceiling": r(self.all_ceiling),
            "notes": self.notes,
        }


Timeline = tuple[NDArray[np.float64], NDArray[np.float64]]


def neighbour_arrivals(
    scenario: Scenario,
) -> tuple[dict[str, NDArray[np.float64]], dict[str, Timeline]]:
    """Per host: the times neighbours arrived (a ``service.interference`` source switched on,
    or an event started an antagonist there), and (times, neighbours there from then on) at
    every switch, to tell whether a neighbour was there at a given time."""
    svc = scenario.service or ServiceModel()
    t, h, level = interference_changes(
        svc.interference, scenario.hosts, scenario.duration_s, scenario.seed
    )
    ids = [x.id for x in scenario.hosts]
    # (time, host, +1 for a neighbour switching on, -1 for one switching off)
    changes: list[tuple[float, str, float]] = []
    last: dict[str, float] = {}
    for ti, hi, li in zip(t.tolist(), h.tolist(), level.tolist(), strict=True):
        changes.append((ti, ids[hi], 1.0 if li > last.get(ids[hi], 0.0) else -1.0))
        last[ids[hi]] = li
    host_of = {a.id: a.host for a in scenario.antagonists}
    running: set[str] = set()
    for ev in sorted(scenario.events, key=lambda e: e.at_s):
        for a in ev.start:
            if a in host_of and a not in running:
                running.add(a)
                changes.append((ev.at_s, host_of[a], 1.0))
        for a in ev.stop:
            if a in running:
                running.discard(a)
                changes.append((ev.at_s, host_of[a], -1.0))
    rises: dict[str, list[float]] = {}
    steps: dict[str, tuple[list[float], list[float]]] = {}
    for ti, hid, delta in sorted(changes, key=lambda c: c[0]):
        times, levels = steps.setdefault(hid, ([0.0], [0.0]))
        if delta > 0:
            rises.setdefault(hid, []).append(ti)
        times.append(ti)
        levels.append(levels[-1] + delta)
    arrivals = {k: np.asarray(v, dtype=np.float64) for k, v in rises.items()}
    timelines = {k: (np.asarray(a), np.asarray(b)) for k, (a, b) in steps.items()}
    return arrivals, timelines


def miss_breakdown(
    observations: Sequence[Observation],
    scenario: Scenario,
    host_of: dict[str, str],
    in_flight_reported: bool = True,
    short_ends_s: NDArray[np.float64] | None = None,
) -> MissBreakdown:
    """The breakdown of ``observations`` (a run of ``scenario``, which needs a target);
    ``host_of``: each instance's host, the initial ones and every one added;
    ``in_flight_reported``: whether the environment reports ``OLDEST_KEY`` whenever an instance
    holds a request (the simulator does; the lab does not); ``short_ends_s``: the end times of
    the intervals in which the whole fleet falls short (``fleet_short_ends``; ``None``: not
    known)."""
    if scenario.target is None:
        raise ValueError("the breakdown needs target.mean_rt_s")
    rth = scenario.target.mean_rt_s
    arrivals, timelines = neighbour_arrivals(scenario)
    empty = np.empty(0)

    def arrived(host: str, lo: float, hi: float) -> bool:
        """Whether a neighbour arrived in [lo, hi): one at an interval's end acts in the next."""
        a = arrivals.get(host, empty)
        return bool(np.searchsorted(a, hi, side="left") > np.searchsorted(a, lo, side="left"))

    def there(host: str, at: float) -> bool:
        tl = timelines.get(host)
        if tl is None:
            return False
        k = int(np.searchsorted(tl[0], at, side="right")) - 1
        return bool(tl[1][k] > 0)

    counts = {p: [0, 0] for p in PLACES}
    served = misses = arrival_served = arrivals_served = in_flight = 0
    stranded = stranded_missed = 0
    short_missed = 0
    short = np.sort(np.asarray([] if short_ends_s is None else short_ends_s, dtype=np.float64))

    def in_short(t: float, dt: float) -> bool:
        """Whether the interval (t − dt, t] is one of the short ones (matched to half an
        interval, as observation times carry the clock's jitter)."""
        k = int(np.searchsorted(short, t - dt / 2))
        return k < short.size and abs(float(short[k]) - t) < dt / 2

    for o in observations:
        host = host_of.get(o.instance_id)
        if host is None:
            continue
        t, dt = o.time_s, o.interval_s
        at_zero = o.weight == 0
        if o.requests > 0:
            served += 1
        if arrived(host, t - dt, t):
            place = "arrival"
            if o.requests > 0:
                arrival_served += 1
            if not at_zero:
                arrivals_served += 1
                in_flight += OLDEST_KEY in o.extra
        elif arrived(host, t - 2 * dt, t - dt):
            place = "next"
            if at_zero and o.requests > 0:
                stranded += 1
                stranded_missed += o.mean_rt_seconds is not None and o.mean_rt_seconds > rth
        elif arrived(host, t - 3 * dt, t - 2 * dt):
            place = "second"
        elif there(host, t - dt):
            place = "on"
        else:
            place = "clear"
        if o.requests > 0 and o.mean_rt_seconds is not None and o.mean_rt_seconds > rth:
            misses += 1
            counts[place][1 if at_zero else 0] += 1
            short_missed += in_short(t, dt)
    notes = []
    if not arrivals:
        notes.append("no neighbour arrives in the scenario: every miss is 'clear'")
    if not in_flight_reported:
        notes.append(
            "the run does not report the requests an instance holds: no estimate of the "
            "misses a policy could not have avoided"
        )
    return MissBreakdown(
        target_rt_s=rth,
        served=served,
        misses=misses,
        by_place={p: (a, z) for p, (a, z) in counts.items()},
        arrival_served=arrival_served,
        arrivals_served=arrivals_served,
        arrivals_in_flight=in_flight if in_flight_reported else None,
        stranded_intervals=stranded,
        stranded_misses=stranded_missed,
        short_intervals=None if short_ends_s is None else int(short.size),
        short_misses=short_missed,
        notes=notes,
    )


def fleet_short_ends(scenario: Scenario, base_dir: Path) -> NDArray[np.float64] | None:
    """The end times of the intervals in which every host ``scenario`` lets a policy use,
    each at its true capacity, could not carry the load within R_th (the oracle's infeasible
    intervals); ``None`` where the oracle does not apply (no host with a link)."""
    from quell.sim.headroom import run_oracle

    if not any(h.link_mbit is not None for h in scenario.hosts):
        return None
    oracle = run_oracle(scenario, base_dir)
    return np.asarray(oracle.interval_end_s[oracle.infeasible], dtype=np.float64)


def run_miss_breakdown(run_dir: Path) -> tuple[str, MissBreakdown]:
    """The scenario's name and the breakdown of the run in ``run_dir`` (its ``scenario.yaml``
    and ``run.db``)."""
    from quell.scenario import load_scenario

    where = str(run_dir)
    if not (run_dir / "run.db").is_file() or not (run_dir / SCENARIO_FILE).is_file():
        raise InputError(
            where, [Problem("run_dir", "not a run directory (no run.db or scenario.yaml)")]
        )
    scenario = load_scenario(run_dir / SCENARIO_FILE)
    if scenario.target is None:
        raise InputError(where, [Problem("target.mean_rt_s", "the breakdown needs a target")])
    store = RunStore.open(run_dir)
    try:
        observations = store.observations()
        hosts = instance_hosts(store, scenario)
        environment = store.meta().get("environment")
    except sqlite3.DatabaseError as exc:
        raise InputError(where, [Problem("run.db", f"unreadable run store: {exc}")]) from None
    finally:
        store.close()
    try:
        short_ends = fleet_short_ends(scenario, run_dir)
    except QuellError:  # the load comes from a file the run directory does not hold
        short_ends = None
    return scenario.name, miss_breakdown(
        observations,
        scenario,
        hosts,
        in_flight_reported=environment == "sim",
        short_ends_s=short_ends,
    )


def print_breakdown(name: str, b: MissBreakdown, console: Console) -> None:
    """The breakdown as a table and, where the run says it, what no policy could have avoided."""
    from rich.markup import escape

    from quell.report.fit import FitTable

    table = FitTable(
        title=f"{escape(name)}: {b.misses:,} of {b.served:,} served instance-intervals above "
        f"R_th ({b.target_rt_s * 1e3:g} ms)",
        title_justify="left",
    )
    for header in ("where the interval fell", "weight > 0", "weight 0", "total"):
        table.add_column(header, justify="left" if header.startswith("where") else "right")
    for place in PLACES:
        above, zero = b.by_place[place]
        table.add_row(PLACE_TEXT[place], f"{above:,}", f"{zero:,}", f"{above + zero:,}")
    console.print(table)
    for note in b.notes:
        console.print(note, markup=False)
    if (text := ceiling_text(b)) is not None:
        console.print(text, markup=False)
    if (text := short_text(b)) is not None:
        console.print(text, markup=False)


def short_text(b: MissBreakdown) -> str | None:
    """The intervals in which the fleet itself fell short, in words (``None``: none, or not
    known)."""
    if not b.short_intervals:
        return None
    return (
        f"In {b.short_intervals:,} intervals every host the policy may use, each at its true "
        f"capacity, could not carry the load within R_th together (the oracle's infeasible "
        f"intervals): {b.short_misses:,} of the misses fell in them."
    )


def ceiling_text(b: MissBreakdown) -> str | None:
    """What no policy deciding at interval boundaries could have avoided, in words (``None``:
    the run does not say)."""
    if not b.arrivals_served or b.arrivals_in_flight is None or b.stranded_bound is None:
        return None
    share = b.arrivals_in_flight / b.arrivals_served
    rate = b.stranded_misses / b.stranded_intervals
    settled, overall = b.settled_ceiling, b.all_ceiling
    return (
        f"A neighbour arrived {b.arrivals_served:,} times on an instance serving at a weight "
        f"above 0 ({b.arrivals_served / max(b.served, 1):.2%} of served instance-intervals); "
        f"{b.arrivals_in_flight:,} of those times ({share:.1%}) the instance still held a "
        f"request at the interval's end. Of the {b.stranded_intervals:,} intervals after an "
        f"arrival that an instance served at weight 0 (only requests sent before), "
        f"{b.stranded_misses:,} ({rate:.1%}) missed. A policy that took all load off at the "
        f"first decision after every arrival would still miss about "
        f"{b.stranded_bound:,.0f} of them at this loading: "
        + (
            f"at most {settled:.2%} settled and {overall:.2%} over all instance-intervals."
            if settled is not None and overall is not None
            else "no ceiling (nothing left to count)."
        )
    )

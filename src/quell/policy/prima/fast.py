"""PRIMA's fast rule: what a glance between two intervals changes at once (``fast_interval_s``).

For each instance i PRIMA weighed at the last interval (its U_i, capacity U_max,i and weight w_i
in force), on a glance g:

    S_g,i     = served_g,i × T_g / busy_g,i     (% of its link) where busy_g,i ≥ MIN_BUSY × T_g
    U'_max,i  = U_max(100 − S_g,i)                         the capacity its neighbour left it
    SF_g,i    = max(0, R_P,g,i / R_iso(U_i) − 1)          where a probe download completed in g
    U'_max,i  = min(U'_max,i, U_max(IM⁻¹(SF_g,i | U_i) − U_i))    where no S_g,i is measured
    U'_max,i  = 0    where it holds a request older than AGE_FACTOR × R_th and completed none in g
    cut_i     ⇔ U'_max,i < (1 − CUT_FRACTION) × U_max,i
    r_i       = room(U'_max,i) / room(U_max,i)             (room: U_max less its probe; 0 under
                                                           ``min_room_pct``)
    L_j       = U × w_j / Σw                               the load each instance carries now
    U⁺_max,j  = U_max(U_int,j) at SHED_RT_FACTOR × R_th    U_int,j = 100 − S_g,j where read, else 0
    spare     = Σ_{j not cut, w_j > 0} max(U⁺_max,j − L_j, 0)
    shed      = Σ_cut L_i × (1 − r_i)
    r_i      ← 1 − (1 − r_i) × spare / shed                where shed > spare
    w'_i      = ⌊w_i × r_i⌋ (at least 1 where r_i > 0)     for each cut instance

served_g,i is the capacity its requests and probes received in the glance of T_g seconds,
finished or not, in % of its capacity (``served_util_pct``: its NIC's bytes out), and busy_g,i
the time it had one in service (``busy_seconds``): under processor sharing the rate it is served
at while it serves is the capacity its neighbours leave it, whatever its own load, so a glance
reads a neighbour within one ``fast_interval_s`` of its arrival, where the probe reads it only at
its next download (5 s later on average at one per 10 s) and a single download that meets the
service's own requests reads as a neighbour. The probe's SF is read only where a glance has no
served rate (the lab's). The other weights stay: weighted round robin (and least connections per
unit of weight) then splits the cut share over them in proportion to their weights, which are ∝
capacity already, so each takes the same share of its own headroom, and a cut sheds only what
the others can take while they stay within SHED_RT_FACTOR × R_th: where the fleet is short, an
interfered instance's whole load moved onto instances at their capacity makes them miss as well.
The bar is measured at two places that pull apart (the tuned options of each scenario, seeds
9–13 of the simulated Table IX and 1000 of prima-sim-1000, settled / all instance-intervals):
cutting to the capacity, Table IX 90.34 % of all against 95.32 % without the fast path; within
the spare at R_th (PRIMA's own capacities, which plan a fleet always a little short of what it
carries), Table IX 94.93 % but prima-sim-1000 97.88 / 96.04 % against 99.30 / 98.84 % cutting to
the capacity; within the spare at 2 R_th, Table IX 93.56 % and prima-sim-1000 99.29 / 98.83 %.
The cut carries into the next interval's plan, whose vote scales out. Raising
a weight waits for the interval: a neighbour's departure is read there, through the window. The
rule computes; the controller turns its findings into actions and carries each cut into the next
interval's planning (the capacity there is at most U'_max,i). A served rate also read at the
interval (the cut kept while the probe's downloads show the neighbour) bought nothing: Table IX
92.43 % of all against 92.69 %, prima-sim-1000 99.57 % settled either way.

Measured (docs/papers/prima.md): on prima-sim-1000 cut to its first 2,400 s (seeds 1000–1001)
99.39 % of settled instance-intervals met R_th and 98.48 % of all, at 1.29× the oracle's
instance-seconds, against 97.14 % / 95.01 % at 1.29× for PRIMA without the fast path and 97.18 %
/ 95.47 % at 1.83× for the probe's fast rule; through all its 7,200 s (seeds 1000–1001) 99.30 %
/ 98.84 % at 1.32× against 97.09 % / 95.27 % at 1.32× and 94.81 % / 93.27 % at 1.68×, past the
98.49 % / 96.82 % that deciding at the intervals' boundaries allows; on prima-sim-table8 (seeds
8–12, no neighbour) it cuts nothing, so it decides as PRIMA does (99.14 % at 1.04×), where the
probe's rule cut on noise (98.71 % at 1.10×).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, methodcaller

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import BUSY_KEY, OLDEST_KEY, SERVED_UTIL_KEY, Snapshot
from quell.errors import InputError, Problem
from quell.models.capacity import CapacityModel
from quell.probe.severity import PROBE_KEY, severity_factor
from quell.probe.table import ProbeTable

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

CUT_FRACTION = 0.75
"""A glance cuts an instance only when it leaves it less than a quarter of the capacity it was
planned with: a smaller loss is the interval's to read, through its window. For the probe's SF
(where no served rate is measured) the bar keeps one download that meets the service's own
requests from reading as a neighbour: on prima-sim-table8 (seed 8, no neighbour, instances at
U = 50 %) a half cut on such noise and read 98.74 % of settled instance-intervals at 1.12x the
oracle, a quarter 99.17 % at 1.14x, against 99.16 % at 1.06x without the fast path. A served rate
has no such noise in the simulator; the neighbours of prima-sim-1000 leave no capacity, so any
bar cuts them."""
AGE_FACTOR = 4.0
"""A request held longer than this many R_th, on an instance that completed nothing in the
glance, reads as a neighbour that has left the instance no capacity (docs/papers/prima.md)."""

SHED_RT_FACTOR = 2.0
"""A cut moves load onto the other instances only as far as keeps them within this many R_th
(the bar of what users feel, ``quell.report.felt``), at the capacity the glance reads them at."""

MIN_BUSY = 0.1
"""The share of a glance an instance must have served in for its served rate to count: one that
served for a sliver of it sent too few bytes for a NIC's counter to give a rate (in the simulator
the rate is exact over any time; an instance at U = 35 % serves for about a third of a glance)."""


@dataclass
class Armed:
    """What the last interval planned, in the order of ``ids``: each instance's U, capacity,
    weight in force and probe share; the load and the capacity planned with what is on its way.
    Each cut a glance finds is written into it (``FastRule.read``), so the next glance reads
    against the capacities and weights then in force."""

    ids: list[str]
    util_pct: FloatArray
    u_max_pct: FloatArray
    weight: NDArray[np.int64]
    probe_pct: FloatArray
    total_util_pct: float
    planned_pct: float


@dataclass(frozen=True)
class Found:
    """What one glance found: the cut instances (positions in ``Armed.ids``), their capacity
    now, their new weights, and the capacity the fleet plans with after them."""

    at: NDArray[np.intp]
    u_max_pct: FloatArray
    weight: NDArray[np.int64]
    planned_pct: float
    taken_pct: float
    """The capacity the cuts took."""
    by_served: int
    """How many of the cuts the served rate found,"""
    by_probe: int
    """how many the probe found (the others: a request held too long)."""


class FastRule:
    """The fast rule over one interval's plan (``arm``), applied to each glance (``read``).

    Parameters
    ----------
    model : the capacity model the interval planned with.
    relaxed : the same models' capacity at SHED_RT_FACTOR × R_th: how far a cut may load the
        others.
    table : the probe's interference-free times R_iso(U).
    target_rt_s : R_th.
    min_room_pct : an instance with less room than this for requests gets weight 0.
    """

    def __init__(
        self,
        model: CapacityModel,
        relaxed: CapacityModel,
        table: ProbeTable,
        target_rt_s: float,
        min_room_pct: float,
    ) -> None:
        if not target_rt_s > 0:
            raise InputError("fast rule", [Problem("target_rt_s", f"{target_rt_s!r} is not > 0")])
        self.model = model
        self.relaxed = relaxed
        self.table = table
        self.target_rt_s = target_rt_s
        self.min_room_pct = min_room_pct
        self.armed_: Armed | None = None
        self._at: dict[str, int] = {}

    def arm(self, armed: Armed) -> None:
        """Plan against ``armed`` until the next interval arms again."""
        n = len(armed.ids)
        bad = [
            Problem(name, f"{a.size} values for {n} instances")
            for name, a in (
                ("util_pct", armed.util_pct),
                ("u_max_pct", armed.u_max_pct),
                ("weight", armed.weight),
                ("probe_pct", armed.probe_pct),
            )
            if a.size != n
        ]
        if bad:
            raise InputError("fast rule", bad)
        self.armed_ = armed
        self._at = {}

    def _positions(self, ids: Sequence[str]) -> NDArray[np.intp]:
        """Each glanced instance's position in the armed ids (−1: not armed)."""
        assert self.armed_ is not None
        if not self._at:
            self._at = {iid: k for k, iid in enumerate(self.armed_.ids)}
        return np.fromiter(map(self._at.get, ids, repeat(-1)), dtype=np.intp, count=len(ids))

    def read(self, glance: Snapshot) -> Found | None:
        """The cuts ``glance`` calls for, or ``None`` (not armed, or nothing to cut); the cuts
        are written into ``armed_``."""
        a = self.armed_
        if a is None or not a.ids:
            return None
        obs = glance.instances
        ids = list(obs)
        n = len(ids)
        vals = list(obs.values())
        extras = list(map(attrgetter("extra"), vals))
        served = np.fromiter(map(methodcaller("get", SERVED_UTIL_KEY, np.nan), extras), float, n)
        busy = np.fromiter(map(methodcaller("get", BUSY_KEY, 0.0), extras), float, n)
        window = vals[0].interval_s if n else 0.0  # one window for the whole glance
        oldest = np.fromiter(map(methodcaller("get", OLDEST_KEY, 0.0), extras), float, n)
        held = np.flatnonzero(oldest > AGE_FACTOR * self.target_rt_s)  # few: read their counts
        stuck = np.zeros(n, dtype=bool)
        stuck[held] = [vals[k].requests == 0 for k in held.tolist()]
        probe = self._probe(extras, np.isnan(served))
        if ids == a.ids:
            pos = np.arange(n)
        else:
            pos = self._positions(ids)
            keep = pos >= 0
            served, busy, stuck, probe, pos = (
                served[keep],
                busy[keep],
                stuck[keep],
                probe[keep],
                pos[keep],
            )
        read = np.flatnonzero((busy >= MIN_BUSY * window) & (busy > 0) & ~np.isnan(served))
        sampled = np.flatnonzero(~np.isnan(probe))
        if sampled.size == 0 and read.size == 0 and not stuck.any():
            return None
        new = a.u_max_pct[pos]  # a copy: fancy indexing
        by_served = np.zeros(pos.size, dtype=bool)
        u_int = np.zeros(pos.size)  # the neighbour load each glanced instance shows (0: unread)
        if read.size:
            shown = served[read] * window / busy[read]
            u_int[read] = np.maximum(100.0 - shown, 0.0)
            cap = self.model.capacity_for(u_int[read]).value
            by_served[read] = cap < new[read]
            new[read] = np.minimum(cap, new[read])
        by_probe = np.zeros(pos.size, dtype=bool)
        if sampled.size:
            at = pos[sampled]
            u = a.util_pct[at]
            sf = severity_factor(probe[sampled], self.table.predict(u))
            cap = self.model.capacity(u, sf)[1].value
            by_probe[sampled] = cap < new[sampled]
            new[sampled] = np.minimum(cap, new[sampled])
        new = np.where(stuck, 0.0, new)
        cut = (new < (1.0 - CUT_FRACTION) * a.u_max_pct[pos]) & (a.weight[pos] > 0)
        if not cut.any():
            return None
        at = pos[cut]
        u_new = new[cut]
        room_old = np.maximum(a.u_max_pct[at] - a.probe_pct[at], 0.0)
        room_new = np.maximum(u_new - a.probe_pct[at], 0.0)
        room_new = np.where(room_new < self.min_room_pct, 0.0, room_new)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(room_old > 0, room_new / room_old, 0.0)
        room = np.full(len(a.ids), np.inf)  # an instance not in the glance: nothing to count on
        room[pos] = self.relaxed.capacity_for(u_int).value
        ratio = self._within_spare(a, at, ratio, stuck[cut], room)
        weight = np.floor(a.weight[at] * ratio).astype(np.int64)
        weight = np.where((weight == 0) & (ratio > 0), 1, weight)
        if np.array_equal(weight, a.weight[at]):
            return None
        taken = float((a.u_max_pct[at] - u_new).sum())
        a.planned_pct -= taken
        a.u_max_pct[at] = u_new
        a.weight[at] = weight
        live = ~stuck[cut]
        return Found(
            at,
            u_new,
            weight,
            a.planned_pct,
            taken,
            int((by_served[cut] & live).sum()),
            int((by_probe[cut] & live).sum()),
        )

    @staticmethod
    def _within_spare(
        a: Armed, at: NDArray[np.intp], ratio: FloatArray, stuck: BoolArray, room: FloatArray
    ) -> FloatArray:
        """The weight ratios of the cut instances ``at``, scaled so that the load they shed fits
        in what the others have spare below their capacities ``room`` at SHED_RT_FACTOR × R_th
        (see the module's formula); a stuck instance sheds all."""
        w = a.weight.astype(np.float64)
        total_w = w.sum()
        if total_w <= 0:
            return ratio
        load = a.total_util_pct * w / total_w
        others = np.ones(w.size, dtype=bool)
        others[at] = False
        others &= (w > 0) & np.isfinite(room)
        spare = float(np.maximum(room[others] - load[others], 0.0).sum())
        shed = load[at] * (1.0 - ratio)
        spare -= float(shed[stuck].sum())
        moving = float(shed[~stuck].sum())
        if moving <= max(spare, 0.0):
            return ratio
        share = max(spare, 0.0) / moving
        return np.where(stuck, ratio, 1.0 - (1.0 - ratio) * share)

    @staticmethod
    def _probe(extras: list[Mapping[str, float]], where: BoolArray) -> FloatArray:
        """Each probe download's time where no served rate is measured (``where``); NaN for
        none, and elsewhere."""
        if not where.any():
            return np.full(where.size, np.nan)
        probe = np.fromiter(map(methodcaller("get", PROBE_KEY, np.nan), extras), float, where.size)
        return np.where(where, probe, np.nan)

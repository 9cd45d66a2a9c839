"""PRIMA's capacity accounting: the capacity the fleet has and has on its way against the load,
the probe's own share of each instance's U, and how the requests are split over the
capacities: weights ∝ capacity less the probe."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from quell.core.action import SetWeight
from quell.models.capacity import CapacityModel
from quell.policy.fleet import Fleet
from quell.policy.weights import proportional_array

FloatArray = NDArray[np.float64]

WEIGHTING = "weights ∝ capacity"
"""How the requests are split, as the reasons say it."""


@dataclass(frozen=True)
class Plan:
    """The load of one interval against the capacity there is and the capacity on its way."""

    capacity_sum_pct: float
    """ΣU_max of the serving instances."""
    planned_pct: float
    """That plus the capacity on its way (less the probes of the instances asked for)."""
    demand_pct: float
    """U × (1 + ``safety_factor``): the load to plan for."""
    coming: list[str]
    """Instances asked for, then those serving without an SF yet."""
    shortfall: bool
    """Whether the demand exceeds the planned capacity."""
    state: str
    """The load against the capacity, in words."""


class CapacityAccount:
    """The capacities PRIMA counts with and how it splits the requests over them.

    Parameters
    ----------
    model : the capacity model (U_int, U_max, predicted RT).
    fleet : whose hosts the instances are on (each host's probe share), and which weights are
        in force (``weights`` hands out only the changes).
    probe_util_pct : host → the probe's share of U there; empty: probes not counted.
    initial_hosts : the hosts of the instances the run starts with.
    safety_factor : plan capacity for U × (1 + this).
    min_room_pct : an instance with less capacity than this left for requests gets none
        (``PrimaParams.min_room_pct``).
    """

    def __init__(
        self,
        model: CapacityModel,
        fleet: Fleet,
        probe_util_pct: Mapping[str, float],
        initial_hosts: Iterable[str],
        safety_factor: float,
        min_room_pct: float = 0.0,
    ) -> None:
        self.model = model
        self.min_room_pct = min_room_pct
        self.fleet = fleet
        self.probe_util_pct = dict(probe_util_pct)
        self.safety_factor = safety_factor
        self.new_capacity_pct = float(model.capacity_for(np.zeros(1)).value[0])
        """U_max of an interference-free instance: what a new instance is expected to add."""
        hosts = set(initial_hosts) | set(fleet.hosts)
        per_host = {self.probe_util_pct.get(h, 0.0) for h in hosts}
        self.probe_uniform = per_host.pop() if len(per_host) == 1 else None
        """The probe's share of U when it is the same on every host the fleet may use."""
        self.new_probe_pct = max(
            (self.probe_util_pct.get(h, 0.0) for h in fleet.hosts), default=0.0
        )
        """What a new instance's probe will add to U (the most any scaling host's takes)."""

    # -- the load against the capacity ---------------------------------------------------------
    def plan(
        self, total_u: float, u_max: FloatArray, pending: list[str], awaiting: list[str]
    ) -> Plan:
        """The serving instances' capacities ``u_max``, plus an interference-free instance's
        for each instance asked for (``pending``, less its probe, not in U yet) or serving
        without an SF (``awaiting``), against the load ``total_u``."""
        cap_sum = float(u_max.sum())
        coming = pending + awaiting
        planned = cap_sum + len(coming) * self.new_capacity_pct
        pending_probes = self.probes(pending) if pending else None
        if pending_probes is not None:  # their probes are not in U yet; they will be
            planned -= float(pending_probes.sum())
        demand = total_u * (1.0 + self.safety_factor)
        shortfall = demand > planned
        load = (
            f"U={total_u:.1f}%"
            if self.safety_factor == 0
            else f"U×{1 + self.safety_factor:g}={demand:.1f}%"
        )
        state = (
            f"{load} {'exceeds' if shortfall else 'within'} ΣU_max={cap_sum:.1f}% "
            f"of {u_max.size} instance(s)"
        )
        if coming:
            state += f" + {len(coming)} on the way at {self.new_capacity_pct:.1f}% each"
            if pending_probes is not None:
                state += " less their probes"
        return Plan(cap_sum, planned, demand, coming, shortfall, state)

    # -- the probe's share of U ----------------------------------------------------------------
    def probes(self, ids: Sequence[str]) -> FloatArray | None:
        """Each instance's probe share of its U; ``None`` without probe accounting."""
        if self.probe_uniform is not None:
            return None if self.probe_uniform == 0.0 else np.full(len(ids), self.probe_uniform)
        if not self.probe_util_pct:
            return None
        host_of = self.fleet.host_of
        pct = self.probe_util_pct
        return np.fromiter(
            (pct.get(host_of(i) or "", 0.0) for i in ids), dtype=float, count=len(ids)
        )

    def leaving_probes(self, ids: list[str], order: NDArray[np.intp]) -> FloatArray | None:
        """For k = 1..n, the U the probes of the n - k instances after the first k of ``order``
        take (they leave with them); ``None`` without probe accounting."""
        probe = self.probes(ids)
        if probe is None:
            return None
        tail = np.cumsum(probe[order][::-1])[::-1]
        return np.concatenate((tail[1:], [0.0]))

    def _room(self, ids: Sequence[str], u_max: FloatArray) -> tuple[FloatArray | None, FloatArray]:
        """Each instance's probe share (``None``: not counted, or a single instance, which
        takes all requests anyway) and the capacity it has left for requests."""
        probe = self.probes(ids) if len(ids) > 1 else None
        room = u_max if probe is None else np.maximum(u_max - probe, 0.0)
        if self.min_room_pct > 0 and len(ids) > 1:
            room = np.where(room < self.min_room_pct, 0.0, room)
        return probe, room

    # -- the split of the requests -------------------------------------------------------------
    def shares(self, ids: Sequence[str], u_max: FloatArray) -> FloatArray:
        """Each instance's share of the requests: in proportion to its capacity (the paper)
        less its probe, which it carries whatever its weight. While the capacities fall short
        of the load the split stays so: the split for equal predicted response times was
        measured instead and lowered Tables IX and X in the simulator (more instances missed
        R_th, each by less), and weights rounded to steps did not gain beyond the seeds'
        scatter (docs/papers/prima.md)."""
        return self._room(ids, u_max)[1]

    def weights(self, ids: list[str], u_max: FloatArray) -> tuple[SetWeight, ...]:
        """The weight changes that put ``shares`` in force (equal weights when no instance has
        capacity left)."""
        shares = self.shares(ids, u_max)
        if float(shares.max(initial=0.0)) <= 0:
            shares = np.ones(len(ids))
        return self.fleet.reweight_many(ids, proportional_array(shares))

    def trial_weights(
        self, ids: list[str], keep_mask: NDArray[np.bool_], keep: list[str], u_max: FloatArray
    ) -> tuple[SetWeight, ...]:
        """Weights of the kept instances (``keep``, where ``keep_mask``) as if they were all; 0
        for the others (on trial)."""
        shares = np.zeros(len(ids))
        kept = self.shares(keep, u_max[keep_mask])
        shares[keep_mask] = kept if float(kept.max(initial=0.0)) > 0 else 1.0
        return self.fleet.reweight_many(ids, proportional_array(shares))

    def new_loads(self, ids: list[str], u_max: FloatArray, total_u: float) -> FloatArray:
        """Each instance's U once the weights ∝ capacity (less its probe) are in force."""
        probe, room = self._room(ids, u_max)
        total_room = float(room.sum())
        if probe is None:
            return total_u * room / total_room if total_room > 0 else np.zeros_like(u_max)
        requests = max(total_u - float(probe.sum()), 0.0)
        return probe + (requests * room / total_room if total_room > 0 else 0.0)

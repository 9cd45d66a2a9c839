"""The scaling bookkeeping every policy shares: which instances serve, which were asked for and
are still booting, which are draining, which hosts are free, and which weights are in force.

A ``Fleet`` learns only from snapshots and from the actions it hands out; it never talks to an
environment. Environments show an added instance once it serves (after boot) and keep showing
a removed one while it drains, so:

* requested (``add``) → ``pending_add`` until the id first appears in a snapshot → ``active``;
* ``remove`` → ``removing`` (no longer capacity) until the id disappears → gone, host free;
* any other instance that disappears is gone too; one that appears unannounced is active;
* a requested instance not seen within ``pending_timeout_s`` of its request is given up
  (``expired_``): it no longer counts as coming, and its host is free again.
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.core.observation import Snapshot
from quell.policy.context import PolicyContext
from quell.policy.weights import proportional_array, proportional_weights


class Fleet:
    """Instances of one load-balancing group as a policy sees them.

    Parameters
    ----------
    initial : instance id → host id of the instances the run starts with (active at once).
    hosts : hosts a new instance may go on, in order of preference; one instance per host
        (an initial instance on one of them occupies it too).
    min_instances : ``remove`` refuses to leave fewer active instances.
    max_instances : ``can_add`` is false once active + pending reaches it (``None``: no cap).
    prefix : new ids are ``prefix`` + 1, 2, ... skipping any id ever seen; never reused.
    pending_timeout_s : a requested instance not seen serving this long after the request (by
        snapshot time) is given up; ``None``: never.
    """

    def __init__(
        self,
        initial: Mapping[str, str],
        hosts: Iterable[str] = (),
        min_instances: int = 1,
        max_instances: int | None = None,
        prefix: str = "n",
        pending_timeout_s: float | None = None,
    ) -> None:
        self.hosts = tuple(hosts)
        self.min_instances = min_instances
        self.max_instances = max_instances
        self.prefix = prefix
        self._active: dict[str, None] = dict.fromkeys(initial)
        self._pending: dict[str, str] = {}
        self._removing: dict[str, None] = {}
        self._host: dict[str, str] = dict(initial)
        self._weight: dict[str, int] = {}
        self._known: set[str] = set(initial)
        self._next = 1
        self.pending_timeout_s = pending_timeout_s
        self._requested_s: dict[str, float] = {}
        self._now_s = 0.0
        self.expired_: tuple[str, ...] = ()
        """Pending instances given up in the last ``update``."""

    @classmethod
    def from_context(cls, ctx: PolicyContext) -> Fleet:
        """The fleet a scenario starts with; without a ``scaling`` section it can neither grow
        nor shrink below its initial size."""
        sc = ctx.scaling
        if sc is None:
            return cls(ctx.initial_instances, (), max(1, len(ctx.initial_instances)))
        timeout = sc.boot_s + PENDING_GRACE_INTERVALS * ctx.interval_s
        return cls(
            ctx.initial_instances,
            sc.hosts,
            sc.min_instances,
            sc.max_instances,
            pending_timeout_s=timeout,
        )

    # -- learning ----------------------------------------------------------------------------
    def update(self, snapshot: Snapshot) -> None:
        """Learn from ``snapshot`` what serves, what has gone, and the weights in force."""
        present = snapshot.instances
        self._now_s = snapshot.time_s
        self._weight.update(
            (iid, obs.weight) for iid, obs in present.items() if obs.weight is not None
        )
        keys = present.keys()
        if self._removing or keys != self._active.keys():  # else nothing came or went
            self._arrivals_and_departures(keys)
        self.expired_ = ()
        if self.pending_timeout_s is not None and self._pending:
            late = self._now_s - self.pending_timeout_s
            self.expired_ = tuple(i for i in self._pending if self._requested_s[i] < late)
            for iid in self.expired_:
                del self._pending[iid], self._requested_s[iid]
                self._host.pop(iid, None)
                self._weight.pop(iid, None)

    def _arrivals_and_departures(self, keys: KeysView[str]) -> None:
        """Make the instances a snapshot shows for the first time active (in its order), and
        forget the active or draining ones it no longer shows."""
        new = keys - self._active.keys() - self._removing.keys()
        if new:
            self._known |= new
            for iid in [i for i in keys if i in new]:  # snapshot order
                self._pending.pop(iid, None)
                self._requested_s.pop(iid, None)
                self._active[iid] = None  # requested, or appeared unannounced (host unknown)
        gone = (self._active.keys() | self._removing.keys()) - keys
        for iid in gone:
            self._active.pop(iid, None)
            self._removing.pop(iid, None)
            self._host.pop(iid, None)
            self._weight.pop(iid, None)

    # -- what there is -----------------------------------------------------------------------
    @property
    def active(self) -> tuple[str, ...]:
        """Ids that serve and are not being removed, oldest first."""
        return tuple(self._active)

    @property
    def pending_add(self) -> Mapping[str, str]:
        """Id → host of instances requested but not yet seen serving."""
        return dict(self._pending)

    @property
    def removing(self) -> tuple[str, ...]:
        """Ids asked to leave that are still reported (draining); not capacity any more."""
        return tuple(self._removing)

    @property
    def count(self) -> int:
        """Active plus pending: the size the group is heading for."""
        return len(self._active) + len(self._pending)

    @property
    def weights(self) -> Mapping[str, int]:
        """Last known load-balancer weight of each instance (observed, else last set)."""
        return dict(self._weight)

    def host_of(self, iid: str) -> str | None:
        return self._host.get(iid)

    def free_host(self) -> str | None:
        """The most preferred scaling host no tracked instance occupies."""
        taken = set(self._host.values())
        return next((h for h in self.hosts if h not in taken), None)

    def can_add(self) -> bool:
        below_max = self.max_instances is None or self.count < self.max_instances
        return below_max and self.free_host() is not None

    def can_remove(self) -> bool:
        return len(self._active) > self.min_instances

    def describe(self) -> dict[str, Any]:
        """JSON-able state for a decision's ``detail``."""
        return {
            "active": list(self._active),
            "pending_add": dict(self._pending),
            "removing": list(self._removing),
        }

    # -- asking for change -------------------------------------------------------------------
    def add(self, weight: int = 0) -> AddInstance:
        """Request a new instance on the most preferred free host; it is pending until seen."""
        host = self.free_host()
        if not self.can_add() or host is None:
            raise ValueError(
                f"cannot add an instance: {self.count} active or pending, "
                f"max {self.max_instances}, free host {host}"
            )
        iid = self._new_id()
        self._pending[iid] = host
        self._requested_s[iid] = self._now_s
        self._host[iid] = host
        self._weight[iid] = weight
        return AddInstance(iid, host, weight)

    def add_many(
        self, n: int, weight: int = 0, avoid: Mapping[str, float] | None = None
    ) -> tuple[AddInstance, ...]:
        """Request up to ``n`` new instances at once, on the most preferred free hosts, within
        ``max_instances``; fewer (maybe none) when hosts or the cap run out. ``avoid``: a
        score per host (unknown hosts 0); free hosts are taken in ascending score, in order of
        preference among equals."""
        room = n if self.max_instances is None else min(n, self.max_instances - self.count)
        if room <= 0:
            return ()
        taken = set(self._host.values())
        out: list[AddInstance] = []
        hosts = self.hosts if not avoid else sorted(self.hosts, key=lambda h: avoid.get(h, 0.0))
        for host in hosts:
            if len(out) >= room:
                break
            if host in taken:
                continue
            iid = self._new_id()
            self._pending[iid] = host
            self._requested_s[iid] = self._now_s
            self._host[iid] = host
            self._weight[iid] = weight
            out.append(AddInstance(iid, host, weight))
        return tuple(out)

    def remove(self, iid: str, drain: bool = True) -> RemoveInstance:
        """Take an active instance out of the group; refuses below ``min_instances``."""
        if iid not in self._active:
            raise ValueError(f"cannot remove {iid!r}: not an active instance")
        if not self.can_remove():
            raise ValueError(
                f"cannot remove {iid!r}: {len(self._active)} active, min {self.min_instances}"
            )
        del self._active[iid]
        self._removing[iid] = None
        return RemoveInstance(iid, drain)

    def reweight(self, desired: Mapping[str, int]) -> tuple[SetWeight, ...]:
        """SetWeight actions that put ``desired`` in force, or none when the weights in force
        already split the load the same way (compared after ``proportional_weights``)."""
        known = {i: self._weight[i] for i in desired if i in self._weight}
        if len(known) == len(desired) and proportional_weights(
            {i: float(w) for i, w in known.items()}
        ) == proportional_weights({i: float(w) for i, w in desired.items()}):
            return ()
        changes = tuple(SetWeight(i, w) for i, w in desired.items() if self._weight.get(i) != w)
        self._weight.update(desired)
        return changes

    def set_weights(self, ids: Sequence[str], weights: NDArray[np.int64]) -> tuple[SetWeight, ...]:
        """SetWeight for each of ``ids`` whose weight in force is not ``weights[k]``, the other
        instances' weights left as they are (so no comparison of proportions: ``ids`` may be a
        few of the fleet's)."""
        have = self._weight
        out = tuple(
            SetWeight(i, w)
            for i, w in zip(ids, np.asarray(weights, dtype=np.int64).tolist(), strict=True)
            if have.get(i) != w
        )
        have.update((a.instance_id, a.weight) for a in out)
        return out

    def reweight_many(
        self, ids: Sequence[str], weights: NDArray[np.int64]
    ) -> tuple[SetWeight, ...]:
        """``reweight`` for many instances at once: ``weights[k]`` for ``ids[k]``."""
        w = np.asarray(weights, dtype=np.int64)
        have = self._weight
        cur = np.fromiter(map(have.get, ids, repeat(-1)), dtype=np.int64, count=len(ids))
        if (
            cur.size
            and cur.min() >= 0
            and np.array_equal(
                proportional_array(cur.astype(float)), proportional_array(w.astype(float))
            )
        ):
            return ()
        changed = np.flatnonzero(cur != w)
        if changed.size == 0:
            return ()
        if changed.size == len(ids):
            names, values = ids, w.tolist()
        else:
            names, values = [ids[k] for k in changed.tolist()], w[changed].tolist()
        have.update(zip(names, values, strict=True))
        return tuple(map(SetWeight, names, values))

    def _new_id(self) -> str:
        while f"{self.prefix}{self._next}" in self._known:
            self._next += 1
        iid = f"{self.prefix}{self._next}"
        self._known.add(iid)
        self._next += 1
        return iid


PENDING_GRACE_INTERVALS = 3
"""A requested instance is given up this many control intervals after its boot delay."""


__all__ = ["Fleet"]

"""PRIMA's scale-in: keep the fewest instances, highest U_max first, whose capacities carry U less
the probes of the others with ``scale_in_headroom`` to spare (at least ``min_instances``). Once that
has shown in W + 1 of the last 2W + 1 intervals (W = ``scale_in_wait_intervals``) with nothing on
its way, the others go on trial at weight 0 until the kept ones' windows have read their new loads
(the larger of ``sf_window`` and ``util_window``, + 1 intervals), and are removed if the kept ones
carry their own load through it with the same headroom; a failed trial brings them back and doubles
W + 1 before the next (``quell.policy.hysteresis.Trial``).

The paper removes at once. An instance that carries little load cannot show its neighbour (below the
IM's knee SF reads 0 whatever the neighbour's load), so its U_max looks like a free instance's until
it carries more; the trial shows that before anything is removed. Every shipped scenario scales in
through the trial; no run has set it against removing at once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from quell.core.action import Action, Decision, SetWeight
from quell.policy.fleet import Fleet
from quell.policy.hysteresis import MAX_TRIAL_BACKOFF, Trial, Vote
from quell.policy.prima.capacity import WEIGHTING, CapacityAccount
from quell.policy.prima.interval import Interval
from quell.policy.prima.params import PrimaParams


class ScaleIn:
    """The vote over intervals with capacity to spare (``excess_``), the trial (``trial_``) of
    the instances on it (``on_trial_``), and the U_int last read on each host an instance was
    removed from (``host_u_int_``: a scale-out takes those hosts last).

    Each interval: ``observe``, then on an interval not short of capacity ``decide``, which
    also says which instances keep serving (those calibration watches)."""

    def __init__(self, fleet: Fleet, account: CapacityAccount, params: PrimaParams) -> None:
        self.fleet = fleet
        self.account = account
        self.params = params
        wait = params.scale_in_wait_intervals
        self.wait_intervals = params.wait_intervals if wait is None else wait
        """W of the vote when no trial has failed."""
        settle = max(params.sf_window, params.util_window) + 1
        self.trial_ = Trial(settle, params.wait_intervals)
        """The trial; its failures since the last removal or scale-out double the wait."""
        longest = self.trial_.wait(self.wait_intervals, MAX_TRIAL_BACKOFF)
        self.excess_ = Vote(self.wait_intervals, longest)
        """Whether each remembered interval had instances to spare."""
        self.on_trial_: tuple[str, ...] = ()
        """Instances at weight 0 while the others try to carry the load without them."""
        self.host_u_int_: dict[str, float] = {}
        """U_int of each host an instance was removed from, as last read there."""

    def observe(self, serving: list[str], shortfall: bool) -> None:
        """Every interval, before deciding: instances on trial that no longer serve are off
        it; an interval short of capacity has nothing to spare, and fails a trial that is on
        (even with the instances on trial back there is too little)."""
        if self.on_trial_:
            alive = set(serving)
            self.on_trial_ = tuple(i for i in self.on_trial_ if i in alive)
            if not self.on_trial_:
                self.trial_.cancel()
        if shortfall:
            self.excess_.update(False)
            if self.on_trial_:
                self.trial_.fail()
                self._end_trial()

    def decide(self, now: Interval, coming: Sequence[str]) -> tuple[Decision, Interval]:
        """The decision on an interval not short of capacity, and the instances that keep
        serving (all of ``now`` but those removed or on trial)."""
        if self.on_trial_:
            return self._continue_trial(now)
        ids, state, detail = now.ids, now.state, now.detail
        order, k, load_k = self._fewest(now)
        excess = k < len(ids) and not coming and self.fleet.can_remove()
        wait = self.trial_.wait(self.wait_intervals)
        if not self.excess_.update(excess, wait):
            detail["kept"] = ids
            detail["removed"] = []
            weights = self.account.weights(ids, now.u_max)
            if excess:
                reason = (
                    f"{state}: {k} instance(s) would do, waiting "
                    f"({self.excess_.count_}/{wait + 1}); {WEIGHTING}"
                )
                return Decision(weights, reason=reason, detail=detail), now
            return Decision(weights, reason=f"{state}: {WEIGHTING}", detail=detail), now
        self.excess_.clear()
        drop = [ids[j] for j in order[k:].tolist()]
        detail["scale_in_load_pct"] = load_k
        return self._start_trial(now, drop, load_k)

    def _fewest(self, now: Interval) -> tuple[NDArray[np.intp], int, float]:
        """The instances by U_max, highest first; how many of the first carry the load with
        the headroom to spare (at least ``min_instances``, at most all); and that load: U less the probes of the others, which leave with them."""
        ids, total_u, u_max = now.ids, now.total_u, now.u_max
        order = np.argsort(-u_max, kind="stable")
        cum = np.cumsum(u_max[order])
        factor = (1.0 + self.params.safety_factor) * (1.0 + self.params.scale_in_headroom)
        leaving = self.account.leaving_probes(ids, order)
        if leaving is None:
            k = int(np.searchsorted(cum, total_u * factor, side="left")) + 1
        else:  # k instances carry U less the probes of the n - k that leave
            fits = cum >= (total_u - leaving) * factor
            k = int(np.argmax(fits)) + 1 if bool(fits.any()) else len(ids) + 1
        k = min(len(ids), max(k, self.fleet.min_instances))
        load_k = total_u if leaving is None else total_u - float(leaving[k - 1])
        return order, k, load_k

    def _start_trial(
        self, now: Interval, drop: list[str], load_k: float
    ) -> tuple[Decision, Interval]:
        """Put ``drop`` on trial: weight 0 while the others, judged on ``load_k``, carry the
        load."""
        self.on_trial_ = tuple(drop)
        self.trial_.start()
        keep_mask, kept = now.without(drop)
        cap_keep = float(kept.u_max.sum())
        now.detail["kept"] = kept.ids
        now.detail["removed"] = []
        now.detail["on_trial"] = list(self.on_trial_)
        weights = self.account.trial_weights(now.ids, keep_mask, kept.ids, now.u_max)
        reason = (
            f"{now.state}: {len(kept.ids)} instance(s) with ΣU_max={cap_keep:.1f}% would do"
            f"{_without_probes(now.total_u, load_k)}: trying them without {_names(drop)} "
            f"(weight 0) for {self.trial_.length} interval(s) before removing"
        )
        return Decision(weights, reason=reason, detail=now.detail), kept

    def _continue_trial(self, now: Interval) -> tuple[Decision, Interval]:
        """One interval of a scale-in trial. The load to carry is the kept ones' own: what
        still shows on the instances on trial is their probe, which leaves with them, and the
        tail of their last requests."""
        ids, state, detail = now.ids, now.state, now.detail
        keep_mask, kept = now.without(self.on_trial_)
        cap_keep = float(kept.u_max.sum())
        kept_u = float(kept.util.sum())
        demand = kept_u * (1.0 + self.params.safety_factor)
        short = demand > cap_keep
        spare = demand * (1.0 + self.params.scale_in_headroom) <= cap_keep
        step = self.trial_.step(short, spare)
        detail["on_trial"] = list(self.on_trial_)
        carried = f"ΣU_max={cap_keep:.1f}% of the {len(kept.ids)} kept"
        if step == "failed" and self.params.scale_in_partial:
            partial = self._partial(now, kept.u_max, demand)
            if partial is not None:
                back, drop = partial
                self.on_trial_ = ()
                self.excess_.clear()
                return self._remove(now, drop, trial_u=kept_u, back=back)
        if step == "failed":
            drop = list(self.on_trial_)
            self._end_trial()
            why = "fell short of" if short else f"carry without {self._headroom()} to spare"
            detail["kept"] = ids
            detail["removed"] = []
            return Decision(
                self.account.weights(ids, now.u_max),
                reason=f"{state}; {carried} {why} their U={kept_u:.1f}%: trial failed, "
                f"{_names(drop)} back in; next try after "
                f"{self.trial_.wait(self.wait_intervals) + 1} interval(s) over; "
                f"{WEIGHTING}",
                detail=detail,
            ), now
        if step == "passed":
            drop = list(self.on_trial_)
            self.on_trial_ = ()
            return self._remove(now, drop, trial_u=kept_u)
        detail["kept"] = kept.ids
        detail["removed"] = []
        return Decision(
            self.account.trial_weights(ids, keep_mask, kept.ids, now.u_max),
            reason=f"{state}; trying {len(kept.ids)} instance(s) without "
            f"{_names(list(self.on_trial_))} ({self.trial_.runs_}/{self.trial_.length}): "
            f"{carried} {'fall short of' if short else 'carry'} their U={kept_u:.1f}%",
            detail=detail,
        ), kept

    def _partial(
        self, now: Interval, kept_u_max: np.ndarray, demand: float
    ) -> tuple[list[str], list[str]] | None:
        """The instances on trial to bring back (highest U_max first) so that the kept ones and
        they carry ``demand`` with the headroom, and the others, to remove; ``None`` when all
        must come back."""
        at = {iid: j for j, iid in enumerate(now.ids)}
        trial = sorted(self.on_trial_, key=lambda i: -float(now.u_max[at[i]]))
        need = demand * (1.0 + self.params.scale_in_headroom) - float(kept_u_max.sum())
        back: list[str] = []
        for iid in trial:
            if need <= 0:
                break
            back.append(iid)
            need -= float(now.u_max[at[iid]])
        drop = [i for i in trial if i not in back]
        if need > 0 or not drop:
            return None
        return back, drop

    def _end_trial(self) -> None:
        """All instances back in after a failed trial; the excess must show afresh."""
        self.on_trial_ = ()
        self.excess_.clear()

    def _remove(
        self,
        now: Interval,
        drop: list[str],
        trial_u: float,
        back: list[str] | None = None,
    ) -> tuple[Decision, Interval]:
        """Remove ``drop`` after a trial: ``trial_u`` is the kept instances' own load at its end
        (what they were judged on); ``back``, the instances on trial that a partial scale-in
        brings back."""
        _, kept = now.without(drop)
        actions: list[Action] = list(self.account.weights(kept.ids, kept.u_max))
        removed = []
        at = {iid: j for j, iid in enumerate(now.ids)}
        for iid in drop:
            if self.fleet.can_remove():
                host = self.fleet.host_of(iid)
                if host is not None:
                    self.host_u_int_[host] = max(float(now.u_int[at[iid]]), 0.0)
                actions.append(SetWeight(iid, 0))
                actions.append(self.fleet.remove(iid))
                removed.append(iid)
        self.trial_.reset()
        cap_keep = float(kept.u_max.sum())
        now.detail["kept"] = kept.ids
        now.detail["removed"] = removed
        carried = (
            f"carried their U={trial_u:.1f}% through the trial with {self._headroom()} to spare"
        )
        if back:
            carried = (
                f"carry their U={trial_u:.1f}% with {self._headroom()} to spare with "
                f"{_names(back)} back from the trial"
            )
        return Decision(
            tuple(actions),
            reason=f"{len(kept.ids)} instance(s) with ΣU_max={cap_keep:.1f}% {carried}: scale "
            f"in, removing {len(removed)} ({_names(removed)}); "
            f"{WEIGHTING}",
            detail=now.detail,
        ), kept

    def _headroom(self) -> str:
        return f"{self.params.scale_in_headroom:.0%}"


def _names(ids: list[str], shown: int = 5) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def _without_probes(total_u: float, load_u: float) -> str:
    if load_u == total_u:
        return ""
    return f" (U={load_u:.1f}% without the leaving instances' probes)"

"""The IC2 controller (Maji et al., Section 4): per instance, each interval, its features → the
detector's verdict (NI, T or I) → the five-state machine (``ContextChain``) → on entering I2, Algorithm 1 over the settings in force (``update``), on entering NI2 the
baseline again. It reconfigures the instance's own server (``ReconfigureServer``); it never
touches the balancer.

What it learns online, per instance: LPO_noinf_median and RT_noinf_median, the medians of LPO
and response time over the last ``CLEAN_INTERVALS`` clean intervals (an NI verdict in NI2 with
the baseline in force); and, while the chain heads for I2, the LPO and response time of the
last ``EVIDENCE_INTERVALS`` I verdicts, whose medians Algorithm 1 weighs against the clean
ones.

A detector over a window of intervals (``window_intervals`` in its bundle) reads each feature
as its median over the instance's last intervals (``quell.detect.features.FeatureWindow``);
Algorithm 1's evidence stays the interval's own LPO and response time.

An interval without the paper's three attributes (no request completed, no CPU reading) gives
no verdict: the machine does not move. An instance that leaves the snapshot is forgotten; one
that comes (back) starts in NI2 with its settings as it reports them, else the baseline.

Do no harm (``quell.policy.guard``), unless ``guard`` is off or the context knows no request
timeout: each reconfiguration for interference is watched; its before is what users waited
from the interval the chain left NI2 (the same neighbour as after the change) up to the
change. If after ``Guard.after_intervals`` they wait longer beyond the scatter, the settings in
force before are asked for again, and each setting that moved is held from moving that way
again (its bound in that direction becomes its value before the change) for ``HOLD_S``, so
Algorithm 1 does not retry the step at once. A return to the baseline is not watched: the
baseline is the fixed configuration, the yardstick a change is weighed against. With
``prefer_online`` a change whose settings can all change online (``online_settings``) is made
online, a revert too; graceful only for one that cannot.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import replace

from quell.core.action import Action, Decision, ReconfigureServer
from quell.core.observation import Observation, Snapshot
from quell.detect.bundle import load_detector
from quell.detect.features import LPO, RT, FeatureWindow, core_index, feature_row
from quell.detect.labels import CLASSES
from quell.detect.tree import CostSensitiveTree
from quell.policy.context import PolicyContext, parse_params
from quell.policy.guard import Guard, Judgement
from quell.policy.hysteresis import ChainState, ContextChain, Verdict
from quell.policy.ic2.knowledge import SETTINGS, Direction, Setting
from quell.policy.ic2.params import Ic2Params
from quell.policy.ic2.update import Bounds, Evidence, Settings, reconfigure_for_interference

CLEAN_INTERVALS = 60
"""The clean medians are over this many clean intervals: a minute at the lab's 1 s intervals,
five at the simulator's 5 s, long enough that one slow interval does not move them. No run has
varied it."""
EVIDENCE_INTERVALS = 3
"""Algorithm 1's LPO and RT are the medians of the last this many I verdicts: the three with
which the five-state chain enters I2 from NI2 (NI2 → T → I1 → I2), not one interval's."""
HOLD_S = 300.0
"""After a revert, each setting that moved is held from moving that way again for this long:
longer than each shipped scenario's interference period (the simulator's 240 s, the lab's 90
s), so the period in which a change did harm does not retry it; the next may."""


def _median(values: deque[float]) -> float | None:
    return statistics.median(values) if values else None


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


class InstanceState:
    """What IC2 keeps of one instance."""

    def __init__(self, window: FeatureWindow) -> None:
        self.window = window
        """The rows the detector reads, over its window."""
        self.chain = ContextChain()
        self.clean_lpo: deque[float] = deque(maxlen=CLEAN_INTERVALS)
        self.clean_rt: deque[float] = deque(maxlen=CLEAN_INTERVALS)
        self.evidence_lpo: deque[float] = deque(maxlen=EVIDENCE_INTERVALS)
        self.evidence_rt: deque[float] = deque(maxlen=EVIDENCE_INTERVALS)
        self.asked: Settings | None = None
        """The settings this policy last asked the instance for."""
        self.watched: tuple[float, Settings, Settings] | None = None
        """The change the guard watches: when it was made, the settings before and after."""
        self.held: dict[tuple[Setting, Direction], tuple[float, float]] = {}
        """(setting, direction) → (the bound that way, until when), after a revert."""

    def record(self, verdict: Verdict, lpo: float | None, rt: float | None) -> None:
        """Keep this interval's LPO and RT as evidence (I) or forget the evidence (NI)."""
        if verdict == "NI":
            self.evidence_lpo.clear()
            self.evidence_rt.clear()
        elif verdict == "I" and lpo is not None and rt is not None:
            self.evidence_lpo.append(lpo)
            self.evidence_rt.append(rt)

    def record_clean(self, lpo: float | None, rt: float | None) -> None:
        if lpo is not None and rt is not None:
            self.clean_lpo.append(lpo)
            self.clean_rt.append(rt)

    def evidence(self) -> Evidence:
        return Evidence(
            _median(self.evidence_lpo),
            _median(self.clean_lpo),
            _median(self.evidence_rt),
            _median(self.clean_rt),
        )


class Ic2Policy:
    """IC2: detect interference per instance and reconfigure its server for it (module
    docstring)."""

    name = "ic2"
    params_model = Ic2Params

    def __init__(
        self,
        detector: CostSensitiveTree,
        params: Ic2Params,
        timeout_s: float | None = None,
        interval_s: float | None = None,
    ) -> None:
        self.detector = detector
        self.params = params
        self.guard_: Guard | None = None
        """The do-no-harm check; ``None`` with ``guard`` off or no request timeout known."""
        if params.guard and timeout_s is not None and interval_s is not None:
            self.guard_ = Guard(timeout_s, interval_s)
        self.baseline_: Settings = params.baseline
        self.bounds_: Bounds = params.bounds()
        self.php_interference_: int = params.php_interference()
        self.row_ = params.row
        self.instances_: dict[str, InstanceState] = {}
        names = detector.features
        self._lpo_at = names.index(LPO)
        self._rt_at = names.index(RT)
        self._core_index = core_index(names)

    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> Ic2Policy:
        p = parse_params(cls.params_model, params, cls.name)
        detector = load_detector(ctx.base_dir / p.detector, p.workload).detector
        return cls(detector, p, ctx.request_timeout_s, ctx.interval_s)

    # -- one interval --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        for gone in set(self.instances_) - set(snapshot.instances):
            del self.instances_[gone]
            if self.guard_ is not None:
                self.guard_.forget(gone)
        actions: list[Action] = []
        reasons: list[str] = []
        rows: dict[str, object] = {}
        for iid in sorted(snapshot.instances):
            state = self.instances_.get(iid)
            if state is None:
                window = FeatureWindow(self.detector.window_intervals, self._core_index)
                state = self.instances_[iid] = InstanceState(window)
            action, reason, row = self._one(iid, snapshot.instances[iid], state, snapshot.time_s)
            rows[iid] = row
            if action is not None:
                actions.append(action)
            if reason:
                reasons.append(reason)
        detail: dict[str, object] = {
            "baseline": self.baseline_.as_dict(),
            "context_change": self.params.row_name,
            "instances": rows,
        }
        if not reasons:
            states = sorted({str(r["state"]) for r in rows.values() if isinstance(r, dict)})
            reasons.append(f"no reconfiguration (states: {', '.join(states) or 'none'})")
        return Decision(tuple(actions), "; ".join(reasons), detail)

    def _verdict(self, row: list[float]) -> Verdict | None:
        code = self.detector.predict_one(row)
        return None if code is None else CLASSES[code]

    def _one(
        self, iid: str, obs: Observation, state: InstanceState, now_s: float
    ) -> tuple[Action | None, str, dict[str, object]]:
        """One instance's interval: the action (if any), the reason (if it acted or was held
        back), and the numbers."""
        in_force = Settings.in_force(obs.extra, state.asked or self.baseline_)
        row = feature_row(obs, self.detector.features)
        lpo, rt = _finite(row[self._lpo_at]), _finite(row[self._rt_at])
        verdict = self._verdict(state.window.push(row))
        out: dict[str, object] = {
            "verdict": verdict,
            "lpo_cpu_s_per_req": lpo,
            "rt_s": rt,
            "settings": in_force.as_dict(),
        }
        chain = state.chain
        fired: ChainState | None = None
        if verdict is None:
            out["state"] = chain.state_
            out["note"] = "no verdict: response time, throughput or CPU not measured"
        else:
            state.record(verdict, lpo, rt)
            left_ni2 = chain.state_ == "NI2"
            fired = chain.step(verdict)
            if left_ni2 and chain.state_ != "NI2" and self.guard_ is not None:
                self.guard_.restart_before(iid)  # the before starts under this neighbour
            if fired is None and verdict == "NI" and chain.state_ == chain.config_ == "NI2":
                state.record_clean(lpo, rt)
            out["state"] = chain.state_
            out["lpo_clean_median"] = _median(state.clean_lpo)
            out["rt_clean_median_s"] = _median(state.clean_rt)
        judgement = None if self.guard_ is None else self.guard_.push(iid, obs)
        if fired is not None:
            return self._fire(iid, fired, in_force, state, out, now_s)
        if judgement is not None:
            return self._judged(iid, judgement, in_force, state, out, now_s)
        return None, "", out

    def _graceful(self, change: dict[str, int | float]) -> bool:
        """Graceful only when asked and some setting of ``change`` cannot change online."""
        p = self.params
        return p.graceful and not (p.prefer_online and set(change) <= p.online)

    def _bounds(self, state: InstanceState, now_s: float) -> Bounds:
        """The bounds, with what a revert holds (until it expires)."""
        for key in [k for k, (_, until) in state.held.items() if until <= now_s]:
            del state.held[key]
        low, high = self.bounds_.low.as_dict(), self.bounds_.high.as_dict()
        for (setting, direction), (value, _) in state.held.items():
            if direction < 0:
                low[setting] = max(low[setting], value)
            else:
                high[setting] = min(high[setting], value)
        return Bounds(_settings(low), _settings(high))

    def _judged(
        self,
        iid: str,
        judgement: Judgement,
        in_force: Settings,
        state: InstanceState,
        out: dict[str, object],
        now_s: float,
    ) -> tuple[Action | None, str, dict[str, object]]:
        """The guard's judgement of the change watched: keep it, or ask for the settings before
        it again and hold each setting it moved from moving that way."""
        watched, state.watched = state.watched, None
        out["guard"] = judgement.as_dict()
        if watched is None:
            return None, "", out
        at_s, before, after = watched
        moved = before.changed(after)
        words = ", ".join(f"{k} {before.as_dict()[k]:g} → {v:g}" for k, v in sorted(moved.items()))
        change_words = f"the change at {at_s:g} s ({words})"
        if judgement.outcome == "keep":
            return None, f"{iid}: {change_words} kept: {judgement.words()}", out
        back = in_force.changed(before)
        held = []
        for k, v in moved.items():
            setting: Setting = k  # type: ignore[assignment]
            direction: Direction = 1 if v > before.as_dict()[k] else -1
            bound = float(before.as_dict()[k])
            state.held[(setting, direction)] = (bound, now_s + HOLD_S)
            held.append(f"{k} {'≤' if direction > 0 else '≥'} {bound:g}")
        state.asked = before
        out["guard"] = judgement.as_dict() | {
            "reverted": {"at_s": at_s, "from": after.as_dict(), "to": before.as_dict()},
            "held": _held(state),
        }
        why = (
            f"{iid}: reverting {change_words}: {judgement.words()};"
            f" held {', '.join(held)} for {HOLD_S:g} s"
        )
        if not back:
            return None, f"{why}; the settings in force are already {before.as_dict()}", out
        out["target"] = before.as_dict()
        return ReconfigureServer(iid, back, self._graceful(back)), why, out

    def _fire(
        self,
        iid: str,
        fired: ChainState,
        in_force: Settings,
        state: InstanceState,
        out: dict[str, object],
        now_s: float,
    ) -> tuple[Action | None, str, dict[str, object]]:
        if self.guard_ is not None:  # a new change supersedes the one watched
            self.guard_.cancel(iid)
            state.watched = None
        if fired == "I2":
            evidence = state.evidence()
            bounds = self._bounds(state, now_s)
            if state.held:
                out["held"] = _held(state)
            target, numbers = reconfigure_for_interference(
                in_force,
                evidence,
                self.row_,
                bounds,
                self.params.c_kat,
                self.php_interference_,
                self.params.threads_per_child,
            )
            out["algorithm_1"] = numbers
            why = (
                f"{iid} entered I2 (interference, {self.params.row_name};"
                f" {_evidence_words(evidence)})"
            )
        else:
            target = self.baseline_
            why = f"{iid} entered NI2 (interference gone): back to the baseline"
        if not self.params.graceful:
            online = self.params.online
            kept = {k: v for k, v in in_force.as_dict().items() if k not in online}
            target = replace(target, **kept)  # type: ignore[arg-type]
        state.asked = target
        change = in_force.changed(target)
        out["fired"] = fired
        out["target"] = target.as_dict()
        if not change:
            return None, f"{why}; the settings in force are already {target.as_dict()}", out
        moves = ", ".join(
            f"{k} {in_force.as_dict()[k]:g} → {v:g}" for k, v in sorted(change.items())
        )
        graceful = self._graceful(change)
        if self.params.graceful and not graceful:
            moves += " (online: each setting can change in place)"
        if fired == "I2" and self.guard_ is not None:
            before = self.guard_.start(iid)
            if before is None:
                out["guard"] = "not watched: fewer than 2 intervals measured before the change"
            else:
                state.watched = (now_s, in_force, target)
                out["guard"] = {
                    "watching": True,
                    "before_intervals": len(before),
                    "after_intervals": self.guard_.after_intervals,
                }
        return ReconfigureServer(iid, change, graceful), f"{why}: {moves}", out


def _settings(values: dict[str, int | float]) -> Settings:
    return Settings(
        int(values["max_request_workers"]),
        float(values["keepalive_timeout_s"]),
        int(values["php_max_children"]),
    )


def _held(state: InstanceState) -> dict[str, dict[str, float]]:
    """What reverts hold, JSON-ready: "max_request_workers ≥" → its bound and until when."""
    order = sorted(state.held.items(), key=lambda kv: (SETTINGS.index(kv[0][0]), kv[0][1]))
    return {
        f"{s} {'≤' if d > 0 else '≥'}": {"bound": v, "until_s": until}
        for (s, d), (v, until) in order
    }


def _evidence_words(e: Evidence) -> str:
    def pair(now: float | None, clean: float | None, unit: str) -> str:
        if now is None or clean is None:
            return f"{'?' if now is None else f'{now:.4g}'} against no clean median yet"
        return f"{now:.4g} against a clean median of {clean:.4g} {unit}"

    lpo = pair(e.lpo_cpu_s_per_req, e.lpo_clean_cpu_s_per_req, "CPU-s per request")
    rt = pair(e.rt_s, e.rt_clean_s, "s")
    return f"LPO {lpo}; response time {rt}"


__all__ = ["Ic2Policy", "InstanceState"]

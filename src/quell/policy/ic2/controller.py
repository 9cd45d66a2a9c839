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
from quell.policy.hysteresis import ChainState, ContextChain, Verdict
from quell.policy.ic2.params import Ic2Params
from quell.policy.ic2.update import Bounds, Evidence, Settings, reconfigure_for_interference

CLEAN_INTERVALS = 60
"""The clean medians are over this many clean intervals: a minute at the lab's 1 s intervals,
five at the simulator's 5 s, long enough that one slow interval does not move them. No run has
varied it."""
EVIDENCE_INTERVALS = 3
"""Algorithm 1's LPO and RT are the medians of the last this many I verdicts: the three with
which the five-state chain enters I2 from NI2 (NI2 → T → I1 → I2), not one interval's."""


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

    def __init__(self, detector: CostSensitiveTree, params: Ic2Params) -> None:
        self.detector = detector
        self.params = params
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
        return cls(load_detector(ctx.base_dir / p.detector, p.workload).detector, p)

    # -- one interval --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        for gone in set(self.instances_) - set(snapshot.instances):
            del self.instances_[gone]
        actions: list[Action] = []
        reasons: list[str] = []
        rows: dict[str, object] = {}
        for iid in sorted(snapshot.instances):
            state = self.instances_.get(iid)
            if state is None:
                window = FeatureWindow(self.detector.window_intervals, self._core_index)
                state = self.instances_[iid] = InstanceState(window)
            action, reason, row = self._one(iid, snapshot.instances[iid], state)
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
        self, iid: str, obs: Observation, state: InstanceState
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
        if verdict is None:
            out["state"] = state.chain.state_
            out["note"] = "no verdict: response time, throughput or CPU not measured"
            return None, "", out
        state.record(verdict, lpo, rt)
        fired = state.chain.step(verdict)
        chain = state.chain
        if fired is None and verdict == "NI" and chain.state_ == chain.config_ == "NI2":
            state.record_clean(lpo, rt)
        out["state"] = chain.state_
        out["lpo_clean_median"] = _median(state.clean_lpo)
        out["rt_clean_median_s"] = _median(state.clean_rt)
        if fired is None:
            return None, "", out
        return self._fire(iid, fired, in_force, state, out)

    def _fire(
        self,
        iid: str,
        fired: ChainState,
        in_force: Settings,
        state: InstanceState,
        out: dict[str, object],
    ) -> tuple[Action | None, str, dict[str, object]]:
        if fired == "I2":
            evidence = state.evidence()
            target, numbers = reconfigure_for_interference(
                in_force,
                evidence,
                self.row_,
                self.bounds_,
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
        action = ReconfigureServer(iid, change, self.params.graceful)
        return action, f"{why}: {moves}", out


def _evidence_words(e: Evidence) -> str:
    def pair(now: float | None, clean: float | None, unit: str) -> str:
        if now is None or clean is None:
            return f"{'?' if now is None else f'{now:.4g}'} against no clean median yet"
        return f"{now:.4g} against a clean median of {clean:.4g} {unit}"

    lpo = pair(e.lpo_cpu_s_per_req, e.lpo_clean_cpu_s_per_req, "CPU-s per request")
    rt = pair(e.rt_s, e.rt_clean_s, "s")
    return f"LPO {lpo}; response time {rt}"


__all__ = ["Ic2Policy", "InstanceState"]

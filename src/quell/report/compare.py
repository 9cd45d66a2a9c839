"""Several policies on one scenario, side by side.

For each run and each phase, the *settled window* ends with the phase and starts when the
policy's mitigations have settled, "boot delay + 2 periods" after each:

* ``settle_s`` after the phase begins (2 intervals for the policy to see the change — W = 1 to
  confirm a violation, 1 to act — then the scaling boot delay, then 2 probe periods, at least an
  interval each, for the new instance's SF and the load to move), and
* for every instance the policy asked for during the phase, the boot delay + 2 periods after
  it asked (``mitigation_settle_s``), if that is before the phase ends: a policy that detects
  later, or needs a second instance, is judged once its last addition has settled. An addition
  that cannot settle before the phase ends cannot have helped it, and the phase is judged without
  it. Removals and weight changes take no boot and settle within the first bound.

Within the window, each instance's mean response time is computed from the client-side requests
sent to it in the window and answered; a policy *meets the target* in a phase when every
instance's settled mean is ≤ R_th. A request counts by when it was sent: one sent before the
window opens was routed while the mitigations were still settling, and counts with them even
if its answer comes inside the window (by its answer, a drained instance's one last request
could decide a phase), and one sent before the phase ends counts with the phase even if it is
answered after. Beside the per-instance means stand how many requests each answered and the
mean and 95th percentile over every answered request in the window: what the users felt,
whichever instance served them (a policy that takes an interfered instance out of service has
no mean there, and its requests count where they were served).
Beside these, per phase, what the users felt per request over every request *sent in the
phase*, settled or not and answered or not (``users``, ``quell.report.felt``: the share above
R_th and above 2 × R_th and the p99, an unanswered request counted at the workload's timeout):
the users felt the settling too, and this is the same window ``sim compare`` and the run
report use.
Beside it stands the machine's CPU steal over the window: the lab is itself often a cloud VM,
and a window whose steal averaged over ``STEAL_SUSPECT_PCT`` is named under the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from quell.core.action import SCALING_TYPES, AddInstance
from quell.core.observation import STEAL_SUSPECT_PCT
from quell.report.felt import felt_table, phase_felt, policy_rows
from quell.report.fit import FitTable
from quell.scenario.model import Scenario
from quell.store.run import RunStore


def mitigation_settle_s(scenario: Scenario) -> float:
    """Boot delay + 2 periods: from asking for an instance until it carries its share."""
    boot = scenario.scaling.boot_s if scenario.scaling else 0.0
    period = max(scenario.interval_s, scenario.probe.period_s if scenario.probe else 0.0)
    return boot + 2 * period


def settle_s(scenario: Scenario) -> float:
    """From a phase's start until a mitigation asked for 2 intervals in has settled."""
    return 2 * scenario.interval_s + mitigation_settle_s(scenario)


def run_phases(scenario: Scenario, run_dir: Path) -> dict[str, Any]:
    """Per phase: settled mean RT of each instance, whether all met the target, the machine's
    CPU steal over the window (``None`` where the environment measures none), and the scaling
    actions the policy asked for in the phase (all of it, not only the settled window)."""
    target = scenario.target.mean_rt_s if scenario.target else None
    timeout = scenario.workload.timeout_s
    with RunStore.open(run_dir) as store:
        req = store.request_arrays()
        decisions = store.decisions()
        windows = _settled_windows(scenario, decisions)
        steal = [store.steal_pct(lo, end) for _, lo, end in windows]
    sent = req["send_s"]
    ok = ~np.isnan(req["latency_s"])
    scaled_s = [
        t for t, _, _, actions in decisions for a in actions if a.get("type") in SCALING_TYPES
    ]
    phases = []
    for (name, lo, end), steal_pct, (_, start, stop) in zip(
        windows, steal, scenario.phases(), strict=True
    ):
        sel = ok & (sent >= lo) & (sent < end)
        per: dict[str, float] = {}
        count: dict[str, int] = {}
        for server in sorted(set(req["server"][sel].tolist())):
            if server:
                m = sel & (req["server"] == server)
                per[server] = float(req["latency_s"][m].mean())
                count[server] = int(m.sum())
        worst = max(per.values()) if per else None
        answered = req["latency_s"][sel]
        phases.append(
            {
                "phase": name,
                "settled_from_s": lo,
                "end_s": end,
                "mean_rt_s": per,
                "requests": count,
                "all_mean_rt_s": float(answered.mean()) if answered.size else None,
                "all_p95_rt_s": float(np.quantile(answered, 0.95)) if answered.size else None,
                "worst_mean_rt_s": worst,
                "meets_target": None if target is None or worst is None else worst <= target,
                "steal_pct": steal_pct,
                # a decision at t closes the interval (t - Δ, t]: it belongs where t - Δ does
                "scaling_actions": sum(start < t <= stop for t in scaled_s),
                "users": phase_felt(req, start, stop, timeout, target).to_dict(),
            }
        )
    all_ok = ~np.isnan(req["latency_s"])
    measured = [s for s in steal if s is not None]
    return {
        "run_dir": str(run_dir),
        "phases": phases,
        "scaling_actions": len(scaled_s),
        "mean_rt_s": float(req["latency_s"][all_ok].mean()) if all_ok.any() else None,
        "errors": int((~all_ok).sum()),
        "max_steal_pct": max(measured) if measured else None,
    }


def _settled_windows(
    scenario: Scenario, decisions: list[tuple[float, str, str, list[dict[str, Any]]]]
) -> list[tuple[str, float, float]]:
    """(phase, settled from, end) of every phase, given the run's decisions."""
    added_s = [
        t
        for t, _, _, actions in decisions
        for a in actions
        if a.get("type") == AddInstance.__name__
    ]
    first, mitigation = settle_s(scenario), mitigation_settle_s(scenario)
    windows = []
    for name, start, end in scenario.phases():
        later = [t + mitigation for t in added_s if start <= t and t + mitigation < end]
        windows.append((name, min(max([start + first, *later]), end), end))
    return windows


def comparison(scenario: Scenario, runs: list[tuple[str, Path]]) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "target_rt_s": scenario.target.mean_rt_s if scenario.target else None,
        "timeout_s": scenario.workload.timeout_s,
        "settle_s": settle_s(scenario),
        "policies": {name: run_phases(scenario, d) for name, d in runs},
    }


def compare_table(
    result: dict[str, Any], console: Console, bound_pct: float = STEAL_SUSPECT_PCT
) -> None:
    target = result["target_rt_s"]
    title = f"{result['scenario']}: worst instance mean RT per phase, settled"
    if target is not None:
        title += f" (R_th = {target * 1e3:.0f} ms; * = above)"
    t = FitTable(title=title)
    t.add_column("policy")
    names = list(result["policies"])
    phases = [p["phase"] for p in result["policies"][names[0]]["phases"]]
    for ph in phases:
        t.add_column(f"{ph} ms", justify="right")
    t.add_column("scaling", justify="right")
    t.add_column("errors", justify="right")
    t.add_column("steal %", justify="right")
    for name in names:
        r = result["policies"][name]
        cells = []
        for p in r["phases"]:
            w = p["worst_mean_rt_s"]
            mark = " *" if p["meets_target"] is False else ""
            cells.append("-" if w is None else f"{w * 1e3:.1f}{mark}")
        steal = r.get("max_steal_pct")
        per_phase = [p.get("scaling_actions") for p in r["phases"]]
        scaling = (
            "·".join(str(n) for n in per_phase)  # per phase: where a policy acted
            if per_phase and None not in per_phase
            else str(r["scaling_actions"])
        )
        t.add_row(
            name,
            *cells,
            scaling,
            str(r["errors"]),
            "-" if steal is None else f"{steal:.2f}",
        )
    console.print(t)
    every = every_request_rows(result)
    if every is not None:
        e = FitTable(title="every answered request in the settled window: mean / p95 ms")
        e.add_column("policy")
        for ph in phases:
            e.add_column(ph, justify="right")
        for name, cells in every:
            e.add_row(name, *cells)
        console.print(e)
    users = users_rows(result)
    if users:
        console.print(felt_table(users, ("policy", "phase"), target, result.get("timeout_s")))
    note = steal_note(result, bound_pct)
    if note is not None:
        console.print(f"[yellow]{note}[/]", highlight=False)


def every_request_rows(result: dict[str, Any]) -> list[tuple[str, list[str]]] | None:
    """Per policy, ``mean / p95`` (ms) over every answered request in each phase's settled
    window; ``None`` for a comparison written before those were recorded."""
    policies = result["policies"]
    every = [p for r in policies.values() for p in r["phases"]]
    if not every or any(p.get("all_mean_rt_s") is None for p in every):
        return None
    return [
        (
            name,
            [
                f"{p['all_mean_rt_s'] * 1e3:.1f} / {p['all_p95_rt_s'] * 1e3:.1f}"
                for p in r["phases"]
            ],
        )
        for name, r in policies.items()
    ]


def users_by_policy(result: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Per policy, per phase, what the users felt per request (``None`` for a comparison
    written before it was recorded)."""
    out: dict[str, dict[str, Any] | None] = {}
    for name, r in result["policies"].items():
        phases = r["phases"]
        known = phases and all(p.get("users") is not None for p in phases)
        out[name] = {p["phase"]: p["users"] for p in phases} if known else None
    return out


def users_rows(result: dict[str, Any]) -> list[tuple[list[str], Mapping[str, Any] | None]]:
    """The rows of the comparison's table of what users felt: per policy and phase."""
    return policy_rows(users_by_policy(result))


def steal_note(result: dict[str, Any], bound_pct: float = STEAL_SUSPECT_PCT) -> str | None:
    """A warning naming every settled window in which the machine's CPU steal averaged over
    ``bound_pct``, else ``None``: the machine itself slowed that run, and a comparison with it
    says less than its numbers suggest."""
    over = [
        f"{name} {p['phase']} {p['steal_pct']:.2f} %"
        for name, r in result["policies"].items()
        for p in r["phases"]
        if p.get("steal_pct") is not None and p["steal_pct"] > bound_pct
    ]
    if not over:
        return None
    return (
        f"the machine's CPU steal averaged over {bound_pct:g} % in: {', '.join(over)}. "
        "Steal slows every instance and its probe and reads as interference: run again."
    )

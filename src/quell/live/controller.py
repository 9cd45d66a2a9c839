"""``quell live run``: the control loop against a ``LiveEnvironment``, made safe for a fleet
that serves real users.

Every interval: observe; if a part the decision needs is missing (Prometheus down, an agent's
metrics stale, missing or NaN, HAProxy's socket gone) the controller **holds**: it keeps the
weights in force (the last safe ones), logs a decision "hold: <what is missing>" and does not
ask the policy (whose memory would fill with holes). Otherwise the policy decides and the
**guard** trims what it asked for: never every serving instance at weight 0, no weight moved by
more than ``max_weight_step`` at once, never below ``min_instances`` or above
``max_instances``, no two scaling actions closer than ``min_gap_s``. In a **dry run** (the
default) nothing is applied: the decisions are logged and exported all the same.

Every decision, applied or not, goes to the run store as it is made (committed each interval);
the controller's own state (which instance is which HAProxy server, the run's time) is kept in
the store's meta, so a controller restarted on the same run directory picks up where it was;
the policy's memory (PRIMA's windows and trials, a stabilisation window) is rebuilt by replaying
the stored snapshots through it.
Its own ``/metrics``: ``quell_decisions_total{policy,reason}``, per-instance weight, measured
RT, probe RT and capacity or predicted RT where the policy's decision gives them, faults by
part; ``/`` is a small page with the last hour's plots, what the users felt per request over
the last five minutes and the last hour (from HAProxy's log, held in memory: since the
controller started, at most the last hour; ``RequestWindow``), and the decision log."""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from quell.core.action import Action, AddInstance, Decision, RemoveInstance, SetWeight
from quell.core.clock import WallClock
from quell.core.environment import FastPolicy, Policy
from quell.core.metrics import MetricSet, MetricSpec
from quell.core.observation import Snapshot
from quell.errors import ActionError, InputError, Problem
from quell.live.config import LiveConfig
from quell.live.environment import LiveEnvironment
from quell.policy import PolicyContext, ScalingLimits, build_policy
from quell.probe.severity import PROBE_KEY
from quell.signals.haproxy_log import LoggedRequest
from quell.store.run import RunStore

log = logging.getLogger(__name__)

STATE_KEY = "live_state"


def policy_context(cfg: LiveConfig, base_dir: Path) -> PolicyContext:
    """What a policy built for the live deployment ``cfg`` may know."""
    sc = cfg.scaling
    hosts = list(dict.fromkeys(i.host for i in cfg.instances if i.slot))
    probe_util: dict[str, float] = {}
    if cfg.probe_period_s is not None and cfg.probe_size_bytes is not None:
        bits_per_s = cfg.probe_size_bytes * 8 / cfg.probe_period_s
        probe_util = {
            h: 100.0 * bits_per_s / (mbit * 1e6) for h, mbit in cfg.host_link_mbit.items()
        }
    return PolicyContext(
        interval_s=cfg.interval_s,
        target_rt_s=cfg.target_rt_s,
        scaling=None
        if sc is None
        else ScalingLimits(tuple(hosts), sc.boot_s, sc.min_instances, sc.max_instances),
        base_dir=base_dir,
        initial_instances={i.id: i.host for i in cfg.instances if not i.slot},
        lb_algorithm="roundrobin",
        probe_period_s=cfg.probe_period_s,
        probe_util_pct=probe_util,
    )


def make_policy(cfg: LiveConfig, config_dir: Path) -> Policy:
    """The configured policy; relative paths in its parameters resolve in ``base_dir`` (default:
    ``config_dir``, the config file's directory)."""
    base = config_dir / cfg.base_dir if cfg.base_dir is not None else config_dir
    policy = build_policy(cfg.policy.name, cfg.policy.params, policy_context(cfg, base))
    if isinstance(policy, FastPolicy) and policy.fast_interval_s is not None:
        # the controller decides at its interval only (LiveEnvironment.glance says why): a fast
        # path asked for by name is refused; the default's is off, as the start-up log says
        if _asks_fast(cfg.policy.params):
            raise InputError(
                "live config",
                [Problem("policy.params.fast_interval_s", "a fast path is not available live yet")],
            )
        log.info(
            "%s decides every %g s; its fast path is off live", cfg.policy.name, cfg.interval_s
        )
        policy.fast_interval_s = None
    return policy


def _asks_fast(params: Mapping[str, Any]) -> bool:
    """Whether a policy's parameters set a fast path by name (its own or a section's)."""
    return "fast_interval_s" in params or any(
        isinstance(v, Mapping) and _asks_fast(v) for v in params.values()
    )


@dataclass
class Guard:
    """Trims a decision to what is safe; says what it dropped."""

    cfg: LiveConfig
    last_scale_s: float = -float("inf")

    def trim(self, snap: Snapshot, d: Decision, now_s: float) -> tuple[list[Action], list[str]]:
        kept: list[Action] = []
        dropped: list[str] = []
        weights = {iid: o.weight for iid, o in snap.instances.items()}
        sc = self.cfg.scaling
        n = len(snap.instances)
        step = self.cfg.max_weight_step
        for a in d.actions:
            if isinstance(a, SetWeight):
                w0 = weights.get(a.instance_id)
                if w0 is not None and abs(a.weight - w0) > step:
                    a = SetWeight(a.instance_id, w0 + step * (1 if a.weight > w0 else -1))
                    dropped.append(f"weight of {a.instance_id} moved by {step} at most")
                kept.append(a)
            elif isinstance(a, AddInstance | RemoveInstance):
                if now_s - self.last_scale_s < (sc.min_gap_s if sc else 0.0):
                    dropped.append(f"{type(a).__name__} {a.instance_id}: within min_gap_s")
                    continue
                if isinstance(a, RemoveInstance):
                    if sc is None or n - 1 < sc.min_instances:
                        dropped.append(f"RemoveInstance {a.instance_id}: below min_instances")
                        continue
                    n -= 1
                else:
                    if sc is None or (sc.max_instances is not None and n + 1 > sc.max_instances):
                        dropped.append(f"AddInstance {a.instance_id}: above max_instances")
                        continue
                    n += 1
                kept.append(a)
            else:
                kept.append(a)
        # never every serving instance at weight 0
        final = dict(weights)
        removed = {a.instance_id for a in kept if isinstance(a, RemoveInstance)}
        for a in kept:
            if isinstance(a, SetWeight):
                final[a.instance_id] = a.weight
        staying = [iid for iid in final if iid not in removed]
        if staying and all(final[i] == 0 for i in staying):
            kept = [a for a in kept if not (isinstance(a, SetWeight) and a.weight == 0)]
            dropped.append("every serving instance at weight 0: weight-0 actions dropped")
        if any(isinstance(a, AddInstance | RemoveInstance) for a in kept):
            self.last_scale_s = now_s
        return kept, dropped


DECISIONS = MetricSpec(
    "quell_decisions", "counter", "Decisions by policy and kind", ("policy", "reason")
)
FAULTS = MetricSpec("quell_faults", "counter", "Intervals a part was missing", ("part",))
WEIGHT = MetricSpec("quell_weight", "gauge", "Weight in force", ("instance",))
MEASURED_RT = MetricSpec(
    "quell_measured_rt_seconds",
    "gauge",
    "Mean response time last interval",
    ("instance",),
    "seconds",
)
PROBE_RT = MetricSpec(
    "quell_probe_rt_seconds",
    "gauge",
    "Probe download time last interval",
    ("instance",),
    "seconds",
)
CAPACITY = MetricSpec(
    "quell_capacity", "gauge", "Per-instance capacity the policy computed", ("instance",)
)
PREDICTED_RT = MetricSpec(
    "quell_predicted_rt_seconds",
    "gauge",
    "Response time the policy predicted",
    ("instance",),
    "seconds",
)
INSTANCES = MetricSpec("quell_instances", "gauge", "Serving instances")
METRICS = MetricSet(
    "quell live run",
    "the controller's ``/metrics`` (``listen`` in live.yaml); ``quell_capacity`` and "
    "``quell_predicted_rt_seconds`` where the policy's decision detail gives them",
    True,
    (DECISIONS, FAULTS, WEIGHT, MEASURED_RT, PROBE_RT, CAPACITY, PREDICTED_RT, INSTANCES),
)
"""Everything the controller serves, in the order it serves it (docs/reference/metrics.md)."""


@dataclass
class ControllerMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry())

    def __post_init__(self) -> None:
        def counter(spec: MetricSpec) -> Counter:
            return Counter(spec.name, spec.help, spec.labels, registry=self.registry)

        def gauge(spec: MetricSpec) -> Gauge:
            return Gauge(spec.name, spec.help, spec.labels, registry=self.registry)

        self.decisions = counter(DECISIONS)
        self.faults = counter(FAULTS)
        self.weight = gauge(WEIGHT)
        self.rt = gauge(MEASURED_RT)
        self.probe = gauge(PROBE_RT)
        self.capacity = gauge(CAPACITY)
        self.predicted = gauge(PREDICTED_RT)
        self.instances = gauge(INSTANCES)


def _per_instance(detail: Any, *keys: str) -> dict[str, float]:
    """Per-instance numbers in a decision's detail under one of ``keys``, where it has them."""
    if not isinstance(detail, dict):
        return {}
    for k in keys:
        v = detail.get(k)
        if isinstance(v, dict):
            return {
                str(i): float(x)
                for i, x in v.items()
                if isinstance(x, int | float) and not isinstance(x, bool)
            }
    return {}


WINDOW_S = 3600.0
"""How far back ``RequestWindow`` holds HAProxy's requests."""
WINDOW_MAX_REQUESTS = 4_000_000
"""The most requests it holds (a bound on memory, 9 bytes each): past it, the oldest
intervals go first."""


class RequestWindow:
    """The last ``window_s`` of HAProxy's log, one chunk per interval: per request its active
    time (NaN where it ended before an answer) and whether it was answered 2xx or 3xx. Read by
    the page's thread while the controller's adds to it."""

    def __init__(self, window_s: float = WINDOW_S, max_requests: int = WINDOW_MAX_REQUESTS) -> None:
        self.window_s = window_s
        self.max_requests = max_requests
        self._chunks: deque[tuple[float, NDArray[np.float64], NDArray[np.bool_]]] = deque()
        self._held = 0
        self._lock = threading.Lock()

    def add(self, time_s: float, records: Sequence[LoggedRequest]) -> None:
        """The requests of the interval that ends at ``time_s``."""
        rt = np.array(
            [np.nan if r.active_s is None else r.active_s for r in records], dtype=np.float64
        )
        ok = np.array(
            [r.active_s is not None and 200 <= r.status < 400 for r in records], dtype=np.bool_
        )
        with self._lock:
            self._chunks.append((time_s, rt, ok))
            self._held += rt.size
            while self._chunks and (
                self._chunks[0][0] <= time_s - self.window_s or self._held > self.max_requests
            ):
                self._held -= self._chunks.popleft()[1].size

    def since(self, start_s: float) -> tuple[float | None, NDArray[np.float64], NDArray[np.bool_]]:
        """The end of the first interval held after ``start_s`` (``None``: none), and the
        active times and answered flags of the requests of the intervals ending after it."""
        with self._lock:
            kept = [c for c in self._chunks if c[0] > start_s]
        if not kept:
            return None, np.empty(0), np.empty(0, dtype=np.bool_)
        return (
            kept[0][0],
            np.concatenate([c[1] for c in kept]),
            np.concatenate([c[2] for c in kept]),
        )


class Controller:
    def __init__(
        self,
        cfg: LiveConfig,
        env: LiveEnvironment,
        policy: Policy,
        store: RunStore,
        apply: bool = False,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.cfg = cfg
        self.env = env
        self.policy = policy
        self.store = store
        self.apply_actions = apply
        self.metrics = metrics or ControllerMetrics()
        self.guard = Guard(cfg)
        self.window = RequestWindow()
        """HAProxy's requests of the last hour, for the page."""
        self.stop_event = threading.Event()
        self.ticks = 0
        self.replayed = 0
        """Snapshots the policy decided on again when the controller resumed a run."""

    # -- state ---------------------------------------------------------------------------------
    def resume(self) -> float:
        """Pick up a run already in the store: the membership, the time it had reached (the
        returned offset continues the run's clock) and the policy's memory. A policy is pure
        (snapshot in, decision out), so its memory is rebuilt by deciding again, without
        acting, on every snapshot it decided on before: those the store holds, less the
        intervals the controller held (where the policy was not asked)."""
        meta = self.store.meta()
        saved = meta.get(STATE_KEY)
        if isinstance(saved, dict):
            self.env.restore(saved.get("members", {}))
            self.guard.last_scale_s = float(saved.get("last_scale_s", -1e18))
            self.replayed = self._replay()
            return float(saved.get("time_s", 0.0))
        return 0.0

    def _replay(self) -> int:
        held = {t for t, _, reason, _, _ in self.store.decision_log() if reason.startswith("hold:")}
        n = 0
        for snap in self.store.snapshots(self.env.name):
            if snap.time_s not in held:
                self.policy.decide(snap)
                n += 1
        return n

    def save(self, time_s: float) -> None:
        self.store.set_meta(
            **{
                STATE_KEY: {
                    "members": self.env.membership(),
                    "time_s": time_s,
                    "last_scale_s": max(self.guard.last_scale_s, -1e18),
                    "saved_at": time.time(),
                }
            }
        )

    # -- one interval --------------------------------------------------------------------------
    def step(self) -> Decision:
        env = self.env
        now = env.clock.now()
        try:
            snap = env.observe()
        except Exception as exc:  # one failed observation never ends the run
            msg = f"{type(exc).__name__}: {exc}"
            self.store.add_event(now, "cycle_error", message=msg)
            d = Decision((), f"hold: cannot observe ({msg})", {"kind": "hold"})
            self._record(now, d, "hold")
            return d
        self.store.add_snapshot(snap)
        self.window.add(snap.time_s, env.take_logged())
        for part in env.faults.parts:
            self.metrics.faults.labels(part.split("/")[0]).inc()
        self._export(snap)
        if env.faults:
            why = "; ".join(f"{p}: {w}" for p, w in sorted(env.faults.parts.items()))
            d = Decision((), f"hold: keeping the weights in force ({why})", {"kind": "hold"})
            self._record(snap.time_s, d, "hold")
            return d
        decided = self.policy.decide(snap)
        kept, dropped = self.guard.trim(snap, decided, snap.time_s)
        reason = decided.reason
        if dropped:
            reason += " [guard: " + "; ".join(dropped) + "]"
        mode = "applied" if self.apply_actions else "dry run"
        detail = dict(decided.detail)
        detail["mode"] = mode
        d = Decision(tuple(kept), reason, detail)
        kind = "guarded" if dropped else ("act" if kept else "none")
        if kept or decided.reason:
            self._record(snap.time_s, d, kind)
        self._export_detail(decided)
        if kept and self.apply_actions:
            try:
                env.apply(kept)
            except ActionError as exc:
                self.store.add_event(
                    snap.time_s,
                    "apply_failed",
                    failed=[[repr(a), why] for a, why in exc.failed],
                    applied=[repr(a) for a in exc.applied],
                )
        return d

    def _record(self, t: float, d: Decision, kind: str) -> None:
        self.store.add_decision(t, self.policy.name, d)
        self.metrics.decisions.labels(self.policy.name, kind).inc()

    def _export(self, snap: Snapshot) -> None:
        m = self.metrics
        m.instances.set(len(snap.instances))
        for iid, o in snap.instances.items():
            if o.weight is not None:
                m.weight.labels(iid).set(o.weight)
            if o.mean_rt_seconds is not None:
                m.rt.labels(iid).set(o.mean_rt_seconds)
            if (p := o.extra.get(PROBE_KEY)) is not None:
                m.probe.labels(iid).set(p)

    def _export_detail(self, d: Decision) -> None:
        for iid, c in _per_instance(d.detail, "capacity", "capacities", "c_eff").items():
            self.metrics.capacity.labels(iid).set(c)
        for iid, r in _per_instance(d.detail, "predicted_rt_s", "predicted_rt").items():
            self.metrics.predicted.labels(iid).set(r)

    # -- the loop ------------------------------------------------------------------------------
    def run(
        self, duration_s: float | None, on_tick: Callable[[Decision], None] = lambda d: None
    ) -> int:
        """Run every ``interval_s`` until ``duration_s`` (or ``stop``); returns the ticks."""
        env = self.env
        interval = self.cfg.interval_s
        start = env.clock.now()
        k = 0
        while not self.stop_event.is_set():
            k += 1
            due = start + k * interval
            if duration_s is not None and due - start > duration_s + 1e-9:
                break
            while env.clock.now() < due and not self.stop_event.is_set():
                self.stop_event.wait(min(0.2, max(0.0, due - env.clock.now())))
            if self.stop_event.is_set():
                break
            d = self.step()
            self.ticks += 1
            self.save(env.clock.now())
            self.store.commit()
            on_tick(d)
        return self.ticks


def continuing_clock(offset_s: float) -> WallClock:
    """Wall time continuing a run that had reached ``offset_s`` seconds before this process."""
    return WallClock(origin=time.monotonic() - offset_s)


# -- its own HTTP side -------------------------------------------------------------------------
def decision_page(
    store_dir: Path, last: int = 200, plots: Sequence[str] = (), users: str = ""
) -> bytes:
    """The page at ``/``: the plots named in ``plots`` (served under ``/plots/``), ``users``
    (HTML: what the users felt), then the last ``last`` decisions, newest first."""
    store = RunStore.open(store_dir)
    try:
        rows = store.decision_log()[-last:]
    finally:
        store.close()
    lines = ["<!doctype html><meta charset=utf-8><title>quell live</title>", "<h1>quell live</h1>"]
    for name in plots:
        lines.append(f'<p><img src="/plots/{html.escape(name)}" alt="{html.escape(name)}">')
    if users:
        lines.append(users)
    lines += [
        "<h2>Decision log</h2><table border=1 cellpadding=3>",
        "<tr><th>time (s)</th><th>policy</th><th>reason</th><th>actions</th></tr>",
    ]
    for t, policy, reason, actions, _ in reversed(rows):
        lines.append(
            f"<tr><td>{t:.1f}</td><td>{html.escape(policy)}</td><td>{html.escape(reason)}</td>"
            f"<td>{html.escape(json.dumps(actions))}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines).encode()


class PlotCache:
    """The page's plots, drawn by ``draw`` (which returns the files it wrote) at most once
    every ``max_age_s``, one drawing at a time; a drawing that fails leaves the page without
    plots for that request, never without its log."""

    def __init__(self, draw: Callable[[], Sequence[Path]], max_age_s: float = 10.0) -> None:
        self.draw = draw
        self.max_age_s = max_age_s
        self.files: dict[str, Path] = {}
        self.drawn_at = -float("inf")
        self.lock = threading.Lock()

    def refresh(self) -> list[str]:
        with self.lock:
            if time.monotonic() - self.drawn_at >= self.max_age_s:
                try:
                    self.files = {p.name: p for p in self.draw()}
                except Exception as exc:  # the plots are a convenience; the log must show
                    log.warning("live plots: %s: %s", type(exc).__name__, exc)
                    self.files = {}
                self.drawn_at = time.monotonic()
            return list(self.files)

    def read(self, name: str) -> bytes | None:
        with self.lock:
            path = self.files.get(name)
        return None if path is None else path.read_bytes()


def serve(
    addr: str,
    port: int,
    metrics: ControllerMetrics,
    run_dir: Path,
    plots: PlotCache | None = None,
    users: Callable[[], str] | None = None,
) -> ThreadingHTTPServer:
    """``/metrics``, ``/`` (the page, with ``users()``'s HTML under the plots) and
    ``/plots/<name>`` (only the files ``plots`` drew)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            png = None
            if path.startswith("/plots/") and plots is not None:
                png = plots.read(path.removeprefix("/plots/"))
            if path == "/metrics":
                body, ctype = generate_latest(metrics.registry), "text/plain; version=0.0.4"
            elif path == "/":
                names = plots.refresh() if plots is not None else []
                section = _users_section(users)
                body = decision_page(run_dir, plots=names, users=section)
                ctype = "text/html; charset=utf-8"
            elif png is not None:
                body, ctype = png, "image/png"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="quell-live-http", daemon=True).start()
    return server


def _users_section(users: Callable[[], str] | None) -> str:
    """``users()``, or nothing where it fails: the figures are a convenience, the log must
    show."""
    if users is None:
        return ""
    try:
        return users()
    except Exception as exc:
        log.warning("live page: %s: %s", type(exc).__name__, exc)
        return ""


def actions_text(actions: Sequence[Action]) -> str:
    return ", ".join(repr(a) for a in actions) or "-"

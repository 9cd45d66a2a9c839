"""``LiveEnvironment``: the user's own HAProxy and instances as an Environment.

Observing, every interval: HAProxy's per-request log (received on a unix datagram socket:
requests, errors, mean and percentile response time per server, exact to HAProxy's
millisecond), HAProxy's stats (weight, maxconn, sessions, queue, state) and the agents' signals
through a real Prometheus (CPU time, PSI, throttling, cap, run-queue wait, interface bytes, the
probe; each a ``rate`` over at least four scrape intervals). A value that cannot be had (Prometheus
down, a series missing, stale or NaN, HAProxy's socket gone) is ``None``, never a guess;
``faults`` says what was missing at the last observation, so the controller can hold.

Acting: weights and maxconn through HAProxy's runtime API; CPU caps through the host's agent
(a bearer token); scaling through a scaler: HAProxy slots over pre-provisioned instances
(``AddInstance`` puts a free slot of the host in service under the new id, ``RemoveInstance``
drains it and puts it back in maintenance), or a user command per scale-out and scale-in (an
argument list, never a shell). ``ReconfigureServer``: gracefully through the host's agent
(which tests, applies, reads back and rolls back the instance's Apache and php-fpm files);
online (``graceful=False``) only MaxRequestWorkers, as HAProxy's ``maxconn`` for the instance,
as in the lab (at most what Apache runs; with a ``SetMaxConn`` as well, the lower one holds).
The settings in force show in each observation under ``SERVER_SETTING_KEYS``: the agent's
gauges, or what it read back after the last reconfiguration."""

from __future__ import annotations

import logging
import math
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np

from quell.actuate.apache import online_change
from quell.actuate.haproxy import HAProxyRuntime
from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetCpuCap,
    SetMaxConn,
    SetWeight,
)
from quell.core.clock import Clock, WallClock
from quell.core.observation import (
    CPU_CAP_KEY,
    MAXCONN_KEY,
    SERVER_SETTING_KEYS,
    THROTTLED_KEY,
    Observation,
    Snapshot,
)
from quell.errors import ActionError, ComponentError, EnvironmentStateError, InputError, Problem
from quell.live.config import CommandScaler, LiveConfig
from quell.live.prometheus import PrometheusClient, Sample
from quell.probe.severity import PROBE_KEY
from quell.signals.haproxy import ServerStat
from quell.signals.haproxy_log import LoggedRequest, RequestLogSocket

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 10.0
"""A draining instance is taken out after this long even if sessions remain."""

InstanceState = Literal["serving", "draining", "gone", "free"]


@dataclass
class Member:
    """One instance the controller knows: its HAProxy server, its host, where it is in its life."""

    id: str
    server: str
    host: str
    slot: bool
    state: InstanceState = "serving"
    drain_until_s: float = math.inf


@dataclass
class Faults:
    """What the last observation could not read, by part."""

    parts: dict[str, str] = field(default_factory=dict)

    def add(self, part: str, why: str) -> None:
        self.parts[part] = why

    def __bool__(self) -> bool:
        return bool(self.parts)


class AgentClient:
    """State-changing requests to the agents (CPU caps), with the bearer token."""

    def __init__(self, urls: Mapping[str, str], token: str | None, timeout_s: float = 2.0):
        self.urls = {h: u.rstrip("/") for h, u in urls.items()}
        self.token = token
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)

    def set_cpu_cap(self, host: str, instance: str, cpus: float | None) -> None:
        self._post(host, "/v1/cpu-cap", {"instance": instance, "cpus": cpus})

    def reconfigure(
        self, host: str, instance: str, settings: Mapping[str, object]
    ) -> dict[str, float]:
        """The instance's Apache and php-fpm reconfigured by its agent; the settings it read
        back (``SERVER_SETTING_KEYS``' keys)."""
        answer = self._post(host, "/v1/reconfigure", {"instance": instance, "settings": settings})
        got = answer.get("in_force")
        if not isinstance(got, dict) or set(got) != set(SERVER_SETTING_KEYS):
            raise ComponentError("agent", f"reconfigure answered {answer!r}")
        return {k: float(v) for k, v in got.items()}

    def _post(self, host: str, path: str, body: Mapping[str, object]) -> dict[str, Any]:
        url = self.urls.get(host)
        if url is None:
            raise ComponentError("agent", f"no agent configured for host {host!r}")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            r = self._client.post(f"{url}{path}", json=dict(body), headers=headers)
        except httpx.HTTPError as exc:
            raise ComponentError("agent", f"{url}: {exc}") from None
        if r.status_code != 200:
            raise ComponentError("agent", f"{url}: HTTP {r.status_code}: {r.text.strip()}")
        try:
            answer = r.json()
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        self._client.close()


def run_command(argv: Sequence[str], timeout_s: float) -> None:
    """A scaler command, as an argument list (no shell); a failure raises ComponentError."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ComponentError("scaler", f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise ComponentError(
            "scaler", f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[:300]}"
        )


def expand(argv: Sequence[str], instance: str, host: str) -> list[str]:
    return [a.replace("{instance}", instance).replace("{host}", host) for a in argv]


def rt_stats(records: Sequence[LoggedRequest]) -> tuple[int, int, list[float | None]]:
    """(requests answered 2xx/3xx, errors, [mean, p50, p95, p99] of the answered ones); a
    request that ended before an answer is in neither count (what users felt of it is the
    controller's page's, ``take_logged``)."""
    timed = [r for r in records if r.active_s is not None]
    ok = np.array([r.active_s for r in timed if 200 <= r.status < 400])
    errors = len(timed) - ok.size
    if ok.size == 0:
        return 0, errors, [None, None, None, None]
    p50, p95, p99 = np.percentile(ok, [50, 95, 99])
    return int(ok.size), errors, [float(ok.mean()), float(p50), float(p95), float(p99)]


class LiveEnvironment:
    name = "live"

    def __init__(
        self,
        cfg: LiveConfig,
        prometheus: PrometheusClient,
        runtime: HAProxyRuntime,
        agents: AgentClient | None = None,
        clock: Clock | None = None,
        open_log: Callable[[], RequestLogSocket] | None = None,
        command: Callable[[Sequence[str], float], None] = run_command,
    ) -> None:
        self.cfg = cfg
        self.prom = prometheus
        self.runtime = runtime
        self.agents = agents
        self.clock: Clock = clock or WallClock()
        self._open_log = open_log or (lambda: RequestLogSocket(Path(cfg.haproxy.log_socket)))
        self._log: RequestLogSocket | None = None
        self._logged: list[LoggedRequest] = []
        self.command = command
        self.backend = cfg.haproxy.backend
        self.members: dict[str, Member] = {
            i.id: Member(i.id, i.id, i.host, i.slot, "free" if i.slot else "serving")
            for i in cfg.instances
        }
        self.faults = Faults()
        self.lb: dict[str, ServerStat] = {}
        self.server_settings: dict[str, dict[str, float]] = {}
        """Per instance id, the settings in force as last read back by its agent."""
        self.maxconn: dict[str, int] = {}
        """Per instance id, the maxconn a ``SetMaxConn`` asked for."""
        self.online_workers: dict[str, int] = {}
        """Per instance id, MaxRequestWorkers set online (HAProxy's maxconn)."""
        self.agent_settings: dict[str, dict[str, float]] = {}
        """Per instance id, the server settings its agent's gauges showed at the last
        observation."""
        self._last_obs = 0.0
        self._state: Literal["not started", "started", "closed"] = "not started"

    # -- state to persist ----------------------------------------------------------------------
    def membership(self) -> dict[str, Any]:
        """Which instance is which server, in which state: what a restart must pick up."""
        return {
            m.id: {"server": m.server, "host": m.host, "slot": m.slot, "state": m.state}
            for m in self.members.values()
        }

    def restore(self, saved: Mapping[str, Any]) -> None:
        for iid, m in saved.items():
            if not isinstance(m, dict) or m.get("state") not in ("serving", "draining", "gone"):
                continue
            self.members[iid] = Member(iid, m["server"], m["host"], bool(m["slot"]), m["state"])
            for other in self.members.values():  # a slot taken under another id is not free
                if other.id != iid and other.server == m["server"] and other.state == "free":
                    other.state = "gone"

    # -- life cycle ------------------------------------------------------------------------------
    def _require_started(self, operation: str) -> None:
        if self._state != "started":
            raise EnvironmentStateError(self.name, operation, self._state)

    def start(self) -> None:
        if self._state != "not started":
            raise EnvironmentStateError(self.name, "start", f"already {self._state}")
        self._log = self._open_log()
        self._state = "started"
        self._last_obs = self.clock.now()
        self._read_lb()

    def close(self) -> None:
        """Close the request log and the HTTP clients it was given (their connections)."""
        if self._state == "closed":
            return
        self._state = "closed"
        if self._log is not None:
            self._log.close()
        self.prom.close()
        if self.agents is not None:
            self.agents.close()

    # -- observing -------------------------------------------------------------------------------
    def serving(self) -> list[Member]:
        return [m for m in self.members.values() if m.state in ("serving", "draining")]

    def _read_lb(self) -> bool:
        try:
            rows = self.runtime.show_stat()
        except ComponentError as exc:
            self.faults.add("haproxy", exc.detail)
            return False
        self.lb = {s.server: s for s in rows if s.backend == self.backend}
        return True

    def _window_s(self, interval_s: float) -> float:
        return max(interval_s, 4 * self.cfg.prometheus.scrape_interval_s)

    def _agent_metrics(self, interval_s: float) -> dict[str, dict[str, float]]:
        """Per instance, what Prometheus has of its agent's series (rates per second, gauges);
        series that are stale, missing or NaN are left out."""
        w = f"{round(self._window_s(interval_s) * 1000)}ms"
        pw = w
        if self.cfg.probe_period_s is not None:
            pw = f"{round(max(self._window_s(interval_s), 2.5 * self.cfg.probe_period_s) * 1000)}ms"
        queries = {
            "age_s": "time() - timestamp(quell_instance_up)",
            "up": "quell_instance_up",
            "cpu": f"rate(quell_cgroup_cpu_usage_seconds_total[{w}])",
            "psi_cpu": f"rate(quell_cgroup_cpu_pressure_some_seconds_total[{w}])",
            "psi_memory": f"rate(quell_cgroup_memory_pressure_some_seconds_total[{w}])",
            "psi_io": f"rate(quell_cgroup_io_pressure_some_seconds_total[{w}])",
            "throttled": f"rate(quell_cgroup_cpu_throttled_seconds_total[{w}])",
            "cap": "quell_cgroup_cpu_cap_cpus",
            "rqwait": f"rate(quell_runqueue_wait_seconds_total[{w}])",
            "rx": f"rate(quell_net_receive_bytes_total[{w}])",
            "tx": f"rate(quell_net_transmit_bytes_total[{w}])",
            "probe": f"increase(quell_probe_duration_seconds_total[{pw}])"
            f" / increase(quell_probe_downloads_total[{pw}])",
            "max_request_workers": "quell_server_max_request_workers",
            "keepalive_timeout_s": "quell_server_keepalive_timeout_seconds",
            "php_max_children": "quell_server_php_max_children",
        }
        by: dict[str, dict[str, float]] = {}
        steal_by_host: dict[str, float] = {}
        for key, expr in queries.items():
            samples: list[Sample] = self.prom.query(expr)
            for s in samples:
                if not math.isfinite(s.value):
                    continue
                iid = s.labels.get("instance")
                if iid is None:
                    continue
                by.setdefault(iid, {})[key] = s.value
        for s in self.prom.query(
            f"rate(quell_host_cpu_steal_seconds_total[{w}])"
            f" / rate(quell_host_cpu_seconds_total[{w}])"
        ):
            if math.isfinite(s.value) and "host" in s.labels:
                steal_by_host[s.labels["host"]] = s.value
        stale = self.cfg.prometheus.stale_s
        for iid, vals in list(by.items()):
            age = vals.get("age_s")
            if age is None or age > stale or vals.get("up") != 1.0 or "cpu" not in vals:
                by[iid] = {}  # stale, down or without its CPU time: nothing of it counts
        for m in self.members.values():
            if m.host in steal_by_host and m.server in by and by[m.server]:
                by[m.server]["steal"] = steal_by_host[m.host]
        return by

    def observe(self) -> Snapshot:
        self._require_started("observe")
        self.faults = Faults()
        now = self.clock.now()
        dt = now - self._last_obs
        self._last_obs = now
        assert self._log is not None
        try:
            records = self._log.drain()
        except ComponentError as exc:
            records = []
            self.faults.add("haproxy_log", exc.detail)
        self._logged = records
        by_server: dict[str, list[LoggedRequest]] = {}
        for r in records:
            by_server.setdefault(r.server, []).append(r)
        lb_ok = self._read_lb()
        if not lb_ok:
            self.lb = {}
        try:
            agent = self._agent_metrics(dt)
        except ComponentError as exc:
            agent = {}
            self.faults.add("prometheus", exc.detail)
        self._settle(now)
        out: dict[str, Observation] = {}
        for m in self.serving():
            obs_agent = agent.get(m.server, {})
            if not obs_agent and "prometheus" not in self.faults.parts:
                self.faults.add(f"agent/{m.id}", "no fresh metrics (agent down, stale or NaN)")
            out[m.id] = self._observation(m, now, dt, by_server.get(m.server, []), obs_agent)
        return Snapshot(time_s=now, environment=self.name, instances=out)

    def glance(self) -> Snapshot:
        """Refused: a glance would need the HAProxy log's records peeked rather than drained
        (``LogReader.drain`` hands each record out once) and the agents' series over a window
        of a few seconds, where Prometheus rates need four scrapes (``_window_s``): a scrape
        interval of at most a quarter of the glance's, or the agents' ``/metrics`` read
        directly."""
        self._require_started("glance")
        raise EnvironmentStateError(
            self.name,
            "glance",
            "a live deployment decides at its interval only (the controller refuses a fast path)",
        )

    def take_logged(self) -> list[LoggedRequest]:
        """Every request of HAProxy's log the last ``observe`` read (each once): answered or
        not, by any server or none."""
        out, self._logged = self._logged, []
        return out

    def _observation(
        self,
        m: Member,
        now: float,
        dt: float,
        records: Sequence[LoggedRequest],
        a: dict[str, float],
    ) -> Observation:
        requests, errors, rts = rt_stats(records)

        def get(key: str, scale: float = 1.0) -> float | None:
            v = a.get(key)
            return None if v is None else max(0.0, v * scale)

        tx_rate, rx_rate = get("tx"), get("rx")
        tx = round(tx_rate * dt) if tx_rate is not None else None
        rx = round(rx_rate * dt) if rx_rate is not None else None
        extra: dict[str, float] = {}
        stat = self.lb.get(m.server)
        if stat is not None:
            extra["lb_sessions"] = float(stat.scur)
            extra["lb_queue"] = float(stat.qcur)
            if stat.slim is not None:
                extra[MAXCONN_KEY] = float(stat.slim)
        if (cap := a.get("cap")) is not None:
            extra[CPU_CAP_KEY] = float(cap)
        if (thr := get("throttled", dt)) is not None:
            extra[THROTTLED_KEY] = thr
        if (probe := a.get("probe")) is not None:
            extra[PROBE_KEY] = float(probe)
        extra.update(self._settings_shown(m, a))
        link = self.cfg.host_link_mbit.get(m.host)
        util: float | None
        if link is not None:
            util = tx_rate * 8 / (link * 1e6) * 100.0 if tx_rate is not None else None
        else:
            cpu = get("cpu")
            util = cpu * 100.0 if cpu is not None else None
        psi = {r: get(f"psi_{r}", 100.0) for r in ("cpu", "memory", "io")}
        steal = a.get("steal")
        return Observation(
            time_s=now,
            instance_id=m.id,
            interval_s=dt,
            requests=requests,
            throughput_rps=requests / dt,
            mean_rt_seconds=rts[0],
            p50_rt_seconds=rts[1],
            p95_rt_seconds=rts[2],
            p99_rt_seconds=rts[3],
            errors=errors,
            cpu_util=get("cpu"),
            steal_ratio=None if steal is None else min(1.0, max(0.0, steal)),
            psi_cpu_some_pct=None if psi["cpu"] is None else min(100.0, psi["cpu"]),
            psi_memory_some_pct=None if psi["memory"] is None else min(100.0, psi["memory"]),
            psi_io_some_pct=None if psi["io"] is None else min(100.0, psi["io"]),
            runqueue_wait_seconds=get("rqwait", dt),
            net_rx_bytes=rx,
            net_tx_bytes=tx,
            util_pct=util,
            weight=stat.weight if stat is not None else None,
            extra=extra,
        )

    def _settings_shown(self, m: Member, a: Mapping[str, float]) -> dict[str, float]:
        """The server settings in force under ``SERVER_SETTING_KEYS``: what the agent read back
        after this controller's last reconfiguration, else its gauges; MaxRequestWorkers the
        online cap while there is one."""
        gauges = {k: a[k] for k in SERVER_SETTING_KEYS if k in a}
        if gauges:
            self.agent_settings[m.id] = gauges
        known = self.server_settings.get(m.id) or gauges
        shown = {SERVER_SETTING_KEYS[k]: float(v) for k, v in known.items()}
        if (online := self.online_workers.get(m.id)) is not None:
            shown[SERVER_SETTING_KEYS["max_request_workers"]] = float(online)
        return shown

    def _settle(self, now: float) -> None:
        """Finish drains whose sessions are done (or timed out)."""
        for m in self.members.values():
            if m.state != "draining":
                continue
            stat = self.lb.get(m.server)
            idle = stat is not None and stat.scur == 0 and stat.qcur == 0
            if idle or now >= m.drain_until_s:
                try:
                    self.runtime.set_state(self.backend, m.server, "maint")
                except ComponentError as exc:
                    self.faults.add("haproxy", exc.detail)
                    continue
                self._retire(m)

    def _retire(self, m: Member) -> None:
        m.state = "gone"
        if m.slot:  # the slot is free again, under its own name
            free = self.members.get(m.server)
            if free is not None and free is not m:
                free.state = "free"
            elif free is None:
                self.members[m.server] = Member(m.server, m.server, m.host, True, "free")
        if self.cfg.scaling is not None and self.cfg.scaling.command is not None and not m.slot:
            sc = self.cfg.scaling.command
            try:
                self.command(expand(sc.scale_in, m.id, m.host), sc.timeout_s)
            except ComponentError as exc:
                log.warning("scale-in command for %s failed: %s", m.id, exc)

    # -- acting ----------------------------------------------------------------------------------
    def _member(self, iid: str, action: str) -> Member:
        m = self.members.get(iid)
        if m is None or m.state not in ("serving", "draining"):
            raise InputError(
                "action", [_problem(action, f"instance {iid!r} does not exist (or was removed)")]
            )
        return m

    def apply(self, actions: Sequence[Action]) -> None:
        self._require_started("apply")
        failed: list[tuple[object, str]] = []
        applied: list[object] = []
        for a in actions:
            try:
                self._apply_one(a)
            except (InputError, ComponentError) as exc:
                failed.append((a, str(exc)))
            else:
                applied.append(a)
        if failed:
            raise ActionError(self.name, failed, applied)

    def _apply_one(self, a: Action) -> None:
        rt, be = self.runtime, self.backend
        if isinstance(a, SetWeight):
            rt.set_weight(be, self._member(a.instance_id, "SetWeight").server, a.weight)
        elif isinstance(a, SetMaxConn):
            m = self._member(a.instance_id, "SetMaxConn")
            self._set_maxconn(m, maxconn=a.maxconn, online=self.online_workers.get(m.id))
        elif isinstance(a, SetCpuCap):
            m = self._member(a.instance_id, "SetCpuCap")
            if self.agents is None:
                raise InputError("action", [_problem("SetCpuCap", "no agents configured")])
            self.agents.set_cpu_cap(m.host, m.server, a.cpus)
        elif isinstance(a, AddInstance):
            self._add(a)
        elif isinstance(a, RemoveInstance):
            m = self._member(a.instance_id, "RemoveInstance")
            if a.drain and m.state == "serving":
                rt.set_state(be, m.server, "drain")
                m.state = "draining"
                m.drain_until_s = self.clock.now() + DRAIN_TIMEOUT_S
            elif not a.drain:
                rt.set_state(be, m.server, "maint")
                rt.command(f"shutdown sessions server {be}/{m.server}")
                self._retire(m)
        elif isinstance(a, ReconfigureServer):
            self._reconfigure(self._member(a.instance_id, "ReconfigureServer"), a)

    def _set_maxconn(self, m: Member, maxconn: int | None, online: int | None) -> None:
        """HAProxy's maxconn for ``m``: the lower of a ``SetMaxConn``'s and the online
        MaxRequestWorkers (0, no limit, when neither is set); remembered once HAProxy took it."""
        caps = [c for c in (maxconn, online) if c]
        self.runtime.set_maxconn(self.backend, m.server, min(caps) if caps else 0)
        for table, value in ((self.maxconn, maxconn), (self.online_workers, online)):
            if value is None:
                table.pop(m.id, None)
            else:
                table[m.id] = value

    def _reconfigure(self, m: Member, a: ReconfigureServer) -> None:
        if a.graceful:
            if self.agents is None:
                raise InputError("action", [_problem("ReconfigureServer", "no agents configured")])
            self.server_settings[m.id] = self.agents.reconfigure(m.host, m.server, a.settings)
            if "max_request_workers" in a.settings and m.id in self.online_workers:
                self._set_maxconn(m, maxconn=self.maxconn.get(m.id), online=None)
            return
        known = self.server_settings.get(m.id) or self.agent_settings.get(m.id, {})
        ceiling = known.get("max_request_workers")
        if ceiling is None:
            raise ComponentError(
                "ReconfigureServer", f"{m.id}: the MaxRequestWorkers Apache runs is not known yet"
            )
        online = online_change(a.settings, int(ceiling))
        if online.reload:
            if self.agents is None:
                raise InputError("action", [_problem("ReconfigureServer", "no agents configured")])
            self.server_settings[m.id] = self.agents.reconfigure(m.host, m.server, online.reload)
        if online.workers is not None:
            self._set_maxconn(m, maxconn=self.maxconn.get(m.id), online=online.workers)

    def _add(self, a: AddInstance) -> None:
        if a.instance_id in self.members and self.members[a.instance_id].state != "free":
            raise InputError(
                "action", [_problem("AddInstance", f"instance {a.instance_id!r} already exists")]
            )
        hosts = {m.host for m in self.members.values()}
        if a.host not in hosts:
            raise InputError(
                "action", [_problem("AddInstance", f"host {a.host!r} is not a host of the fleet")]
            )
        cmd: CommandScaler | None = self.cfg.scaling.command if self.cfg.scaling else None
        free = [
            m for m in self.members.values() if m.slot and m.state == "free" and m.host == a.host
        ]
        if free:
            slot = sorted(free, key=lambda m: m.server)[0]
            self.runtime.set_weight(self.backend, slot.server, a.weight)
            self.runtime.set_state(self.backend, slot.server, "ready")
            slot.state = "gone" if slot.id != a.instance_id else "serving"
            self.members[a.instance_id] = Member(a.instance_id, slot.server, a.host, True)
        elif cmd is not None:
            self.command(expand(cmd.scale_out, a.instance_id, a.host), cmd.timeout_s)
            self.members[a.instance_id] = Member(a.instance_id, a.instance_id, a.host, False)
        else:
            raise InputError(
                "action", [_problem("AddInstance", f"no free slot on host {a.host!r}")]
            )


def _problem(location: str, message: str) -> Problem:
    return Problem(location, message)

"""``quell agent``: one per host. Exports the signals quell's collectors read for the instances
it is told about (cgroup CPU time, PSI, throttling and cap, the run-queue wait of every thread,
interface counters; the host's CPU steal) and PRIMA's probe against each local instance, on
``/metrics`` in the Prometheus text format (prometheus_client), labels ``instance`` and
``host``. Counters are read when Prometheus scrapes, so an idle agent costs nothing between
scrapes and every sample is fresh.

State-changing endpoints (``POST /v1/cpu-cap``, ``POST /v1/reconfigure``) are off unless the
config lists them in ``allow`` and names a token file; a request without the token
(``Authorization: Bearer ...``) is refused with 401 and changes nothing. The agent binds
127.0.0.1 unless told otherwise.

An instance with ``apache`` also exports the settings its Apache and php-fpm use
(``quell_server_max_request_workers``, ``quell_server_keepalive_timeout_seconds``,
``quell_server_php_max_children``): read from their configuration files when the agent starts,
then as read back after each reconfiguration."""

from __future__ import annotations

import contextlib
import ctypes
import hmac
import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from quell.actuate.apache import (
    ApacheConfig,
    ApacheLayout,
    ApacheServer,
    Part,
    ServerSettings,
    read_settings,
    with_settings,
)
from quell.actuate.cgroup import set_cpu_cap
from quell.core.metrics import MetricSet, MetricSpec
from quell.core.observation import SERVER_SETTING_KEYS
from quell.errors import ComponentError, InputError, Problem, QuellError
from quell.live.config import AgentConfig, AgentInstance, ApacheSpec, ProbeSpec
from quell.signals.cgroup import (
    CgroupLayout,
    group_dir,
    read_cpu_cap,
    read_cpu_usage_ns,
    read_group_pressure,
    read_throttling,
)
from quell.signals.procfs import read_cpu_times, read_net_dev, read_processes_schedstat

log = logging.getLogger(__name__)

USER_HZ = os.sysconf("SC_CLK_TCK")
CLONE_NEWNET = 0x40000000
MAX_BODY_BYTES = 4096
PSI = ("cpu", "memory", "io")

# -- what /metrics serves ----------------------------------------------------------------------
INSTANCE_LABELS = ("instance", "host")
CPU_USAGE = MetricSpec(
    "quell_cgroup_cpu_usage_seconds",
    "counter",
    "CPU time of the instance's cgroup",
    INSTANCE_LABELS,
    "seconds",
)
PRESSURE = {
    r: MetricSpec(
        f"quell_cgroup_{r}_pressure_some_seconds",
        "counter",
        f"PSI 'some' stall time of the instance's cgroup for {r}",
        INSTANCE_LABELS,
        "seconds",
    )
    for r in PSI
}
THROTTLED = MetricSpec(
    "quell_cgroup_cpu_throttled_seconds",
    "counter",
    "Time throttled by the cgroup's CPU quota",
    INSTANCE_LABELS,
    "seconds",
)
CPU_CAP = MetricSpec(
    "quell_cgroup_cpu_cap_cpus",
    "gauge",
    "CPU quota over period; absent when uncapped",
    INSTANCE_LABELS,
    "cpus",
)
RUNQUEUE_WAIT = MetricSpec(
    "quell_runqueue_wait_seconds",
    "counter",
    "Time the instance's threads waited for a CPU",
    INSTANCE_LABELS,
    "seconds",
)
NET_RX = MetricSpec(
    "quell_net_receive_bytes",
    "counter",
    "Bytes the instance's interface received",
    INSTANCE_LABELS,
    "bytes",
)
NET_TX = MetricSpec(
    "quell_net_transmit_bytes",
    "counter",
    "Bytes the instance's interface sent",
    INSTANCE_LABELS,
    "bytes",
)
UP = MetricSpec(
    "quell_instance_up", "gauge", "1 when the instance's cgroup has processes", INSTANCE_LABELS
)
PROBE_DOWNLOADS = MetricSpec(
    "quell_probe_downloads", "counter", "Probe downloads that came back whole", INSTANCE_LABELS
)
PROBE_FAILURES = MetricSpec(
    "quell_probe_failures", "counter", "Probe downloads that failed", INSTANCE_LABELS
)
PROBE_DURATION = MetricSpec(
    "quell_probe_duration_seconds",
    "counter",
    "Time of the whole probe downloads",
    INSTANCE_LABELS,
    "seconds",
)
SERVER_SETTINGS = {
    "max_request_workers": MetricSpec(
        "quell_server_max_request_workers", "gauge", "MaxRequestWorkers in force", INSTANCE_LABELS
    ),
    "keepalive_timeout_s": MetricSpec(
        "quell_server_keepalive_timeout_seconds",
        "gauge",
        "KeepAliveTimeout in force",
        INSTANCE_LABELS,
        "seconds",
    ),
    "php_max_children": MetricSpec(
        "quell_server_php_max_children",
        "gauge",
        "php-fpm pm.max_children in force",
        INSTANCE_LABELS,
    ),
}
"""An apache instance's settings in force, by ``ServerSettings`` field."""
HOST_STEAL = MetricSpec(
    "quell_host_cpu_steal_seconds",
    "counter",
    "CPU time the hypervisor gave others",
    ("host",),
    "seconds",
)
HOST_CPU = MetricSpec(
    "quell_host_cpu_seconds", "counter", "All CPU time of the host", ("host",), "seconds"
)
METRICS = MetricSet(
    "quell agent",
    "the agent's ``/metrics`` (``listen`` in agent.yaml); the probe's three when an instance has "
    "a ``probe``, the server settings when one has ``apache``",
    False,
    (
        CPU_USAGE,
        *PRESSURE.values(),
        THROTTLED,
        CPU_CAP,
        RUNQUEUE_WAIT,
        NET_RX,
        NET_TX,
        UP,
        PROBE_DOWNLOADS,
        PROBE_FAILURES,
        PROBE_DURATION,
        *SERVER_SETTINGS.values(),
        HOST_STEAL,
        HOST_CPU,
    ),
)
"""Everything the agent serves, in the order it serves it (docs/reference/metrics.md)."""


def family(spec: MetricSpec) -> CounterMetricFamily | GaugeMetricFamily:
    """An empty family for ``spec``, filled at scrape time."""
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


# -- finding an instance's cgroup and processes ------------------------------------------------
def cgroup_of_pid(pid: int, layout: CgroupLayout, proc_root: Path = Path("/proc")) -> str:
    """The group of ``pid`` relative to the cpu hierarchy's root (v2: the ``0::`` line)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError as exc:
        raise ComponentError("agent", f"cannot read /proc/{pid}/cgroup: {exc.strerror}") from exc
    for line in text.splitlines():
        hid, controllers, path = line.split(":", 2)
        if layout.version == "v2" and hid == "0":
            return path.strip("/")
        if layout.version == "v1" and "cpu" in controllers.split(","):
            return path.strip("/")
    raise ComponentError("agent", f"pid {pid}: no cpu cgroup in /proc/{pid}/cgroup")


@dataclass
class Watched:
    """One instance as the agent finds it: its cgroup group (relative path) and its pids."""

    spec: AgentInstance
    layout: CgroupLayout

    def group(self) -> str:
        s = self.spec
        if s.cgroup is not None:
            return s.cgroup.strip("/")
        if s.systemd_unit is not None:
            return f"system.slice/{s.systemd_unit}"
        assert s.pid_file is not None
        return cgroup_of_pid(self._pid_from_file(s.pid_file), self.layout)

    @staticmethod
    def _pid_from_file(path: str) -> int:
        try:
            return int(Path(path).read_text().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            raise ComponentError("agent", f"pid file {path}: {exc}") from exc

    def pids(self, group: str) -> list[int]:
        base = self.layout.cpu or self.layout.root
        try:
            text = (group_dir(base, group) / "cgroup.procs").read_text()
        except OSError:
            return []
        return sorted(int(x) for x in text.split())


# -- the probe ------------------------------------------------------------------------------------
@dataclass
class ProbeStats:
    ok_total: int = 0
    failed_total: int = 0
    seconds_total: float = 0.0
    last_seconds: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, seconds: float, ok: bool) -> None:
        with self.lock:
            if ok:
                self.ok_total += 1
                self.seconds_total += seconds
                self.last_seconds = seconds
            else:
                self.failed_total += 1


def download(url: str, size_bytes: int, timeout_s: float) -> bool:
    """GET ``url``; True when it answered 200 with exactly ``size_bytes`` bytes."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout_s)
    try:
        conn.request("GET", parts.path or "/", headers={"Connection": "close"})
        resp = conn.getresponse()
        n = 0
        while chunk := resp.read(65536):
            n += len(chunk)
            if n > size_bytes:
                return False
        return resp.status == 200 and n == size_bytes
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def enter_netns(path: str) -> None:
    """Move the calling thread into the network namespace ``path`` (for good)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise ComponentError("agent", f"setns {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


class Prober(threading.Thread):
    """Downloads one instance's probe file every ``period_s`` (skipping slots a download
    overran), from its own thread (which enters ``netns`` first, when given)."""

    def __init__(
        self,
        spec: ProbeSpec,
        stats: ProbeStats,
        stop: threading.Event,
        fetch: Callable[[str, int, float], bool] = download,
    ) -> None:
        super().__init__(name=f"quell-probe-{spec.url}", daemon=True)
        self.spec = spec
        self.stats = stats
        self.stop_event = stop
        self.fetch = fetch

    def run(self) -> None:
        if self.spec.netns is not None:
            try:
                enter_netns(self.spec.netns)
            except (OSError, ComponentError) as exc:
                log.error("probe %s: %s; not probing", self.spec.url, exc)
                return
        period = self.spec.period_s
        next_s = time.monotonic()
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            ok = self.fetch(self.spec.url, self.spec.size_bytes, self.spec.timeout_s)
            self.stats.record(time.monotonic() - t0, ok)
            next_s += period
            now = time.monotonic()
            if next_s < now:  # overran: the next slot on the grid
                next_s += period * (int((now - next_s) / period) + 1)
            self.stop_event.wait(next_s - now)


# -- the collector ---------------------------------------------------------------------------
class AgentCollector(Collector):
    """Reads every counter at scrape time and yields the metric families."""

    def __init__(
        self,
        cfg: AgentConfig,
        layout: CgroupLayout,
        probes: dict[str, ProbeStats],
        proc_root: Path = Path("/proc"),
        servers: dict[str, ApacheServer] | None = None,
    ) -> None:
        self.cfg = cfg
        self.layout = layout
        self.watched = [Watched(i, layout) for i in cfg.instances]
        self.probes = probes
        self.proc_root = proc_root
        self.servers = servers if servers is not None else {}
        self.scrape_errors = 0

    def collect(self) -> Iterator[Metric]:
        host = self.cfg.host
        cpu = family(CPU_USAGE)
        psi = {r: family(spec) for r, spec in PRESSURE.items()}
        throttled = family(THROTTLED)
        cap = family(CPU_CAP)
        rqwait = family(RUNQUEUE_WAIT)
        rx = family(NET_RX)
        tx = family(NET_TX)
        up = family(UP)
        probe_ok = family(PROBE_DOWNLOADS)
        probe_fail = family(PROBE_FAILURES)
        probe_s = family(PROBE_DURATION)
        for w in self.watched:
            iid = w.spec.id
            lv = [iid, host]
            try:
                group = w.group()
            except ComponentError:
                up.add_metric(lv, 0.0)
                self.scrape_errors += 1
                continue
            pids = w.pids(group)
            up.add_metric(lv, 1.0 if pids else 0.0)
            with contextlib.suppress(OSError, ComponentError, InputError):
                cpu.add_metric(lv, read_cpu_usage_ns(self.layout, group) / 1e9)
            for r in PSI:
                with contextlib.suppress(OSError, ComponentError, InputError, ValueError):
                    p = read_group_pressure(self.layout, group, r)  # type: ignore[arg-type]
                    if p is not None:
                        psi[r].add_metric(lv, p.some_total_us / 1e6)
            with contextlib.suppress(OSError, ComponentError, InputError):
                throttled.add_metric(lv, read_throttling(self.layout, group).throttled_ns / 1e9)
            with contextlib.suppress(OSError, ComponentError, InputError):
                c = read_cpu_cap(self.layout, group)
                if c is not None:
                    cap.add_metric(lv, c)
            if pids:
                with contextlib.suppress(OSError, ComponentError):
                    sched = read_processes_schedstat(pids, self.proc_root)
                    rqwait.add_metric(lv, sched.wait_ns / 1e9)
                with contextlib.suppress(OSError, ComponentError):
                    dev = read_net_dev(pids[0], self.proc_root).get(w.spec.interface)
                    if dev is not None:
                        rx.add_metric(lv, float(dev.rx_bytes))
                        tx.add_metric(lv, float(dev.tx_bytes))
            stats = self.probes.get(iid)
            if stats is not None:
                with stats.lock:
                    probe_ok.add_metric(lv, float(stats.ok_total))
                    probe_fail.add_metric(lv, float(stats.failed_total))
                    probe_s.add_metric(lv, stats.seconds_total)
        yield from (cpu, *psi.values(), throttled, cap, rqwait, rx, tx, up)
        if self.probes:
            yield from (probe_ok, probe_fail, probe_s)
        if self.servers:
            yield from self._server_settings(host)
        steal = family(HOST_STEAL)
        total = family(HOST_CPU)
        with contextlib.suppress(OSError, ComponentError, ValueError):
            t = read_cpu_times(self.proc_root)
            steal.add_metric([host], t.steal / USER_HZ)
            total.add_metric([host], t.total / USER_HZ)
        yield steal
        yield total

    def _server_settings(self, host: str) -> Iterator[Metric]:
        families = {k: family(spec) for k, spec in SERVER_SETTINGS.items()}
        for iid, server in self.servers.items():
            f = server.in_force
            if f is None:
                continue
            for k, fam in families.items():
                fam.add_metric([iid, host], float(getattr(f, k)))
        yield from families.values()


def apache_server(spec: ApacheSpec, source: str) -> ApacheServer:
    """The actuator over an instance's own Apache + php-fpm files, with the settings they
    hold as the ones in force; ``InputError`` when a file cannot be read or does not hold each
    setting on one line."""
    texts = []
    for path in (spec.httpd_conf, spec.php_fpm_conf):
        try:
            texts.append(Path(path).read_text())
        except OSError as exc:
            raise InputError(source, [Problem(path, f"cannot read: {exc.strerror}")]) from None
    config = ApacheConfig(*texts)
    in_force = read_settings(config, source)
    layout = ApacheLayout(
        Path(spec.httpd_conf),
        Path(spec.php_fpm_conf),
        Path(spec.httpd_pid_file),
        Path(spec.php_fpm_pid_file),
        Path(spec.error_log),
        spec.apache_binary,
        spec.php_fpm_binary,
    )

    def no_status(path: str) -> str:
        raise ComponentError("agent", "reads no server-status")

    def no_restart(part: Part) -> None:
        raise ComponentError(
            part, "is not running; the agent does not start servers (start it as it is run)"
        )

    server = ApacheServer(
        layout, config, no_status, no_restart, settle_timeout_s=spec.settle_timeout_s
    )
    server.in_force = in_force
    return server


# -- the HTTP side -----------------------------------------------------------------------------
class RefusedError(QuellError):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class Agent:
    """The agent's state: registry, probes, the token, what it may change."""

    def __init__(self, cfg: AgentConfig, layout: CgroupLayout) -> None:
        self.cfg = cfg
        self.layout = layout
        self.token = read_token(cfg.token_file) if cfg.token_file is not None else None
        self.stop_event = threading.Event()
        self.probes = {i.id: ProbeStats() for i in cfg.instances if i.probe is not None}
        self.servers = {
            i.id: apache_server(i.apache, f"instance {i.id}")
            for i in cfg.instances
            if i.apache is not None
        }
        self.server_locks = {iid: threading.Lock() for iid in self.servers}
        self.collector = AgentCollector(cfg, layout, self.probes, servers=self.servers)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.threads: list[Prober] = []
        self.server: ThreadingHTTPServer | None = None

    def metrics(self) -> bytes:
        return generate_latest(self.registry)

    def authorize(self, permission: str, header: str | None) -> None:
        if permission not in self.cfg.allow or self.token is None:
            raise RefusedError(404, f"{permission} is not enabled on this agent")
        given = (header or "").removeprefix("Bearer ").strip()
        if not header or not header.startswith("Bearer ") or not given:
            raise RefusedError(401, "a bearer token is required")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise RefusedError(401, "wrong token")

    def set_cpu_cap(self, body: dict[str, Any]) -> None:
        iid, cpus = body.get("instance"), body.get("cpus")
        w = next((x for x in self.collector.watched if x.spec.id == iid), None)
        if w is None:
            raise RefusedError(404, f"no instance {iid!r} on this agent")
        if cpus is not None and (not isinstance(cpus, int | float) or isinstance(cpus, bool)):
            raise RefusedError(400, "cpus must be a number or null")
        try:
            set_cpu_cap(self.layout, w.group(), None if cpus is None else float(cpus))
        except InputError as exc:
            raise RefusedError(400, str(exc)) from None
        except ComponentError as exc:
            raise RefusedError(500, str(exc)) from None

    def reconfigure(self, body: dict[str, Any]) -> dict[str, float]:
        """Apply ``body["settings"]`` (any of ``SERVER_SETTING_KEYS``) to the instance's Apache
        and php-fpm; returns the settings read back."""
        iid, changes = body.get("instance"), body.get("settings")
        server = self.servers.get(iid) if isinstance(iid, str) else None
        if server is None or not isinstance(iid, str):
            raise RefusedError(404, f"no instance {iid!r} with an apache section on this agent")
        if not isinstance(changes, dict) or not changes:
            raise RefusedError(400, "settings must be a non-empty JSON object")
        bad = [
            f"{k}={v!r}"
            for k, v in changes.items()
            if k not in SERVER_SETTING_KEYS
            or not isinstance(v, int | float)
            or isinstance(v, bool)
            or v <= 0
            or (k != "keepalive_timeout_s" and not float(v).is_integer())
        ]
        if bad:
            known = ", ".join(SERVER_SETTING_KEYS)
            raise RefusedError(400, f"not settings this agent can set ({known}): {bad}")
        with self.server_locks[iid]:
            now = server.in_force
            assert now is not None
            want = ServerSettings(
                int(changes.get("max_request_workers", now.max_request_workers)),
                float(changes.get("keepalive_timeout_s", now.keepalive_timeout_s)),
                int(changes.get("php_max_children", now.php_max_children)),
            )
            try:
                got = server.reconfigure(with_settings(server.last_good, want), want)
            except ComponentError as exc:
                raise RefusedError(500, str(exc)) from None
        return {k: float(getattr(got, k)) for k in SERVER_SETTING_KEYS}

    def start(self) -> None:
        for inst in self.cfg.instances:
            if inst.probe is not None:
                t = Prober(inst.probe, self.probes[inst.id], self.stop_event)
                self.threads.append(t)
                t.start()
        handler = _handler(self)
        self.server = ThreadingHTTPServer((self.cfg.listen.addr, self.cfg.listen.port), handler)
        self.server.daemon_threads = True

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def serve_forever(self) -> None:
        assert self.server is not None
        self.server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        self.stop_event.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for t in self.threads:
            t.join(timeout=5)


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise InputError(path, [Problem("token_file", f"cannot read: {exc.strerror}")]) from None
    if len(token) < 16:
        raise InputError(path, [Problem("token_file", "the token must be 16 characters or more")])
    return token


def _handler(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "quell-agent"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.client_address[0], *args)

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self._send(200, agent.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            routes: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
                "/v1/cpu-cap": ("cpu_cap", agent.set_cpu_cap),
                "/v1/reconfigure": ("reconfigure", agent.reconfigure),
            }
            try:
                if self.path not in routes:
                    raise RefusedError(404, "not found")
                permission, act = routes[self.path]
                agent.authorize(permission, self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY_BYTES:
                    raise RefusedError(400, "a JSON body of at most 4096 bytes is required")
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    raise RefusedError(400, "the body is not JSON") from None
                if not isinstance(body, dict):
                    raise RefusedError(400, "the body is not a JSON object")
                answer = act(body)
            except RefusedError as exc:
                self._send(exc.status, json.dumps({"error": str(exc)}).encode())
                return
            reply: dict[str, Any] = {"ok": True}
            if answer is not None:
                reply["in_force"] = answer
            self._send(200, json.dumps(reply).encode())

    return Handler

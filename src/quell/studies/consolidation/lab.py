"""The consolidation study in the lab (Kanemasa et al.): two n-tier systems, Sys_Const and
Sys_Inc, whose PostgreSQL tiers share one core, each capped by its own CFS quota.

Placement (2 CPUs): both clusters in their own cgroup v1 groups (``cpu``, ``cpuacct``,
``cpuset``), pinned to CPU 1, each with a CFS quota of ``cap_pct`` of a 100 ms period (equal
shares); the front tiers (per system nginx and a php-fpm pool, one HAProxy for both) in one
group and the load generators in another, both pinned to CPU 0. Every group is named with the
run tag, every process started under it, and the clusters' data lives on a tmpfs under the
run's work directory, so ``quell lab clean`` removes all of it if the runner is killed.

``ConsolidationLab`` brings both systems up once and is reused across the points of a sweep
(``with ConsolidationLab() as lab: lab.measure(point, run_dir)``): the clusters and their data
stay, the front tiers restart only when a point's software resources or cross-tier priority
differ from the last point's. ``measure_point`` measures one point on a lab of its own.

A point: each system's closed-loop users (the lab's load generator, keep-alive connections to
HAProxy) ramp up over ``ramp_seconds`` and then run ``measure_seconds``, the window measured:
requests sent in the window and answered, their response times by class, each database tier's
CPU (``cpuacct.usage``, every 0.1 s and over the window), its throttled periods (``cpu.stat``
``nr_throttled``), the machine's steal, CPU 0's utilisation (front tiers and generators must
stay below saturation) and what else ran on CPU 1 (anything but the two tiers spoils the
point). With ``dispersion_index`` > 1, Sys_Inc's users think on a clock modulated by an MMPP2
(``quell.workload.population.ThinkModulation``); Sys_Const's load is never bursty."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import numpy as np

from quell.actuate.cgroup import set_cpu_cap, set_cpu_shares
from quell.errors import ComponentError, PrerequisiteError
from quell.lab.cgroups import Group, create_group, remove_group
from quell.lab.cleanup import runner_record
from quell.lab.process import (
    Managed,
    Placement,
    Supervisor,
    run_checked,
    terminate_on_signals,
)
from quell.lab.request_log import parse_user_line
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.lab.users import write_population
from quell.signals.cgroup import CgroupLayout, detect_layout, read_cpu_usage_ns, read_throttling
from quell.signals.procfs import CpuTimes, read_cpu_times
from quell.studies.consolidation.ntier import (
    CLASSES,
    RESOURCES,
    FrontPaths,
    HAProxyFront,
    haproxy_argv,
    haproxy_config,
    nginx_argv,
    php_fpm_argv,
    write_front,
)
from quell.studies.consolidation.point import (
    SYSTEMS,
    ConsolidationMeasurement,
    ConsolidationPoint,
    SystemMeasurement,
)
from quell.studies.consolidation.postgres import (
    PG_BIN,
    PG_USER,
    PgCluster,
    StatementStats,
    init_cluster,
    load_data,
    remove_segments,
    reset_statements,
    start_cluster,
    statement_stats,
    stop_cluster,
)
from quell.workload.population import Population, ThinkModulation

DB_CPU = 1
"""The shared core of the two database tiers."""
FRONT_CPU = 0
"""The core of the front tiers and the load generators."""
PERIOD_US = 100_000
"""The CFS period of both database groups (the seed's caps are a share of the core)."""
DB_SHARES = 10 * 1024
"""Both database groups' ``cpu.shares``: equal, as the seed's VMs (normal shares), and ten
times a root-group task's, so that while the tiers want CPU 1 the machine's other processes
(this lab shares its machine) get little of it; they still run whenever the tiers are idle or
throttled."""
IDLE_SHARES = 2
"""A competitor's ``cpu.shares`` at the lowest weight: it gets the core only when both tiers
leave it (CFS still gives it a sliver while they run; at 2 against 10240, about 0.02 %)."""
PG_DIR = "pg"
"""The clusters' tmpfs, under the run's work directory."""
PG_PORTS = {"const": 15433, "inc": 15434}
WEB_PORTS = {"const": 18081, "inc": 18082}
LB_PORTS = {"const": 18091, "inc": 18092}
SAMPLE_S = 0.1
REQUEST_TIMEOUT_S = 60.0
TMPFS_SIZE = "3g"
FULL_COMMENTS_TOTAL = 1_000_000
IDLE_CPU1_PCT = 3.0
"""CPU 1 counts as idle below this (everything on it, over a second)."""
IDLE_WAIT_S = 5.0
BINARIES = ("setpriv", "psql", "nginx", "php-fpm8.2", "haproxy", "mount", "umount")

Status = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass
class _Front:
    """What runs on CPU 0 for the current settings."""

    resources: tuple[str, ...]
    """Each system's software resources, in ``SYSTEMS`` order."""
    ctp: bool
    procs: list[Managed] = field(default_factory=list)


class ConsolidationLab:
    """Both n-tier systems on this machine, up between ``__enter__`` and ``__exit__`` (torn
    down on exit, on error, on Ctrl-C and on SIGTERM or SIGHUP in the main thread). Reusable
    across the points of a sweep: ``measure`` sets each point's caps, resources and priority.

    ``comments_total`` scales the data (1 000 000 comments: 335 MB per cluster; the heavy
    transaction scans the 100 000 story titles whatever the scale)."""

    def __init__(
        self,
        *,
        comments_total: int = FULL_COMMENTS_TOTAL,
        runtime_root: Path = RUNTIME_ROOT,
        layout: CgroupLayout | None = None,
        status: Status | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.comments_total = comments_total
        self.tag = RunTag.new()
        self.work = self.tag.runtime_dir(runtime_root)
        self.layout = layout
        self.status = status or _quiet
        self.supervisor = Supervisor(self.tag, log_dir or self.work / "logs")
        self.groups: dict[str, Group] = {}
        self.clusters: dict[str, PgCluster] = {}
        self.pg_procs: dict[str, Managed] = {}
        self.front: _Front | None = None
        self.tmpfs: Path | None = None
        self._signals = contextlib.ExitStack()

    # -- bring-up and teardown ---------------------------------------------------------------
    def __enter__(self) -> ConsolidationLab:
        self._signals.enter_context(terminate_on_signals())
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        preflight()
        layout = self.layout = self.layout or detect_layout()
        if layout.version != "v1" or layout.cpuset is None or layout.cpuacct is None:
            raise PrerequisiteError(
                "the consolidation lab needs cgroup v1 cpu, cpuacct and cpuset",
                f"found {layout.version} under {layout.root}",
            )
        self.work.mkdir(parents=True, exist_ok=True)
        self.work.chmod(0o755)
        (self.work / "state.json").write_text(
            json.dumps({"tag": self.tag.value, **runner_record(), "kind": "consolidation"})
        )
        self.status("database memory (tmpfs)")
        pg_root = self.work / PG_DIR
        pg_root.mkdir()
        run_checked(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tmpfs", str(pg_root)],
            "tmpfs",
        )
        self.tmpfs = pg_root
        (pg_root / "run").mkdir()
        shutil.chown(pg_root, PG_USER, PG_USER)
        shutil.chown(pg_root / "run", PG_USER, PG_USER)
        for system in SYSTEMS:
            self.groups[system] = create_group(layout, self.tag.name(f"pg-{system}"), [DB_CPU])
            set_cpu_cap(layout, self.groups[system].name, None, PERIOD_US)
            set_cpu_shares(layout, self.groups[system].name, DB_SHARES)
        self.groups["front"] = create_group(layout, self.tag.name("front"), [FRONT_CPU])
        self.groups["client"] = create_group(layout, self.tag.name("client"), [FRONT_CPU])
        db_conns = max(r.db_max_connections for r in RESOURCES.values())
        for system in SYSTEMS:
            self.status(f"PostgreSQL {system}: initdb")
            cluster = PgCluster(system, pg_root / system, pg_root / "run", PG_PORTS[system])
            init_cluster(cluster, db_conns)
            self.clusters[system] = cluster
            placement = Placement(cgroup_procs=self.groups[system].procs_files)
            self.pg_procs[system] = start_cluster(self.supervisor, cluster, placement)
        self.status("PostgreSQL: loading the data")
        with ThreadPoolExecutor(len(SYSTEMS)) as pool:
            loads = [pool.submit(load_data, c, self.comments_total) for c in self.clusters.values()]
            for f in loads:
                f.result()

    def close(self) -> None:
        """Stop everything, newest first; remove the groups, the tmpfs and the work files.
        Every step runs even if one before it failed; the first failure is raised at the end."""
        errors: list[str] = []

        def step(what: str, fn: Callable[[], None]) -> None:
            try:
                fn()
            except Exception as exc:  # teardown goes on whatever fails
                errors.append(f"{what}: {exc}")

        if self.front is not None:
            for proc in reversed(self.front.procs):
                step(proc.name, functools.partial(self.supervisor.stop, proc))
            self.front = None
        for proc in self.pg_procs.values():
            step(proc.name, functools.partial(stop_cluster, self.supervisor, proc))
        self.pg_procs.clear()
        step("processes", self.supervisor.stop_all)
        for group in self.groups.values():
            step(f"cgroup {group.name}", functools.partial(remove_group, group))
        self.groups.clear()
        if self.tmpfs is not None:
            tmpfs = self.tmpfs
            step("tmpfs", lambda: _umount(tmpfs))
            self.tmpfs = None
        if self.work.exists():
            shutil.rmtree(self.work, ignore_errors=True)
        self._signals.close()
        if errors:
            raise ComponentError("consolidation lab teardown", "; ".join(errors))

    # -- the front tiers ---------------------------------------------------------------------
    def front_paths(self, system: str) -> FrontPaths:
        c = self.clusters[system]
        return FrontPaths(
            self.work / f"front-{system}", system, WEB_PORTS[system], c.socket_dir, c.port
        )

    def ensure_front(self, resources: str | dict[str, str], ctp: bool) -> None:
        """The front tiers as ``resources`` (one name for both systems, or one per system) and
        ``ctp`` want them (restarted if they differ)."""
        per = (
            tuple(resources[s] for s in SYSTEMS)
            if isinstance(resources, dict)
            else (resources,) * len(SYSTEMS)
        )
        if self.front is not None and (self.front.resources, self.front.ctp) == (per, ctp):
            self.check_alive()
            return
        if self.front is not None:
            for proc in reversed(self.front.procs):
                self.supervisor.stop(proc)
            self.front = None
        self.status(f"front tiers ({'/'.join(per)}, CTP {'on' if ctp else 'off'})")
        front = _Front(per, ctp)
        self.front = front
        placement = Placement(cgroup_procs=self.groups["front"].procs_files)
        fronts = []
        for system, name in zip(SYSTEMS, per, strict=True):
            res = RESOURCES[name]
            paths = self.front_paths(system)
            write_front(paths, res)
            front.procs.append(
                self.supervisor.start(f"php-fpm-{system}", php_fpm_argv(paths), placement)
            )
            front.procs.append(
                self.supervisor.start(f"nginx-{system}", nginx_argv(paths), placement)
            )
            fronts.append(
                HAProxyFront(system, LB_PORTS[system], WEB_PORTS[system], res.php_children)
            )
        cfg = self.work / "haproxy.cfg"
        cfg.write_text(haproxy_config(fronts, ctp, self.work / "haproxy.sock"))
        front.procs.append(self.supervisor.start("haproxy", haproxy_argv(cfg), placement))
        for port in (*WEB_PORTS.values(), *LB_PORTS.values()):
            _wait_listening(port, front.procs)
        for system, name in zip(SYSTEMS, per, strict=True):  # warm every child's connection
            for cls in CLASSES:
                for _ in range(RESOURCES[name].php_children):
                    _get(LB_PORTS[system], f"/{cls}")

    def check_alive(self) -> None:
        procs = [*self.pg_procs.values(), *(self.front.procs if self.front else [])]
        for proc in procs:
            if not proc.alive():
                raise ComponentError(proc.name, f"exited: {proc.log_tail()}")

    # -- one point ---------------------------------------------------------------------------
    def set_caps(self, point: ConsolidationPoint) -> dict[str, int]:
        """Each database group's quota (µs per ``PERIOD_US``; -1 at 100 %: no cap), as read
        back from ``cpu.cfs_quota_us``."""
        layout = self._layout()
        quotas = {}
        for system in SYSTEMS:
            cap = getattr(point, system).cap_pct
            group = self.groups[system].name
            set_cpu_cap(layout, group, None if cap >= 100.0 else cap / 100.0, PERIOD_US)
            assert layout.cpu is not None
            quotas[system] = int((layout.cpu / group / "cpu.cfs_quota_us").read_text())
        return quotas

    def _layout(self) -> CgroupLayout:
        if self.layout is None:
            raise ComponentError("consolidation lab", "not started")
        return self.layout

    def measure(
        self, point: ConsolidationPoint, run_dir: Path, progress: Status | None = None
    ) -> ConsolidationMeasurement:
        """Measure ``point``; writes ``measurement.json`` (and ``lab.json``: what else the lab
        saw) into ``run_dir`` as soon as it is measured."""
        say = progress or self.status
        self._layout()  # refuses a lab that is not up
        run_dir.mkdir(parents=True, exist_ok=True)
        self.ensure_front(point_resources(point), point.ctp)
        quotas = self.set_caps(point)
        say("waiting for CPU 1 to be idle")
        idle_pct = _wait_idle(DB_CPU)
        for c in self.clusters.values():
            reset_statements(c)
        duration_s = point.ramp_seconds + point.measure_seconds
        start_at = time.monotonic() + 1.0
        gens: dict[str, Managed] = {}
        logs: dict[str, Path] = {}
        if point.competitor_cpu_pct > 0:
            gens["competitor"] = self._start_competitor(point, duration_s)
        for system in SYSTEMS:
            users = getattr(point, system).users
            if users == 0:
                continue
            pop = self._population(point, system)
            pop_file = run_dir / f"users-{system}.json"
            write_population(pop_file, pop)
            logs[system] = run_dir / f"requests-{system}.csv"
            logs[system].write_text("")
            gens[system] = self.supervisor.start(
                f"loadgen-{system}",
                [
                    sys.executable,
                    "-m",
                    "quell.lab.loadgen",
                    "--users",
                    str(pop_file),
                    "--out",
                    str(logs[system]),
                    "--port",
                    str(LB_PORTS[system]),
                    "--start-at",
                    repr(start_at),
                    "--duration",
                    repr(duration_s),
                    "--timeout",
                    repr(REQUEST_TIMEOUT_S),
                ],
                Placement(cgroup_procs=self.groups["client"].procs_files),
                env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            )
        try:
            window = self._sample_window(point, start_at, say)
            say("waiting for the users to stop")
            hard_stop = start_at + duration_s + REQUEST_TIMEOUT_S + 5.0
            for name, proc in gens.items():
                while name != "competitor" and proc.alive() and time.monotonic() < hard_stop:
                    self.check_alive()
                    time.sleep(0.1)
        finally:
            for proc in gens.values():
                self.supervisor.stop(proc)
        self.check_alive()
        stats = {s: statement_stats(c) for s, c in self.clusters.items()}
        systems = {}
        for system in SYSTEMS:
            reqs = _read_requests(logs.get(system))
            systems[system] = _system_measurement(
                reqs, window, system, point.ramp_seconds, point.measure_seconds
            )
        lab = {
            "run_tag": self.tag.value,
            "quota_us": quotas,
            "period_us": PERIOD_US,
            "cpu1_idle_before_pct": round(idle_pct, 2),
            "cpu0_util_pct": round(window.cpu0_util_pct, 2),
            "cpu1_util_pct": round(window.cpu1_util_pct, 2),
            "cpu1_other_pct": round(window.cpu1_other_pct, 2),
            "front_cpu_pct": round(window.group_pct["front"], 2),
            "client_cpu_pct": round(window.group_pct["client"], 2),
            "competitor_cpu_pct": round(window.group_pct.get("competitor", 0.0), 2),
            "errors": {
                s: _errors(_read_requests(logs.get(s)), point.ramp_seconds, point.measure_seconds)
                for s in SYSTEMS
            },
            "statements": {
                s: [
                    {
                        "class": _statement_class(st),
                        "calls_total": st.calls_total,
                        "mean_exec_seconds": st.mean_exec_seconds,
                        "stddev_exec_seconds": st.stddev_exec_seconds,
                    }
                    for st in stats[s]
                    if _statement_class(st) is not None
                ]
                for s in SYSTEMS
            },
            "request_dispersion_index_1s": {
                s: _dispersion(
                    _read_requests(logs.get(s)), point.ramp_seconds, point.measure_seconds
                )
                for s in SYSTEMS
            },
        }
        (run_dir / "lab.json").write_text(json.dumps(lab, indent=2))
        notes = [
            f"CPU 0 (front tiers and generators) {window.cpu0_util_pct:.1f} % busy",
            f"CPU 1 used by other than the two tiers {window.cpu1_other_pct:.1f} %",
        ]
        if point.competitor_cpu_pct > 0:
            notes.append(
                f"the competitor on CPU 1 used {window.group_pct.get('competitor', 0.0):.1f} %"
                f" (asked {point.competitor_cpu_pct:g} %)"
            )
        measurement = ConsolidationMeasurement(
            env="lab", point=point, systems=systems, steal_pct=window.steal_pct, notes=notes
        )
        (run_dir / "measurement.json").write_text(json.dumps(measurement.to_json(), indent=2))
        return measurement

    def _start_competitor(self, point: ConsolidationPoint, duration_s: float) -> Managed:
        """One stress-ng CPU worker on the shared core, busy ``competitor_cpu_pct`` of the time,
        in its own group with the tiers' shares (or the lowest, ``competitor_idle``) and no cap;
        it stops by itself after the run."""
        layout = self._layout()
        if "competitor" not in self.groups:
            self.groups["competitor"] = create_group(layout, self.tag.name("competitor"), [DB_CPU])
        shares = IDLE_SHARES if point.competitor_idle else DB_SHARES
        set_cpu_shares(layout, self.groups["competitor"].name, shares)
        argv = ["stress-ng", "--cpu", "1", "--cpu-method", "int64"]
        if point.competitor_cpu_pct < 100:
            argv += ["--cpu-load", f"{point.competitor_cpu_pct:g}"]
        argv += ["--timeout", f"{math.ceil(duration_s + 5.0)}s", "--quiet"]
        return self.supervisor.start(
            "competitor", argv, Placement(cgroup_procs=self.groups["competitor"].procs_files)
        )

    def _population(self, point: ConsolidationPoint, system: str) -> Population:
        users = getattr(point, system).users
        modulation = None
        if system == "inc" and point.dispersion_index > 1.0:
            rate_rps = users / point.think_time_seconds
            modulation = ThinkModulation.mmpp2(
                point.dispersion_index,
                rate_rps,
                point.ramp_seconds + point.measure_seconds,
                seed=point.seed,
            )
        return Population(
            users=users,
            think_time_s=point.think_time_seconds,
            ramp_s=point.ramp_seconds,
            keepalive=True,
            paths=("/light", "/heavy"),
            weights=(1.0 - point.heavy_share, point.heavy_share),
            duration_s=point.ramp_seconds + point.measure_seconds,
            max_requests=int(users * (point.ramp_seconds + point.measure_seconds) * 50 + 1000),
            seed=point.seed * 2 + SYSTEMS.index(system),
            think_modulation=modulation,
        )

    def _sample_window(self, point: ConsolidationPoint, start_at: float, say: Status) -> _Window:
        """Counters at the window's edges, and each database group's CPU every 0.1 s in it."""
        layout = self._layout()
        names = {k: g.name for k, g in self.groups.items()}
        t0 = start_at + point.ramp_seconds
        t1 = t0 + point.measure_seconds
        say(f"ramp-up ({point.ramp_seconds:g} s)")
        _sleep_until(t0)
        say(f"measuring ({point.measure_seconds:g} s)")
        others: dict[str, str] = {
            k: names[k] for k in ("front", "client", "competitor") if k in names
        }
        return _sample_usage(layout, [names[s] for s in SYSTEMS], others, t0, t1, self.check_alive)


@dataclass
class _Window:
    """What the lab's counters said about the measurement window."""

    seconds: float
    db_cpu_pct: dict[str, float]
    throttled: dict[str, int]
    series_pct: dict[str, list[float]]
    group_pct: dict[str, float]
    steal_pct: float
    cpu0_util_pct: float
    cpu1_util_pct: float
    cpu1_other_pct: float


def _busy(a: CpuTimes, b: CpuTimes) -> float:
    total = b.total - a.total
    idle = (b.idle - a.idle) + (b.iowait - a.iowait)
    return 100.0 * (total - idle) / total if total > 0 else 0.0


def _sample_usage(
    layout: CgroupLayout,
    db_groups: list[str],
    others: dict[str, str],
    t0: float,
    t1: float,
    check: Callable[[], None],
) -> _Window:
    """Sample the database groups' ``cpuacct.usage`` every 0.1 s from ``t0`` to ``t1`` (a
    thread on CPU 0), with the other counters (``others``: the front and client groups, and
    the competitor's when it runs, by name) at both ends."""
    stamps: list[float] = []
    usage: list[list[int]] = []

    def snap_all() -> tuple[list[int], list[int], dict[int, CpuTimes], CpuTimes]:
        groups = [read_cpu_usage_ns(layout, g) for g in db_groups]
        other = [read_cpu_usage_ns(layout, g) for g in others.values()]
        per_cpu = {c: read_cpu_times(cpu=c) for c in (FRONT_CPU, DB_CPU)}
        return groups, other, per_cpu, read_cpu_times()

    def sampler() -> None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {FRONT_CPU})  # this thread only
        k = 0
        while True:
            t = t0 + k * SAMPLE_S
            if t > t1 + 1e-9:
                return
            _sleep_until(t)
            stamps.append(time.monotonic())
            usage.append([read_cpu_usage_ns(layout, g) for g in db_groups])
            k += 1

    throttled0 = [read_throttling(layout, g).nr_throttled for g in db_groups]
    g0, o0, c0, all0 = snap_all()
    thread = threading.Thread(target=sampler, name="consolidation-sampler", daemon=True)
    thread.start()
    while thread.is_alive():
        check()
        thread.join(0.5)
    g1, o1, c1, all1 = snap_all()
    throttled1 = [read_throttling(layout, g).nr_throttled for g in db_groups]
    seconds = t1 - t0
    ts = np.asarray(stamps)
    us = np.asarray(usage, dtype=np.float64)
    dt = np.diff(ts)
    series = {}
    for i, system in enumerate(SYSTEMS):
        pct = 100.0 * np.diff(us[:, i]) / 1e9 / dt if len(ts) > 1 else np.array([])
        series[system] = [round(float(x), 2) for x in pct]
    db_pct = {s: 100.0 * (g1[i] - g0[i]) / 1e9 / seconds for i, s in enumerate(SYSTEMS)}
    ticks = all1.total - all0.total
    steal = 100.0 * (all1.steal - all0.steal) / ticks if ticks > 0 else 0.0
    cpu1 = _busy(c0[DB_CPU], c1[DB_CPU])
    group_pct = {k: 100.0 * (o1[i] - o0[i]) / 1e9 / seconds for i, k in enumerate(others)}
    return _Window(
        seconds=seconds,
        db_cpu_pct=db_pct,
        throttled={s: throttled1[i] - throttled0[i] for i, s in enumerate(SYSTEMS)},
        series_pct=series,
        group_pct=group_pct,
        steal_pct=steal,
        cpu0_util_pct=_busy(c0[FRONT_CPU], c1[FRONT_CPU]),
        cpu1_util_pct=cpu1,
        cpu1_other_pct=max(0.0, cpu1 - sum(db_pct.values()) - group_pct.get("competitor", 0.0)),
    )


@dataclass(frozen=True)
class _Request:
    send_s: float
    latency_s: float | None
    cls: str
    ok: bool


def _read_requests(path: Path | None) -> list[_Request]:
    if path is None or not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        rec = parse_user_line(line)
        if rec is None:
            continue
        r = rec.record
        ok = r.error == "" and r.status == 200 and r.latency_s is not None
        out.append(_Request(r.send_s, r.latency_s, r.server, ok))
    return out


def _in_window(reqs: list[_Request], ramp_s: float, measure_s: float) -> list[_Request]:
    return [r for r in reqs if ramp_s <= r.send_s < ramp_s + measure_s]


def _errors(reqs: list[_Request], ramp_s: float, measure_s: float) -> int:
    return sum(1 for r in _in_window(reqs, ramp_s, measure_s) if not r.ok)


def _dispersion(reqs: list[_Request], ramp_s: float, measure_s: float) -> float | None:
    """Index of dispersion of the requests sent in the window, counted in 1 s bins."""
    sends = np.asarray([r.send_s - ramp_s for r in _in_window(reqs, ramp_s, measure_s)])
    bins = int(measure_s)
    if sends.size == 0 or bins < 2:
        return None
    counts = np.bincount(sends.astype(np.int64), minlength=bins)[:bins]
    mean = counts.mean()
    return round(float(counts.var() / mean), 3) if mean > 0 else None


def _system_measurement(
    reqs: list[_Request], window: _Window, system: str, ramp_s: float, measure_s: float
) -> SystemMeasurement:
    done = [r for r in _in_window(reqs, ramp_s, measure_s) if r.ok]
    lat = np.asarray([r.latency_s for r in done], dtype=np.float64)

    def class_mean(cls: str) -> float | None:
        xs = [r.latency_s for r in done if r.cls == cls and r.latency_s is not None]
        return float(np.mean(xs)) if xs else None

    return SystemMeasurement(
        requests_total=len(done),
        throughput_per_second=len(done) / measure_s,
        mean_rt_seconds=float(lat.mean()) if lat.size else math.nan,
        p95_rt_seconds=float(np.percentile(lat, 95)) if lat.size else math.nan,
        light_mean_rt_seconds=class_mean("light"),
        heavy_mean_rt_seconds=class_mean("heavy"),
        db_cpu_pct=window.db_cpu_pct[system],
        throttled_periods_total=window.throttled[system],
        cpu_pct_100ms=window.series_pct[system],
    )


def _statement_class(st: StatementStats) -> str | None:
    if "ILIKE" in st.query:
        return "heavy"
    if "BETWEEN" in st.query:
        return "light"
    return None


def point_resources(point: ConsolidationPoint) -> dict[str, str]:
    """Each system's software resources: its own where the point names them per system (an
    optional ``SystemLoad.resources``), else the point's."""
    return {s: getattr(getattr(point, s), "resources", None) or point.resources for s in SYSTEMS}


# -- small helpers at the edge ---------------------------------------------------------------
def preflight() -> None:
    """Root, the programs, both CPUs, the ports free: every problem at once."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (cgroups, tmpfs, postgres user)")
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if not (PG_BIN / "postgres").exists():
        missing.append(str(PG_BIN / "postgres"))
    if missing:
        problems.append("missing " + ", ".join(missing) + " (make system)")
    cpus = os.sched_getaffinity(0)
    if not {FRONT_CPU, DB_CPU} <= cpus:
        problems.append(f"needs CPUs {FRONT_CPU} and {DB_CPU}; this process may use {sorted(cpus)}")
    busy = [
        p for p in (*PG_PORTS.values(), *WEB_PORTS.values(), *LB_PORTS.values()) if _listening(p)
    ]
    if busy:
        problems.append(f"ports in use on 127.0.0.1: {busy}")
    if not problems and "pdo_pgsql" not in run_checked(["php-fpm8.2", "-m"], "php-fpm"):
        problems.append("php-fpm8.2 has no pdo_pgsql (install php8.2-pgsql: make system)")
    if problems:
        raise PrerequisiteError("the consolidation lab cannot start", "; ".join(problems))


def remove_leftovers(work: Path) -> list[str]:
    """What ``quell lab clean`` removes of a consolidation lab whose runner was killed, beside
    what every lab run leaves (``quell.lab.cleanup.Cleaner``): its clusters' shared memory."""
    return remove_segments(work / PG_DIR)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(port: int, procs: list[Managed], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise ComponentError(p.name, f"exited at start: {p.log_tail()}")
        if _listening(port):
            return
        time.sleep(0.05)
    raise ComponentError(
        "front tiers", f"nothing listens on 127.0.0.1:{port} after {timeout_s:g} s"
    )


def _get(port: int, path: str, timeout_s: float = 30.0) -> None:
    """One request, to warm a path; a failure says what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head = data.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 200 " not in head + " ":
        raise ComponentError("front tiers", f"GET {path} on :{port}: {data[:300]!r}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, check=False, timeout=30)
    if path.is_mount():
        run_checked(["umount", "-l", str(path)], "tmpfs")


def _sleep_until(t: float) -> None:
    while (left := t - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))


def _wait_idle(cpu: int, timeout_s: float = IDLE_WAIT_S) -> float:
    """Wait (at most ``timeout_s``) for a second in which ``cpu`` is less than 3 % busy;
    returns the last second's utilisation (the point goes on either way, and says it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        a = read_cpu_times(cpu=cpu)
        time.sleep(1.0)
        pct = _busy(a, read_cpu_times(cpu=cpu))
        if pct < IDLE_CPU1_PCT or time.monotonic() >= deadline:
            return pct


def measure_point(
    point: ConsolidationPoint,
    run_dir: Path,
    *,
    progress: Status | None = None,
    lab: ConsolidationLab | None = None,
) -> ConsolidationMeasurement:
    """Measure one point in the lab (``env="lab"``) and write ``run_dir/measurement.json``.

    Without ``lab`` both systems are brought up for this point and torn down after it (about a
    minute of bring-up: initdb and the data of both clusters); a sweep should instead open one
    ``ConsolidationLab`` and pass it as ``lab`` for every point (the clusters, their data and
    the front tiers are reused; caps, resources and priority are set per point).
    ``progress``, if given, is called with a short status line at each stage."""
    if lab is not None:
        return lab.measure(point, run_dir, progress)
    with ConsolidationLab(status=progress, log_dir=run_dir / "logs") as own:
        return own.measure(point, run_dir, progress)

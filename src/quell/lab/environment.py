"""``LabEnvironment``: the first Environment. Brings a scenario up on this machine, observes it
every interval, applies policy actions through HAProxy's runtime API and the cgroups, fires timed
events, and tears everything down again.

An instance's life: *booting* (its server and probe server run, HAProxy does not know it yet;
``scaling.boot_s`` after ``AddInstance``), *serving* (in HAProxy, in every snapshot),
*draining* (HAProxy state drain after ``RemoveInstance(drain=True)``; still reported) and
*gone* (maint, deleted from the backend, its processes stopped; in no snapshot). Boot and drain
progress is checked in ``observe``, so both end on a control tick."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from quell.actuate.cgroup import set_cpu_cap
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
from quell.core.clock import WallClock
from quell.core.observation import Snapshot
from quell.errors import ActionError, ComponentDiedError, ComponentError, InputError, Problem
from quell.lab import antagonists as ants
from quell.lab.balancer import (
    BACKEND,
    FRONTEND_ADDR,
    FRONTEND_PORT,
    BackendServer,
    haproxy_config,
    wait_for_socket,
    wait_until_up,
)
from quell.lab.cgroups import Group, create_group, enable_v2_controllers, remove_group
from quell.lab.loadgen import LineTail, record_tail, write_schedule
from quell.lab.network import Topology, noise_addr
from quell.lab.prober import PROBE_PATH, ProbeRecord, probe_tail, write_targets
from quell.lab.process import Managed, Placement, Supervisor
from quell.lab.sampler import InstanceProbe, LinkReading, Sampler
from quell.lab.servers import (
    PORT,
    PROBE_PORT,
    probe_server_files,
    server_files,
    write_docroot,
    write_video_docroot,
)
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.probe.severity import probe_extra
from quell.scenario.model import Event, FileSpec, Fio, Instance, Iperf3, Scenario, StressNg
from quell.scenario.schedule import build_schedule
from quell.signals.cgroup import CgroupLayout
from quell.signals.haproxy import ServerStat
from quell.signals.netns import NETNS_DIR, NetDevReader, open_in_netns, tcp_listeners
from quell.store.run import RequestRecord
from quell.workload.schedule import RequestSchedule

StatusFn = Callable[[str], None]
InstanceState = Literal["booting", "serving", "draining", "gone"]
UPLINK = "uplink"
LISTEN_WAIT_S = 3.0
"""How long an instance added with no boot delay may take to open its port."""


@dataclass
class LabInstance:
    spec: Instance
    index: int
    addr: str
    group: Group
    server: Managed

    cpus: list[int] | None = None
    probe_server: Managed | None = None
    state: InstanceState = "serving"
    weight: int = 100
    """Load-balancer weight; for a booting instance, the one it will join with."""
    maxconn: int | None = None
    ready_at_s: float = 0.0
    drain_until_s: float = math.inf

    @property
    def cpu_count(self) -> int:
        return len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))

    @property
    def processes(self) -> list[Managed]:
        return [self.server] + ([self.probe_server] if self.probe_server is not None else [])

    @property
    def reported(self) -> bool:
        """In HAProxy and in snapshots (serving or draining)."""
        return self.state in ("serving", "draining")

    def listening(self) -> bool:
        return (self.addr, PORT) in tcp_listeners(self.server.pid)


def _problem(location: str, message: str) -> InputError:
    return InputError("action", [Problem(location, message)])


def probe_readings(
    records: list[ProbeRecord], now_s: float
) -> tuple[dict[str, dict[str, float]], list[ProbeRecord]]:
    """Each instance's probe reading (``Observation.extra``) from the downloads that completed
    before ``now_s`` — the mean time of the successful ones and their count — and the records
    still running past it. Every download counts: one that spilled past the last interval's end
    is averaged with the one that started after it, not dropped for it."""
    times: dict[str, list[float]] = {}
    for r in records:
        if r.end_s < now_s and r.ok:
            times.setdefault(r.instance_id, []).append(r.seconds)
    pending = [r for r in records if r.end_s >= now_s]
    return {iid: probe_extra(t) for iid, t in times.items()}, pending


class LabEnvironment:
    name = "lab"

    def __init__(
        self,
        scenario: Scenario,
        scenario_dir: Path,
        run_dir: Path,
        layout: CgroupLayout,
        tag: RunTag | None = None,
        runtime_root: Path = RUNTIME_ROOT,
    ) -> None:
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.run_dir = run_dir
        self.layout = layout
        self.tag = tag or RunTag.new()
        self.work = self.tag.runtime_dir(runtime_root)
        self.supervisor = Supervisor(self.tag, run_dir / "logs")
        self.topology = Topology(self.tag)
        self.groups: list[Group] = []
        self.instances: dict[str, LabInstance] = {}
        self.antagonists: dict[str, list[Managed]] = {}
        self.iperf_ports: dict[str, int] = {}
        self.sampler = Sampler(layout)
        self.clock = WallClock()
        self.runtime: HAProxyRuntime | None = None
        self.loadgen: Managed | None = None
        self.prober: Managed | None = None
        self.links: dict[str, NetDevReader] = {}
        self.targets_file = self.work / "probe-targets.json"
        self._tail: LineTail[RequestRecord] | None = None
        self._probe_tail: LineTail[ProbeRecord] | None = None
        self._probe_pending: list[ProbeRecord] = []
        self._undeleted: set[str] = set()
        self._pending: list[RequestRecord] = []
        self._to_store: list[RequestRecord] = []
        self._last_obs = 0.0
        self._closed = False
        self._schedule: RequestSchedule | None = None

    # -- bring-up ----------------------------------------------------------------------------
    def _cpus_for(self, host: str, own: Sequence[int] | None) -> list[int] | None:
        if own is not None:
            return list(own)
        h = self.scenario.host(host)
        return list(h.cpus) if h.cpus is not None else None

    def _group(self, part: str, cpus: Sequence[int] | None) -> Group:
        group = create_group(self.layout, self.tag.name(part), cpus)
        self.groups.append(group)
        return group

    def start(self, status: StatusFn = lambda msg: None) -> None:
        s = self.scenario
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "state.json").write_text(
            json.dumps({"tag": self.tag.value, "pid": os.getpid(), "run_dir": str(self.run_dir)})
        )
        enable_v2_controllers(self.layout)
        status("network")
        self.topology.create()
        for host in s.hosts:
            self.topology.add_host(host.id, host.link_mbit)
            if host.link_mbit is not None:
                fd = open_in_netns(NETNS_DIR / self.topology.host_ns(host.id))
                self.links[host.id] = NetDevReader(fd)
        status("files")
        self._schedule = build_schedule(s, self.scenario_dir)
        write_docroot(self.work / "www", s.files, s.seed)
        if s.workload.sessions is not None:
            # video sessions ask for /v{video}/c{chunk}: serve each chunk the schedule uses
            sched = self._schedule
            write_video_docroot(self.work / "www", sched.paths, sched.sizes_bytes, s.seed)
        if s.probe is not None:
            probe_file = FileSpec(path=PROBE_PATH, size_bytes=s.probe.size_bytes)
            write_docroot(self.work / "probe-www", [probe_file], s.seed)
        status("servers")
        for k, inst in enumerate(s.instances):
            self._start_instance(inst, k)
        for ant in s.antagonists:
            if isinstance(ant, Iperf3):
                self._start_iperf_server(ant)
        status("haproxy")
        self._start_haproxy()
        status("load")
        self._start_load()

    def _start_instance(self, inst: Instance, index: int) -> LabInstance:
        addr = self.topology.add_instance(inst.id, inst.host, index)
        cpus = self._cpus_for(inst.host, inst.cpus)
        group = self._group(f"i-{inst.id}", cpus)
        files = server_files(self.work / f"i-{inst.id}", self.work / "www", addr, inst)
        placement = Placement(self.topology.instance_ns(inst.id), group.procs_files, cpus)
        server = self.supervisor.start(f"server-{inst.id}", files.command, placement)
        probe_server = None
        if self.scenario.probe is not None:
            pfiles = probe_server_files(self.work / f"p-{inst.id}", self.work / "probe-www", addr)
            probe_server = self.supervisor.start(f"probe-{inst.id}", pfiles.command, placement)
        maxconn = inst.maxconn or self.scenario.load_balancer.maxconn_per_server
        lab_inst = LabInstance(
            inst,
            index,
            addr,
            group,
            server,
            cpus,
            probe_server,
            weight=inst.weight,
            maxconn=maxconn,
        )
        self.instances[inst.id] = lab_inst
        return lab_inst

    def _start_iperf_server(self, ant: Iperf3) -> None:
        port = ants.IPERF_BASE_PORT + len(self.iperf_ports)
        self.iperf_ports[ant.id] = port
        j = self.topology.host_index[ant.host]
        group = self._group(f"a-{ant.id}", self._cpus_for(ant.host, ant.cpus))
        proc = self.supervisor.start(
            f"iperf3-server-{ant.id}",
            ants.iperf3_server_argv(noise_addr(j), port),
            Placement(
                self.topology.noise_ns(ant.host),
                group.procs_files,
                self._cpus_for(ant.host, ant.cpus),
            ),
        )
        self.antagonists.setdefault(f"{ant.id}/server", []).append(proc)

    def _backend_server(self, inst: LabInstance) -> BackendServer:
        return BackendServer(inst.spec.id, inst.addr, PORT, inst.weight, inst.maxconn)

    def _start_haproxy(self) -> None:
        sock = self.work / "haproxy.sock"
        cfg = self.work / "haproxy.cfg"
        cfg.write_text(
            haproxy_config(
                self.scenario.load_balancer,
                [self._backend_server(i) for i in self.instances.values()],
                sock,
                self.scenario.workload.timeout_s,
            )
        )
        proc = self.supervisor.start(
            "haproxy", ["haproxy", "-db", "-f", str(cfg)], Placement(self.topology.client)
        )
        wait_for_socket(sock, proc.alive)
        self.runtime = HAProxyRuntime(sock)
        try:
            wait_until_up(self.runtime, list(self.instances))
        except ComponentError as exc:
            tails = {
                i: inst.server.log_tail(300)
                for i, inst in self.instances.items()
                if not inst.server.alive()
            }
            raise ComponentError("haproxy", f"{exc.detail}; exited servers: {tails}") from None

    def _start_load(self) -> None:
        s = self.scenario
        schedule = self._schedule or build_schedule(s, self.scenario_dir)
        sched_file = self.work / "schedule.npz"
        write_schedule(sched_file, schedule.times_s, schedule.path_index, list(schedule.paths))
        out = self.run_dir / "requests.csv"
        self._tail = record_tail(out)
        self.sampler.prime(self._probes(), self._link_readings())
        start_at = time.monotonic() + 0.3
        self.clock = WallClock(origin=start_at)
        self.loadgen = self.supervisor.start(
            "loadgen",
            [
                sys.executable,
                "-m",
                "quell.lab.loadgen",
                "--schedule",
                str(sched_file),
                "--out",
                str(out),
                "--host",
                FRONTEND_ADDR,
                "--port",
                str(FRONTEND_PORT),
                "--start-at",
                repr(start_at),
                "--duration",
                repr(s.duration_s),
                "--timeout",
                repr(s.workload.timeout_s),
            ],
            Placement(self.topology.client, cpus=s.workload.cpus),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        if s.probe is not None:
            self._start_prober(start_at)
        self._last_obs = 0.0

    def _start_prober(self, start_at: float) -> None:
        """The probe client, in the client namespace like the load generator."""
        s = self.scenario
        assert s.probe is not None
        self._write_targets()
        out = self.run_dir / "probes.csv"
        self._probe_tail = probe_tail(out)
        self.prober = self.supervisor.start(
            "prober",
            [
                sys.executable,
                "-m",
                "quell.lab.prober",
                "--targets",
                str(self.targets_file),
                "--out",
                str(out),
                "--start-at",
                repr(start_at),
                "--duration",
                repr(s.duration_s),
                "--period",
                repr(s.probe.period_s),
                "--timeout",
                repr(s.workload.timeout_s),
                "--seed",
                str(s.seed),
                "--size",
                str(s.probe.size_bytes),
                "--path",
                PROBE_PATH,
            ],
            Placement(self.topology.client, cpus=s.workload.cpus),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )

    def _write_targets(self) -> None:
        if self.scenario.probe is None:
            return
        targets = {i.spec.id: (i.addr, PROBE_PORT) for i in self.instances.values() if i.reported}
        write_targets(self.targets_file, targets)

    def _probe_of(self, i: LabInstance) -> InstanceProbe:
        link_mbit = self.scenario.host(i.spec.host).link_mbit
        return InstanceProbe(i.spec.id, i.group, link_mbit, i.cpu_count, host=i.spec.host)

    def _probes(self) -> list[InstanceProbe]:
        return [self._probe_of(i) for i in self.instances.values() if i.reported]

    def _link_readings(self) -> list[LinkReading]:
        out = []
        for host, reader in self.links.items():
            try:
                sent = reader.tx_bytes(UPLINK)
            except ComponentError:
                sent = None
            link_mbit = self.scenario.host(host).link_mbit
            assert link_mbit is not None
            out.append(LinkReading(host, sent, link_mbit))
        return out

    def _probe_results(self, now: float) -> dict[str, dict[str, float]]:
        """Per instance, the mean time and the count of the successful downloads completed
        since the last interval, before ``now``."""
        if self._probe_tail is None:
            return {}
        self._probe_pending.extend(self._probe_tail.read())
        readings, self._probe_pending = probe_readings(self._probe_pending, now)
        return readings

    # -- Environment protocol ----------------------------------------------------------------
    def take_requests(self) -> list[RequestRecord]:
        out, self._to_store = self._to_store, []
        return out

    def _check_alive(self) -> None:
        for name, proc in (("loadgen", self.loadgen), ("prober", self.prober)):
            if proc is not None and not proc.alive() and proc.popen.returncode != 0:
                raise ComponentDiedError(
                    name, f"exited ({proc.popen.returncode}): {proc.log_tail()}"
                )
        for inst in self.instances.values():
            if inst.state == "gone":
                continue
            for proc in inst.processes:
                if not proc.alive():
                    raise ComponentDiedError(proc.name, f"exited: {proc.log_tail()}")

    def observe(self) -> Snapshot:
        self._check_alive()
        now = self.clock.now()
        interval = now - self._last_obs
        self._last_obs = now
        if self._tail is not None:
            new = self._tail.read()
            self._to_store.extend(new)
            self._pending.extend(new)
        # A request belongs to the interval in which it completed (failures: when sent).
        done = [r for r in self._pending if r.send_s + (r.latency_s or 0.0) < now]
        self._pending = [r for r in self._pending if r.send_s + (r.latency_s or 0.0) >= now]
        probes = self._probe_results(now)
        lb = {}
        if self.runtime is not None:
            lb = {s.server: s for s in self.runtime.show_stat() if s.backend == BACKEND}
        snap = self.sampler.sample(
            now, interval, self._probes(), lb, done, self._link_readings(), probes
        )
        self._settle(now, lb)
        return snap

    def _settle(self, now: float, lb: dict[str, ServerStat]) -> None:
        """Finish drains whose sessions are done (or timed out), retry HAProxy deletions it
        refused, and put instances whose boot time has passed into service."""
        for inst in list(self.instances.values()):
            if inst.state == "draining":
                stat = lb.get(inst.spec.id)
                idle = stat is None or (stat.scur == 0 and stat.qcur == 0)
                if idle or now >= inst.drain_until_s:
                    self._retire(inst)
        for iid in sorted(self._undeleted):
            self._delete_server(iid)
        for inst in list(self.instances.values()):
            if inst.state == "booting" and now >= inst.ready_at_s and inst.listening():
                self._promote(inst)

    def _runtime(self) -> HAProxyRuntime:
        if self.runtime is None:
            raise ComponentError("lab", "not started")
        return self.runtime

    def _promote(self, inst: LabInstance) -> None:
        """Booted: into HAProxy, into snapshots from the next one on, into the probe's list."""
        rt = self._runtime()
        srv = self._backend_server(inst)
        rt.add_server(BACKEND, srv.name, srv.addr, srv.port, srv.weight, srv.maxconn)
        rt.set_state(BACKEND, srv.name, "ready")
        inst.state = "serving"
        self.sampler.prime([self._probe_of(inst)], host_counters=False)
        self._write_targets()

    def _retire(self, inst: LabInstance) -> None:
        """Out of HAProxy (maint, then deleted), processes stopped, out of snapshots."""
        was_in_lb = inst.reported
        inst.state = "gone"
        try:
            if was_in_lb:
                rt = self._runtime()
                rt.set_state(BACKEND, inst.spec.id, "maint")
                # Cut what is still open (drain=False, or a drain that timed out).
                rt.command(f"shutdown sessions server {BACKEND}/{inst.spec.id}")
        finally:
            for proc in inst.processes:
                self.supervisor.stop(proc)
            self._write_targets()
        if was_in_lb:
            self._delete_server(inst.spec.id)

    def _delete_server(self, iid: str) -> None:
        """``del server``; HAProxy refuses while it still holds connections to the server
        (idle ones are closed once the server has stopped), so a refusal is retried later."""
        try:
            self._runtime().del_server(BACKEND, iid)
        except ComponentError:
            self._undeleted.add(iid)
        else:
            self._undeleted.discard(iid)

    def _instance(self, iid: str, action: str) -> LabInstance:
        inst = self.instances.get(iid)
        if inst is None or inst.state == "gone":
            raise _problem(action, f"instance {iid!r} does not exist (or was removed)")
        return inst

    def _add_instance(self, a: AddInstance) -> None:
        if a.instance_id in self.instances:
            raise _problem("AddInstance", f"instance {a.instance_id!r} already exists")
        if a.host not in self.topology.host_index:
            raise _problem("AddInstance", f"host {a.host!r} is not a host of the scenario")
        scaling = self.scenario.scaling
        try:
            spec = Instance(
                id=a.instance_id,
                host=a.host,
                weight=a.weight,
                server=scaling.server if scaling is not None else "lighttpd",
            )
        except ValidationError as exc:
            problems = [Problem("AddInstance", e["msg"]) for e in exc.errors()]
            raise InputError("action", problems) from None
        inst = self._start_instance(spec, len(self.instances))
        boot_s = scaling.boot_s if scaling is not None else 0.0
        inst.state = "booting"
        inst.ready_at_s = self.clock.now() + boot_s
        if boot_s == 0:
            deadline = time.monotonic() + LISTEN_WAIT_S
            while not inst.listening() and inst.server.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            self._promote(inst)

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out each action; if any cannot be (an unknown instance, a refusal by HAProxy
        or the cgroups), raise ``ActionError`` naming each of them (the others stay applied)."""
        rt = self._runtime()
        failed: list[tuple[object, str]] = []
        applied: list[object] = []
        for a in actions:
            try:
                self._apply_one(rt, a)
            except (InputError, ComponentError) as exc:
                failed.append((a, str(exc)))
            else:
                applied.append(a)
        if failed:
            raise ActionError(self.name, failed, applied)

    def _apply_one(self, rt: HAProxyRuntime, a: Action) -> None:
        if isinstance(a, SetWeight):
            inst = self._instance(a.instance_id, "SetWeight")
            if inst.state != "booting":
                rt.set_weight(BACKEND, a.instance_id, a.weight)
            inst.weight = a.weight
        elif isinstance(a, SetMaxConn):
            inst = self._instance(a.instance_id, "SetMaxConn")
            if inst.state != "booting":
                rt.set_maxconn(BACKEND, a.instance_id, a.maxconn)
            inst.maxconn = a.maxconn
        elif isinstance(a, RemoveInstance):
            inst = self._instance(a.instance_id, "RemoveInstance")
            if a.drain and inst.state == "serving":
                rt.set_state(BACKEND, a.instance_id, "drain")
                inst.state = "draining"
                inst.drain_until_s = self.clock.now() + self.scenario.workload.timeout_s
            elif not a.drain or inst.state == "booting":
                self._retire(inst)
        elif isinstance(a, AddInstance):
            self._add_instance(a)
        elif isinstance(a, SetCpuCap):
            inst = self._instance(a.instance_id, "SetCpuCap")
            set_cpu_cap(self.layout, inst.group.name, a.cpus)
        elif isinstance(a, ReconfigureServer):
            self._instance(a.instance_id, "ReconfigureServer")
            raise _problem(
                "ReconfigureServer",
                "lighttpd and nginx instances have no run-time settings to change",
            )

    def trigger(self, event: Event) -> None:
        remaining = max(1.0, self.scenario.duration_s - self.clock.now())
        for ant_id in event.stop:
            for proc in self.antagonists.pop(ant_id, []):
                self.supervisor.stop(proc)
        for ant_id in event.start:
            ant = next(a for a in self.scenario.antagonists if a.id == ant_id)
            self.antagonists[ant_id] = self._start_antagonist(ant, remaining)

    def _start_antagonist(self, ant: StressNg | Iperf3 | Fio, timeout_s: float) -> list[Managed]:
        cpus = self._cpus_for(ant.host, ant.cpus)
        if isinstance(ant, Iperf3):
            j = self.topology.host_index[ant.host]
            argv = ants.iperf3_client_argv(ant, noise_addr(j), self.iperf_ports[ant.id], timeout_s)
            return [
                self.supervisor.start(f"iperf3-{ant.id}", argv, Placement(self.topology.client))
            ]
        group = self._group(f"a-{ant.id}", cpus)
        if isinstance(ant, StressNg):
            argv = ants.stress_ng_argv(ant, timeout_s)
        else:
            io_dir = self.work / "io"
            io_dir.mkdir(exist_ok=True)
            argv = ants.fio_argv(ant, io_dir, timeout_s)
        placement = Placement(self.topology.noise_ns(ant.host), group.procs_files, cpus)
        return [self.supervisor.start(f"{ant.kind}-{ant.id}", argv, placement)]

    def close(self) -> None:
        """Stop everything and remove every trace of the run; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        self.supervisor.stop_all()
        for reader in self.links.values():
            reader.close()  # the descriptors hold the host namespaces
        self.links.clear()
        for group in reversed(self.groups):
            try:
                remove_group(group)
            except ComponentError as exc:
                errors.append(str(exc))
        errors += self.topology.destroy()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.work)
        if errors:
            raise ComponentError("teardown", "; ".join(errors))

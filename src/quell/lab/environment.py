"""``LabEnvironment``: the first Environment. Brings a scenario up on this machine, observes it
every interval, applies policy actions through HAProxy's runtime API and the cgroups, fires timed
events, and tears everything down again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
from quell.errors import ComponentDiedError, ComponentError, InputError, Problem
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
from quell.lab.loadgen import RecordTail, write_schedule
from quell.lab.network import Topology, noise_addr
from quell.lab.process import Managed, Placement, Supervisor
from quell.lab.sampler import InstanceProbe, Sampler
from quell.lab.servers import PORT, server_files, write_docroot
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.scenario.model import Event, Fio, Instance, Iperf3, Scenario, StressNg
from quell.signals.cgroup import CgroupLayout
from quell.store.run import RequestRecord
from quell.workload.schedule import build_schedule

StatusFn = Callable[[str], None]


@dataclass
class LabInstance:
    spec: Instance
    index: int
    addr: str
    group: Group
    server: Managed

    cpus: list[int] | None = None

    @property
    def cpu_count(self) -> int:
        return len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))


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
        self._tail: RecordTail | None = None
        self._pending: list[RequestRecord] = []
        self._to_store: list[RequestRecord] = []
        self._last_obs = 0.0
        self._closed = False

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
        status("files")
        write_docroot(self.work / "www", s.files, s.seed)
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
        server = self.supervisor.start(
            f"server-{inst.id}",
            files.command,
            Placement(self.topology.instance_ns(inst.id), group.procs_files, cpus),
        )
        lab_inst = LabInstance(inst, index, addr, group, server, cpus)
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
        maxconn = inst.spec.maxconn or self.scenario.load_balancer.maxconn_per_server
        return BackendServer(inst.spec.id, inst.addr, PORT, inst.spec.weight, maxconn)

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
        schedule = build_schedule(s, self.scenario_dir)
        sched_file = self.work / "schedule.npz"
        write_schedule(sched_file, schedule.times_s, schedule.path_index, list(schedule.paths))
        out = self.run_dir / "requests.csv"
        self._tail = RecordTail(out)
        self.sampler.prime(self._probes())
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
        self._last_obs = 0.0

    def _probes(self) -> list[InstanceProbe]:
        return [
            InstanceProbe(
                i.spec.id,
                i.group,
                self.scenario.host(i.spec.host).link_mbit,
                i.cpu_count,
            )
            for i in self.instances.values()
        ]

    # -- Environment protocol ----------------------------------------------------------------
    def take_requests(self) -> list[RequestRecord]:
        out, self._to_store = self._to_store, []
        return out

    def _check_alive(self) -> None:
        lg = self.loadgen
        if lg is not None and not lg.alive() and lg.popen.returncode != 0:
            raise ComponentDiedError("loadgen", f"exited ({lg.popen.returncode}): {lg.log_tail()}")
        for inst in self.instances.values():
            if not inst.server.alive():
                raise ComponentDiedError(
                    f"server {inst.spec.id}", f"exited: {inst.server.log_tail()}"
                )

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
        lb = {}
        if self.runtime is not None:
            lb = {s.server: s for s in self.runtime.show_stat() if s.backend == BACKEND}
        return self.sampler.sample(now, interval, self._probes(), lb, done)

    def apply(self, actions: Sequence[Action]) -> None:
        rt = self.runtime
        if rt is None:
            raise ComponentError("lab", "not started")
        for a in actions:
            if isinstance(a, SetWeight):
                rt.set_weight(BACKEND, a.instance_id, a.weight)
            elif isinstance(a, SetMaxConn):
                rt.set_maxconn(BACKEND, a.instance_id, a.maxconn)
            elif isinstance(a, RemoveInstance):
                rt.set_state(BACKEND, a.instance_id, "drain" if a.drain else "maint")
            elif isinstance(a, AddInstance):
                spec = Instance(id=a.instance_id, host=a.host, weight=a.weight)
                inst = self._start_instance(spec, len(self.instances))
                self.sampler.prime(self._probes())
                srv = self._backend_server(inst)
                rt.add_server(BACKEND, srv.name, srv.addr, srv.port, srv.weight, srv.maxconn)
                rt.set_state(BACKEND, srv.name, "ready")
            elif isinstance(a, SetCpuCap):
                set_cpu_cap(self.layout, self.instances[a.instance_id].group.name, a.cpus)
            elif isinstance(a, ReconfigureServer):
                raise InputError(
                    "action",
                    [
                        Problem(
                            "ReconfigureServer",
                            "lighttpd and nginx instances have no run-time settings to change",
                        )
                    ],
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

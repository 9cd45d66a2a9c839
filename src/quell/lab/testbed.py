"""One scenario's components on this machine: the network and its shaped links, the files the
servers serve, the cgroups, every instance's server and probe server, HAProxy, the load
generator, the prober and the neighbours. Brought up step by step, torn down whatever
happened; every process, namespace, cgroup and file carries the run tag."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from quell.actuate.haproxy import HAProxyRuntime
from quell.errors import ComponentError, QuellError
from quell.instrument.log import CSV_NAME, read_records, write_records
from quell.lab import antagonists as ants
from quell.lab.apache import WORKING_SETS_DIR, start_apache, write_pages
from quell.lab.balancer import (
    FRONTEND_ADDR,
    FRONTEND_PORT,
    haproxy_config,
    wait_for_socket,
    wait_until_up,
)
from quell.lab.cgroups import Group, create_group, enable_v2_controllers, remove_group
from quell.lab.cleanup import runner_record
from quell.lab.instance import LabInstance
from quell.lab.loadgen import write_schedule
from quell.lab.network import Topology, noise_addr
from quell.lab.prober import PROBE_PATH, write_targets
from quell.lab.process import Managed, Placement, Supervisor
from quell.lab.sampler import LinkReading
from quell.lab.servers import (
    PROBE_PORT,
    probe_server_files,
    server_files,
    write_docroot,
    write_video_docroot,
)
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.lab.users import write_population
from quell.scenario.model import (
    ClamScan,
    Event,
    FileSpec,
    Fio,
    Instance,
    Iperf3,
    Scenario,
    StressNg,
)
from quell.scenario.schedule import build_population, build_schedule
from quell.signals.cgroup import CgroupLayout
from quell.signals.netns import NETNS_DIR, NetDevReader, open_in_netns
from quell.workload.schedule import RequestSchedule

StatusFn = Callable[[str], None]
UPLINK = "uplink"


class Testbed:
    """The components of ``scenario`` on this machine, under the run tag ``tag``; an open
    loop replays ``schedule`` (default: built from the scenario when first needed)."""

    def __init__(
        self,
        scenario: Scenario,
        scenario_dir: Path,
        run_dir: Path,
        layout: CgroupLayout,
        tag: RunTag,
        runtime_root: Path = RUNTIME_ROOT,
        schedule: RequestSchedule | None = None,
    ) -> None:
        self.scenario = scenario
        self.scenario_dir = scenario_dir
        self.run_dir = run_dir
        self.layout = layout
        self.tag = tag
        self.work = tag.runtime_dir(runtime_root)
        self.supervisor = Supervisor(tag, run_dir / "logs")
        self.topology = Topology(tag)
        self.groups: list[Group] = []
        self.antagonists: dict[str, list[Managed]] = {}
        self.iperf_ports: dict[str, int] = {}
        self.runtime: HAProxyRuntime | None = None
        self.loadgen: Managed | None = None
        self.prober: Managed | None = None
        self.links: dict[str, NetDevReader] = {}
        self.targets_file = self.work / "probe-targets.json"
        self.schedule = schedule
        self.population = build_population(scenario)
        """The closed-loop users; None for an open loop, which replays ``schedule``."""
        self.rq_split = contextlib.ExitStack()
        """The eBPF run-queue split while it is attached (the scenario's ``attribution.ebpf``)."""

    def cpus_for(self, host: str, own: Sequence[int] | None) -> list[int] | None:
        if own is not None:
            return list(own)
        h = self.scenario.host(host)
        return list(h.cpus) if h.cpus is not None else None

    def _group(self, part: str, cpus: Sequence[int] | None) -> Group:
        group = create_group(self.layout, self.tag.name(part), cpus)
        self.groups.append(group)
        return group

    # -- bring-up, in order ------------------------------------------------------------------
    def prepare(self, status: StatusFn) -> None:
        """The run's directory, the network with its shaped links, the files to serve."""
        s = self.scenario
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "state.json").write_text(
            json.dumps({"tag": self.tag.value, **runner_record(), "run_dir": str(self.run_dir)})
        )
        enable_v2_controllers(self.layout)
        if s.attribution is not None and s.attribution.ebpf:
            from quell.instrument import bpf

            status("eBPF run-queue split")
            split = self.rq_split.enter_context(bpf.attached())
            self.supervisor.rq_threads_fd = split.threads_fd()
        status("network")
        self.topology.create()
        for host in s.hosts:
            self.topology.add_host(host.id, host.link_mbit)
            if host.link_mbit is not None:
                fd = open_in_netns(NETNS_DIR / self.topology.host_ns(host.id))
                self.links[host.id] = NetDevReader(fd)
        status("files")
        write_docroot(self.work / "www", s.files, s.seed)
        if s.workload.sessions is not None:
            # video sessions ask for /v{video}/c{chunk}: serve each chunk the schedule uses
            sched = self.request_schedule()  # sessions are open loop (check_scenario)
            write_video_docroot(self.work / "www", sched.paths, sched.sizes_bytes, s.seed)
        if s.pages:
            write_pages(self.work / "www", self.work / WORKING_SETS_DIR, s.pages, s.seed)
        if s.probe is not None:
            probe_file = FileSpec(path=PROBE_PATH, size_bytes=s.probe.size_bytes)
            write_docroot(self.work / "probe-www", [probe_file], s.seed)
        for ant in s.antagonists:
            if isinstance(ant, ClamScan):
                status(f"clamscan data for {ant.id}")
                ants.write_clamscan_data(ant, self.work / f"clam-{ant.id}", s.seed)

    def start_instance(self, inst: Instance, index: int) -> LabInstance:
        """The instance's namespace, cgroup, server (Apache with php-fpm, settled: see
        ``start_apache``) and (with a probe) probe server."""
        addr = self.topology.add_instance(inst.id, inst.host, index)
        cpus = self.cpus_for(inst.host, inst.cpus)
        group = self._group(f"i-{inst.id}", cpus)
        placement = Placement(self.topology.instance_ns(inst.id), group.procs_files, cpus)
        apache = None
        if inst.server == "apache":
            apache = start_apache(self.supervisor, self.scenario, inst, self.work, addr, placement)
            server = apache.procs["apache"]
        else:
            files = server_files(self.work / f"i-{inst.id}", self.work / "www", addr, inst)
            server = self.supervisor.start(
                f"server-{inst.id}", files.command, placement, instrumented=inst.instrument
            )
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
            apache=apache,
        )
        if apache is not None:
            apache.replaced = lab_inst.replace
        return lab_inst

    def start_iperf_servers(self) -> None:
        """The receiving end of every iperf3 neighbour, in its host's noise namespace."""
        for ant in self.scenario.antagonists:
            if isinstance(ant, Iperf3):
                self._start_iperf_server(ant)

    def _start_iperf_server(self, ant: Iperf3) -> None:
        port = ants.IPERF_BASE_PORT + len(self.iperf_ports)
        self.iperf_ports[ant.id] = port
        j = self.topology.host_index[ant.host]
        group = self._group(f"a-{ant.id}", self.cpus_for(ant.host, ant.cpus))
        proc = self.supervisor.start(
            f"iperf3-server-{ant.id}",
            ants.iperf3_server_argv(noise_addr(j), port),
            Placement(
                self.topology.noise_ns(ant.host),
                group.procs_files,
                self.cpus_for(ant.host, ant.cpus),
            ),
        )
        self.antagonists.setdefault(f"{ant.id}/server", []).append(proc)

    def start_haproxy(
        self,
        instances: Sequence[LabInstance],
        slots: Sequence[LabInstance] = (),
        log_socket: Path | None = None,
    ) -> HAProxyRuntime:
        """HAProxy in the client namespace with ``instances`` as its backend, once all are up;
        ``slots``: instances declared disabled (pre-provisioned, put in service through the
        runtime API); ``log_socket``: where HAProxy logs every request."""
        sock = self.work / "haproxy.sock"
        cfg = self.work / "haproxy.cfg"
        pop = self.population
        spare = [replace(i.backend_server(), disabled=True) for i in slots]
        cfg.write_text(
            haproxy_config(
                self.scenario.load_balancer,
                [*(i.backend_server() for i in instances), *spare],
                sock,
                self.scenario.workload.timeout_s,
                kept_alive_users=pop.users if pop is not None and pop.keepalive else 0,
                log_socket=log_socket,
                one_request_per_server_connection=any(
                    i.instrument for i in self.scenario.instances
                ),
            )
        )
        proc = self.supervisor.start(
            "haproxy",
            ["haproxy", "-db", "-f", str(cfg)],
            Placement(self.topology.client, cpus=self.scenario.load_balancer.cpus),
        )
        wait_for_socket(sock, proc.alive)
        self.runtime = HAProxyRuntime(sock)
        try:
            wait_until_up(self.runtime, [i.spec.id for i in instances])
        except ComponentError as exc:
            tails = {i.spec.id: i.server.log_tail(300) for i in instances if not i.server.alive()}
            raise ComponentError("haproxy", f"{exc.detail}; exited servers: {tails}") from None
        return self.runtime

    def request_schedule(self) -> RequestSchedule:
        """The open loop's request schedule: the one given, else built from the scenario, once."""
        if self.schedule is None:
            self.schedule = build_schedule(self.scenario, self.scenario_dir)
        return self.schedule

    def write_schedule(self) -> None:
        """What the load generator runs: the request schedule to replay, or the closed-loop
        users."""
        if self.population is not None:
            write_population(self.work / "users.json", self.population)
            return
        schedule = self.request_schedule()
        sched_file = self.work / "schedule.npz"
        write_schedule(sched_file, schedule.times_s, schedule.path_index, list(schedule.paths))

    def start_load(self, start_at: float, out: Path) -> None:
        """The load generator, replaying the schedule (or running the users) from ``start_at``
        (monotonic) into ``out``."""
        s = self.scenario
        load = (
            ["--schedule", str(self.work / "schedule.npz")]
            if self.population is None
            else ["--users", str(self.work / "users.json")]
        )
        self.loadgen = self.supervisor.start(
            "loadgen",
            [
                sys.executable,
                "-m",
                "quell.lab.loadgen",
                *load,
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

    def start_prober(self, start_at: float, out: Path) -> None:
        """The probe client, in the client namespace like the load generator."""
        s = self.scenario
        assert s.probe is not None
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

    # -- while it runs -----------------------------------------------------------------------
    def write_targets(self, instances: Iterable[LabInstance]) -> None:
        """The prober's list: the instances in HAProxy (serving or draining)."""
        if self.scenario.probe is None:
            return
        targets = {i.spec.id: (i.addr, PROBE_PORT) for i in instances if i.reported}
        write_targets(self.targets_file, targets)

    def link_readings(self) -> list[LinkReading]:
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

    def trigger(self, event: Event, now_s: float) -> None:
        """Stop and start the event's neighbours; those started run until the run's end."""
        remaining = max(1.0, self.scenario.duration_s - now_s)
        for ant_id in event.stop:
            for proc in self.antagonists.pop(ant_id, []):
                self.supervisor.stop(proc)
        for ant_id in event.start:
            ant = next(a for a in self.scenario.antagonists if a.id == ant_id)
            self.antagonists[ant_id] = self._start_antagonist(ant, remaining)

    def _start_antagonist(
        self, ant: StressNg | Iperf3 | Fio | ClamScan, timeout_s: float
    ) -> list[Managed]:
        cpus = self.cpus_for(ant.host, ant.cpus)
        if isinstance(ant, Iperf3):
            j = self.topology.host_index[ant.host]
            argv = ants.iperf3_client_argv(ant, noise_addr(j), self.iperf_ports[ant.id], timeout_s)
            return [
                self.supervisor.start(f"iperf3-{ant.id}", argv, Placement(self.topology.client))
            ]
        group = self._group(f"a-{ant.id}", cpus)
        if isinstance(ant, StressNg):
            argv = ants.stress_ng_argv(ant, timeout_s)
        elif isinstance(ant, ClamScan):
            argv = ants.clamscan_argv(self.work / f"clam-{ant.id}", timeout_s)
        else:
            io_dir = self.work / "io"
            io_dir.mkdir(exist_ok=True)
            argv = ants.fio_argv(ant, io_dir, timeout_s)
        placement = Placement(self.topology.noise_ns(ant.host), group.procs_files, cpus)
        return [self.supervisor.start(f"{ant.kind}-{ant.id}", argv, placement)]

    # -- teardown ----------------------------------------------------------------------------
    def keep_request_records(self) -> list[str]:
        """Each instrumented instance's per-request records (its servers stopped, so every log is
        complete), into ``instrument/<id>/requests.csv.gz`` of the run directory."""
        errors = []
        for inst in self.scenario.instances:
            logs = self.work / f"i-{inst.id}" / "qtlog"
            if not inst.instrument or not logs.is_dir():
                continue
            out = self.run_dir / "instrument" / inst.id
            try:
                out.mkdir(parents=True, exist_ok=True)
                write_records(read_records(logs), out / CSV_NAME)
            except (QuellError, OSError) as exc:
                errors.append(f"request records of {inst.id}: {exc}")
        return errors

    def teardown(self) -> None:
        """Stop everything and remove every trace of the run."""
        errors: list[str] = []
        self.supervisor.stop_all()
        self.supervisor.rq_threads_fd = None
        self.rq_split.close()  # detached and unloaded
        for reader in self.links.values():
            reader.close()  # the descriptors hold the host namespaces
        self.links.clear()
        for group in reversed(self.groups):
            try:
                remove_group(group)
            except ComponentError as exc:
                errors.append(str(exc))
        errors += self.topology.destroy()
        errors += self.keep_request_records()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.work)
        if errors:
            raise ComponentError("teardown", "; ".join(errors))

"""The instances of a lab run through their lives: booting → serving → draining → gone
(``quell.lab.instance``). ``AddInstance`` starts an instance's processes at once and puts it in
HAProxy once ``scaling.boot_s`` has passed and it listens; ``RemoveInstance`` drains it (or not)
and then takes it out of HAProxy and stops it. Boot and drain progress is checked by ``settle``
at every observation, so both end on a control tick."""

from __future__ import annotations

import time

from pydantic import ValidationError

from quell.actuate.haproxy import HAProxyRuntime
from quell.core.action import AddInstance, RemoveInstance
from quell.errors import ComponentDiedError, ComponentError, InputError, Problem
from quell.lab.balancer import BACKEND
from quell.lab.instance import LabInstance
from quell.lab.sampler import InstanceProbe, Sampler
from quell.lab.testbed import Testbed
from quell.scenario.model import Instance
from quell.signals.haproxy import ServerStat

LISTEN_WAIT_S = 3.0
"""How long an instance added with no boot delay may take to open its port."""


def action_problem(location: str, message: str) -> InputError:
    return InputError("action", [Problem(location, message)])


class Lifecycle:
    """Every instance of the run, by id, gone ones included (an id is not used twice)."""

    def __init__(self, testbed: Testbed, sampler: Sampler) -> None:
        self.testbed = testbed
        self.sampler = sampler
        self.instances: dict[str, LabInstance] = {}
        self._undeleted: set[str] = set()

    def start(self, spec: Instance, index: int) -> LabInstance:
        inst = self.testbed.start_instance(spec, index)
        self.instances[spec.id] = inst
        return inst

    def runtime(self) -> HAProxyRuntime:
        if self.testbed.runtime is None:
            raise ComponentError("lab", "not started")
        return self.testbed.runtime

    def get(self, iid: str, action: str) -> LabInstance:
        """The instance ``iid`` names, unless it does not exist or is gone."""
        inst = self.instances.get(iid)
        if inst is None or inst.state == "gone":
            raise action_problem(action, f"instance {iid!r} does not exist (or was removed)")
        return inst

    def probe_of(self, i: LabInstance) -> InstanceProbe:
        link_mbit = self.testbed.scenario.host(i.spec.host).link_mbit
        return InstanceProbe(i.spec.id, i.group, link_mbit, i.cpu_count, host=i.spec.host)

    def probes(self) -> list[InstanceProbe]:
        """What the sampler reads: the instances in snapshots."""
        return [self.probe_of(i) for i in self.instances.values() if i.reported]

    def check_alive(self) -> None:
        """Every instance that is not gone still runs its processes."""
        for inst in self.instances.values():
            if inst.state == "gone":
                continue
            for proc in inst.processes:
                if not proc.alive():
                    raise ComponentDiedError(proc.name, f"exited: {proc.log_tail()}")

    # -- the life ----------------------------------------------------------------------------
    def add(self, a: AddInstance, now_s: float) -> None:
        """Start the instance's processes; in HAProxy after ``scaling.boot_s`` (at once if 0)."""
        if a.instance_id in self.instances:
            raise action_problem("AddInstance", f"instance {a.instance_id!r} already exists")
        if a.host not in self.testbed.topology.host_index:
            raise action_problem("AddInstance", f"host {a.host!r} is not a host of the scenario")
        scaling = self.testbed.scenario.scaling
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
        inst = self.start(spec, len(self.instances))
        boot_s = scaling.boot_s if scaling is not None else 0.0
        inst.state = "booting"
        inst.ready_at_s = now_s + boot_s
        if boot_s == 0:
            deadline = time.monotonic() + LISTEN_WAIT_S
            while not inst.listening() and inst.server.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                if not inst.listening():
                    raise ComponentError(
                        inst.server.name,
                        f"not listening {LISTEN_WAIT_S:g} s after start: {inst.server.log_tail()}",
                    )
                self.promote(inst)
            except ComponentError:
                self.retire(inst)  # nothing of it stays: processes stopped, out of HAProxy
                raise

    def remove(self, a: RemoveInstance, now_s: float) -> None:
        """Drain (``drain`` and serving) or retire at once."""
        inst = self.get(a.instance_id, "RemoveInstance")
        if a.drain and inst.state == "serving":
            self.runtime().set_state(BACKEND, a.instance_id, "drain")
            inst.state = "draining"
            inst.drain_until_s = now_s + self.testbed.scenario.workload.timeout_s
        elif not a.drain or inst.state == "booting":
            self.retire(inst)

    def settle(self, now: float, lb: dict[str, ServerStat]) -> None:
        """Finish drains whose sessions are done (or timed out), retry HAProxy deletions it
        refused, and put instances whose boot time has passed into service."""
        for inst in list(self.instances.values()):
            if inst.state == "draining":
                stat = lb.get(inst.spec.id)
                idle = stat is None or (stat.scur == 0 and stat.qcur == 0)
                if idle or now >= inst.drain_until_s:
                    self.retire(inst)
        for iid in sorted(self._undeleted):
            self._delete_server(iid)
        for inst in list(self.instances.values()):
            if inst.state == "booting" and now >= inst.ready_at_s and inst.listening():
                self.promote(inst)

    def promote(self, inst: LabInstance) -> None:
        """Booted: into HAProxy, into snapshots from the next one on, into the probe's list.
        If HAProxy refuses, the instance is not left in its backend."""
        rt = self.runtime()
        srv = inst.backend_server()
        rt.add_server(BACKEND, srv.name, srv.addr, srv.port, srv.weight, srv.maxconn)
        try:
            rt.set_state(BACKEND, srv.name, "ready")
        except ComponentError:
            self._delete_server(srv.name)  # added servers start in maint: deletable
            raise
        inst.state = "serving"
        self.sampler.prime([self.probe_of(inst)], host_counters=False)
        self.testbed.write_targets(self.instances.values())

    def retire(self, inst: LabInstance) -> None:
        """Out of HAProxy (maint, then deleted), processes stopped, out of snapshots."""
        was_in_lb = inst.reported
        inst.state = "gone"
        try:
            if was_in_lb:
                rt = self.runtime()
                rt.set_state(BACKEND, inst.spec.id, "maint")
                # Cut what is still open (drain=False, or a drain that timed out).
                rt.command(f"shutdown sessions server {BACKEND}/{inst.spec.id}")
        finally:
            for proc in inst.processes:
                self.testbed.supervisor.stop(proc)
            self.testbed.write_targets(self.instances.values())
        if was_in_lb:
            self._delete_server(inst.spec.id)

    def _delete_server(self, iid: str) -> None:
        """``del server``; HAProxy refuses while it still holds connections to the server
        (idle ones are closed once the server has stopped), so a refusal is retried later."""
        try:
            self.runtime().del_server(BACKEND, iid)
        except ComponentError:
            self._undeleted.add(iid)
        else:
            self._undeleted.discard(iid)

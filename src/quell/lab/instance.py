"""One instance of a lab run: its server (and probe server) in its own namespace and cgroup, and
where it is in its life.

An instance's life: *booting* (its server and probe server run, HAProxy does not know it yet;
``scaling.boot_s`` after ``AddInstance``), *serving* (in HAProxy, in every snapshot),
*draining* (HAProxy state drain after ``RemoveInstance(drain=True)``; still reported) and
*gone* (maint, deleted from the backend, its processes stopped; in no snapshot)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from quell.actuate.apache import Part
from quell.lab.apache import ApacheInstance
from quell.lab.balancer import BackendServer
from quell.lab.cgroups import Group
from quell.lab.process import Managed
from quell.lab.servers import PORT
from quell.scenario.model import Instance
from quell.signals.netns import tcp_listeners

InstanceState = Literal["booting", "serving", "draining", "gone"]


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
    apache: ApacheInstance | None = None
    """An apache instance's php-fpm, settings and actuator (``server`` is its Apache)."""

    @property
    def cpu_count(self) -> int:
        return len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))

    @property
    def processes(self) -> list[Managed]:
        helpers = [p for p in self.apache.processes if p is not self.server] if self.apache else []
        probe = [self.probe_server] if self.probe_server is not None else []
        return [self.server, *helpers, *probe]

    @property
    def lb_maxconn(self) -> int | None:
        """HAProxy's maxconn for the instance: the lower of ``maxconn`` (``SetMaxConn``; 0 or
        None: none) and an apache instance's MaxRequestWorkers set online."""
        caps = [c for c in (self.maxconn, self.apache and self.apache.online_workers) if c]
        return min(caps) if caps else self.maxconn

    def replace(self, part: Part, proc: Managed) -> None:
        """An apache instance's server started again (``part`` "apache" is ``server``)."""
        if part == "apache":
            self.server = proc

    @property
    def reported(self) -> bool:
        """In HAProxy and in snapshots (serving or draining)."""
        return self.state in ("serving", "draining")

    def listening(self) -> bool:
        return (self.addr, PORT) in tcp_listeners(self.server.pid)

    def backend_server(self) -> BackendServer:
        """The instance as a server of HAProxy's backend."""
        return BackendServer(self.spec.id, self.addr, PORT, self.weight, self.lb_maxconn)

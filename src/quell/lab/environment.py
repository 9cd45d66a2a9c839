"""``LabEnvironment``: the first Environment. Brings a scenario up on this machine
(``quell.lab.testbed``), observes it every interval (``quell.lab.sampler`` over the machine's
counters and HAProxy, ``quell.lab.client_log`` over the client side's logs), applies policy
actions through HAProxy's runtime API and the cgroups, moves instances through their lives
(``quell.lab.lifecycle``), fires timed events, and tears everything down again."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

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
from quell.errors import (
    ActionError,
    ComponentDiedError,
    ComponentError,
    EnvironmentStateError,
    InputError,
)
from quell.lab.balancer import BACKEND
from quell.lab.client_log import ClientLog
from quell.lab.instance import LabInstance
from quell.lab.lifecycle import Lifecycle, action_problem
from quell.lab.sampler import Sampler
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.lab.testbed import StatusFn, Testbed
from quell.scenario.model import Event, Scenario
from quell.signals.cgroup import CgroupLayout
from quell.store.run import RequestRecord
from quell.workload.schedule import RequestSchedule


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
        schedule: RequestSchedule | None = None,
    ) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.layout = layout
        self.tag = tag or RunTag.new()
        self.testbed = Testbed(
            scenario, scenario_dir, run_dir, layout, self.tag, runtime_root, schedule
        )
        self.sampler = Sampler(layout)
        self.glance_sampler = Sampler(layout)
        """The counters' readings at the last glance or observe (``glance``)."""
        self._last_glance = 0.0
        self.lifecycle = Lifecycle(self.testbed, self.sampler)
        self.client_log = ClientLog()
        self.clock = WallClock()
        self._last_obs = 0.0
        self._state: Literal["not started", "started", "closed"] = "not started"

    @property
    def instances(self) -> dict[str, LabInstance]:
        """Every instance of the run, by id, gone ones included."""
        return self.lifecycle.instances

    @property
    def runtime(self) -> HAProxyRuntime | None:
        """HAProxy's runtime API, once HAProxy runs."""
        return self.testbed.runtime

    def _require_started(self, operation: str) -> None:
        if self._state != "started":
            raise EnvironmentStateError(self.name, operation, self._state)

    # -- bring-up ----------------------------------------------------------------------------
    def start(self, status: StatusFn = lambda msg: None) -> None:
        """Bring the scenario up; once it returns the environment observes and acts. If it
        fails, ``close`` removes what it had brought up."""
        if self._state != "not started":
            raise EnvironmentStateError(self.name, "start", f"already {self._state}")
        s = self.scenario
        bed = self.testbed
        bed.prepare(status)
        status("servers")
        for k, inst in enumerate(s.instances):
            self.lifecycle.start(inst, k)
        bed.start_iperf_servers()
        status("haproxy")
        bed.start_haproxy(list(self.instances.values()))
        status("load")
        bed.write_schedule()
        requests_csv = self.run_dir / "requests.csv"
        self.client_log.follow_requests(requests_csv)
        self.sampler.prime(self.lifecycle.probes(), bed.link_readings())
        self.glance_sampler.prime(self.lifecycle.probes(), bed.link_readings())
        start_at = time.monotonic() + 0.3
        self.clock = WallClock(origin=start_at)
        bed.start_load(start_at, requests_csv)
        if s.probe is not None:
            bed.write_targets(self.instances.values())
            probes_csv = self.run_dir / "probes.csv"
            self.client_log.follow_probes(probes_csv)
            bed.start_prober(start_at, probes_csv)
        self._last_obs = 0.0
        self._state = "started"

    # -- Environment protocol ----------------------------------------------------------------
    def take_requests(self) -> list[RequestRecord]:
        return self.client_log.take_requests()

    def _check_alive(self) -> None:
        for name, proc in (("loadgen", self.testbed.loadgen), ("prober", self.testbed.prober)):
            if proc is not None and not proc.alive() and proc.popen.returncode != 0:
                raise ComponentDiedError(
                    name, f"exited ({proc.popen.returncode}): {proc.log_tail()}"
                )
        self.lifecycle.check_alive()

    def observe(self) -> Snapshot:
        self._require_started("observe")
        self._check_alive()
        now = self.clock.now()
        interval = now - self._last_obs
        self._last_obs = now
        done = self.client_log.completed(now)
        extra = self.client_log.probe_results(now)
        for iid, inst in self.instances.items():
            if inst.apache is not None:
                extra.setdefault(iid, {}).update(inst.apache.extra())
        lb = {}
        if self.runtime is not None:
            lb = {s.server: s for s in self.runtime.show_stat() if s.backend == BACKEND}
        snap = self.sampler.sample(
            now, interval, self.lifecycle.probes(), lb, done, self.testbed.link_readings(), extra
        )
        self.lifecycle.settle(now, lb)
        self.glance_sampler.prime(self.lifecycle.probes(), self.testbed.link_readings())
        self._last_glance = now
        return snap

    def glance(self) -> Snapshot:
        """The window since the last glance or observe, without closing observe's interval: the
        client side's requests and probe downloads completed in it (peeked, left for observe)
        and the counters against a second sampler's readings, primed at every observe."""
        self._require_started("glance")
        self._check_alive()
        now = self.clock.now()
        since, self._last_glance = self._last_glance, now
        done = self.client_log.completed_between(since, now)
        extra = self.client_log.probes_between(since, now)
        lb = {}
        if self.runtime is not None:
            lb = {s.server: s for s in self.runtime.show_stat() if s.backend == BACKEND}
        return self.glance_sampler.sample(
            now, now - since, self.lifecycle.probes(), lb, done, self.testbed.link_readings(), extra
        )

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out each action; if any cannot be (an unknown instance, a refusal by HAProxy
        or the cgroups), raise ``ActionError`` naming each of them (the others stay applied)."""
        self._require_started("apply")
        rt = self.lifecycle.runtime()
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
            inst = self.lifecycle.get(a.instance_id, "SetWeight")
            if inst.state != "booting":
                rt.set_weight(BACKEND, a.instance_id, a.weight)
            inst.weight = a.weight
        elif isinstance(a, SetMaxConn):
            inst = self.lifecycle.get(a.instance_id, "SetMaxConn")
            before = inst.maxconn
            inst.maxconn = a.maxconn
            self._set_lb_maxconn(rt, inst, lambda: setattr(inst, "maxconn", before))
        elif isinstance(a, RemoveInstance):
            self.lifecycle.remove(a, self.clock.now())
        elif isinstance(a, AddInstance):
            self.lifecycle.add(a, self.clock.now())
        elif isinstance(a, SetCpuCap):
            inst = self.lifecycle.get(a.instance_id, "SetCpuCap")
            set_cpu_cap(self.layout, inst.group.name, a.cpus)
        elif isinstance(a, ReconfigureServer):
            inst = self.lifecycle.get(a.instance_id, "ReconfigureServer")
            if inst.apache is None:
                raise action_problem(
                    "ReconfigureServer",
                    f"{inst.spec.server} instances have no run-time settings to change",
                )
            before = inst.apache.online_workers
            inst.apache.reconfigure(a.settings, a.graceful)
            if inst.apache.online_workers != before:
                undo = lambda: setattr(inst.apache, "online_workers", before)  # noqa: E731
                self._set_lb_maxconn(rt, inst, undo)

    def _set_lb_maxconn(
        self, rt: HAProxyRuntime, inst: LabInstance, undo: Callable[[], None]
    ) -> None:
        """HAProxy's maxconn for ``inst`` as it now stands (a booting instance gets it when
        it joins); if HAProxy refuses, ``undo`` puts the instance's caps back."""
        if inst.state == "booting":
            return
        try:
            rt.set_maxconn(BACKEND, inst.spec.id, inst.lb_maxconn or 0)
        except (InputError, ComponentError):
            undo()
            raise

    def trigger(self, event: Event) -> None:
        self._require_started("trigger")
        self.testbed.trigger(event, self.clock.now())

    def close(self) -> None:
        """Stop everything and remove every trace of the run; safe to call twice, and before
        or after a failed start. From then on the environment refuses to observe or act."""
        if self._state == "closed":
            return
        self._state = "closed"
        self.testbed.teardown()

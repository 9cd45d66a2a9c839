"""Checks made before a lab run starts anything: root, binaries, CPUs, cgroups. Every problem is
reported at once, naming the scenario key it concerns."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from quell.errors import InputError, PrerequisiteError, Problem
from quell.lab.apache import APACHE_BINARY, MAX_PHP_CHILDREN, MAX_WORKING_SET_BYTES, PHP_FPM_BINARY
from quell.scenario.model import Scenario
from quell.scenario.schedule import build_population, build_schedule
from quell.workload.schedule import RequestSchedule

BASE_BINARIES = ("ip", "tc", "haproxy", "taskset", "python3")
VIDEO_DIR = re.compile(r"^/v\d+/")
"""Where a video workload's chunks are served (``quell.workload.sessions``)."""
ANTAGONIST_BINARY = {
    "stress-ng": "stress-ng",
    "iperf3": "iperf3",
    "fio": "fio",
    "clamscan": "clamscan",
}
MAX_KEPT_ALIVE_USERS = 20_000
"""Closed-loop users on kept-alive connections the lab takes: each holds a socket in the load
generator and two in HAProxy, within the run's 65 536 descriptors per process."""
SERVER_BINARIES = {
    "lighttpd": ("lighttpd",),
    "nginx": ("nginx",),
    "apache": (APACHE_BINARY, PHP_FPM_BINARY),
}


def apache_problems(scenario: Scenario) -> list[Problem]:
    """What the lab cannot give apache instances: more php-fpm children or a larger working
    set than this machine's memory takes (``quell.lab.apache``)."""
    problems: list[Problem] = []
    for k, inst in enumerate(scenario.instances):
        if inst.apache is not None and inst.apache.php_max_children > MAX_PHP_CHILDREN:
            problems.append(
                Problem(
                    f"instances[{k}].apache.php_max_children",
                    f"{inst.apache.php_max_children} is over the lab's {MAX_PHP_CHILDREN}",
                )
            )
    for k, page in enumerate(scenario.pages):
        if page.working_set_bytes > MAX_WORKING_SET_BYTES:
            problems.append(
                Problem(
                    f"pages[{k}].working_set_bytes",
                    f"{page.working_set_bytes} is over the lab's {MAX_WORKING_SET_BYTES}",
                )
            )
    return problems


def _cpu_range(cpus: set[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def scenario_problems(
    scenario: Scenario,
    available_cpus: set[int],
    which: Callable[[str], str | None] = shutil.which,
) -> list[Problem]:
    problems: list[Problem] = []
    for b in BASE_BINARIES:
        if which(b) is None:
            problems.append(Problem("", f"{b} is not installed (run `make install`)"))
    servers = [(f"instances[{k}]", inst.server) for k, inst in enumerate(scenario.instances)]
    if scenario.scaling is not None:
        servers.append(("scaling", scenario.scaling.server))
    for where, server in servers:
        for b in SERVER_BINARIES[server]:
            if which(b) is None:
                problems.append(Problem(f"{where}.server", f"{b} is not installed"))
    problems += apache_problems(scenario)
    for k, ant in enumerate(scenario.antagonists):
        binary = ANTAGONIST_BINARY[ant.kind]
        if which(binary) is None:
            problems.append(Problem(f"antagonists[{k}].kind", f"{binary} is not installed"))

    def check_cpus(where: str, cpus: Sequence[int] | None) -> None:
        for c in cpus or ():
            if c not in available_cpus:
                problems.append(
                    Problem(
                        where,
                        f"CPU {c} does not exist here (available: {_cpu_range(available_cpus)})",
                    )
                )

    for k, host in enumerate(scenario.hosts):
        check_cpus(f"hosts[{k}].cpus", host.cpus)
    for k, inst in enumerate(scenario.instances):
        check_cpus(f"instances[{k}].cpus", inst.cpus)
    for k, ant in enumerate(scenario.antagonists):
        check_cpus(f"antagonists[{k}].cpus", ant.cpus)
    check_cpus("workload.cpus", scenario.workload.cpus)
    check_cpus("load_balancer.cpus", scenario.load_balancer.cpus)
    if scenario.workload.sessions is not None:
        for k, f in enumerate(scenario.files):
            if VIDEO_DIR.match(f.path):
                problems.append(
                    Problem(
                        f"files[{k}].path",
                        f"{f.path!r} is under /v<number>/, where the lab serves the video chunks",
                    )
                )
    pop = build_population(scenario)
    if pop is not None and pop.keepalive and pop.users > MAX_KEPT_ALIVE_USERS:
        problems.append(
            Problem(
                "workload.arrival.users",
                f"the lab runs at most {MAX_KEPT_ALIVE_USERS} users on kept-alive connections",
            )
        )
    if len(scenario.instances) > 2000:
        problems.append(Problem("instances", "the lab supports at most 2000 instances"))
    return problems


def preflight(
    scenario: Scenario,
    scenario_dir: Path,
    source: str,
    euid: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> RequestSchedule | None:
    """Raise before anything starts if this machine cannot run the scenario. Returns the
    request schedule it built to check it (a bad trace file fails here), for the run to
    replay; ``None`` for closed-loop users, who have none."""
    problems = scenario_problems(scenario, set(os.sched_getaffinity(0)), which)
    if problems:
        raise InputError(source, problems)
    schedule = (
        build_schedule(scenario, scenario_dir) if build_population(scenario) is None else None
    )
    if (os.geteuid() if euid is None else euid) != 0:
        raise PrerequisiteError(
            "the lab must run as root", "network namespaces, cgroups, tc and HAProxy"
        )
    if any(inst.instrument for inst in scenario.instances):
        from quell.core.extras import require

        require(["pandas"], "instrument: true: the per-request records of a lab run", "lab")
    if scenario.attribution is not None and scenario.attribution.ebpf:
        from quell.instrument import bpf

        found = bpf.probe()
        if not found.ok:
            raise PrerequisiteError(str(found.reason), "attribution.ebpf: the eBPF run-queue split")
    return schedule

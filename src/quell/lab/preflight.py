"""Checks made before a lab run starts anything: root, binaries, CPUs, cgroups. Every problem is
reported at once, naming the scenario key it concerns."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from quell.errors import InputError, PrerequisiteError, Problem
from quell.lab.servers import SERVERS
from quell.scenario.model import Scenario
from quell.scenario.schedule import build_population, build_schedule

BASE_BINARIES = ("ip", "tc", "haproxy", "taskset", "python3")
VIDEO_DIR = re.compile(r"^/v\d+/")
"""Where a video workload's chunks are served (``quell.workload.sessions``)."""
ANTAGONIST_BINARY = {"stress-ng": "stress-ng", "iperf3": "iperf3", "fio": "fio"}
MAX_KEPT_ALIVE_USERS = 20_000
"""Closed-loop users on kept-alive connections the lab takes: each holds a socket in the load
generator and two in HAProxy, within the run's 65 536 descriptors per process."""


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
    for k, inst in enumerate(scenario.instances):
        if inst.server not in SERVERS:
            problems.append(
                Problem(f"instances[{k}].server", f"the lab cannot run {inst.server} yet")
            )
        elif which(inst.server) is None:
            problems.append(Problem(f"instances[{k}].server", f"{inst.server} is not installed"))
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
) -> None:
    """Raise before anything starts if this machine cannot run the scenario."""
    problems = scenario_problems(scenario, set(os.sched_getaffinity(0)), which)
    if problems:
        raise InputError(source, problems)
    if build_population(scenario) is None:
        build_schedule(scenario, scenario_dir)  # a bad trace file fails here, before any start
    if (os.geteuid() if euid is None else euid) != 0:
        raise PrerequisiteError(
            "the lab must run as root", "network namespaces, cgroups, tc and HAProxy"
        )

"""Antagonists: the noisy neighbours. stress-ng (CPU, cache and memory thrash), iperf3 through a
host's shared link, fio for disk. Each command is bounded by its own timeout as well as by the
supervisor, so none outlives the run even if the runner is killed."""

from __future__ import annotations

import math
from pathlib import Path

from quell.scenario.model import Fio, Iperf3, StressNg

IPERF_BASE_PORT = 5201


def stress_ng_argv(ant: StressNg, timeout_s: float) -> list[str]:
    argv = ["stress-ng", f"--{ant.stressor}", str(ant.workers)]
    for key, value in ant.options.items():
        argv += [f"--{key}", str(value)]
    return [*argv, "--timeout", f"{max(1, math.ceil(timeout_s))}s", "--metrics-brief"]


def iperf3_server_argv(bind_addr: str, port: int) -> list[str]:
    return ["iperf3", "-s", "-B", bind_addr, "-p", str(port)]


def iperf3_client_argv(ant: Iperf3, server_addr: str, port: int, timeout_s: float) -> list[str]:
    # -R: the server (on the antagonist's host) sends, so the bulk traffic leaves through the
    # host's shaped uplink, where the instances' responses leave too.
    argv = ["iperf3", "-c", server_addr, "-p", str(port), "-R", "-P", str(ant.streams)]
    if ant.bitrate_mbit is not None:
        argv += ["-b", f"{ant.bitrate_mbit}M"]
    return [*argv, "-t", str(max(1, math.ceil(timeout_s))), "--connect-timeout", "3000"]


def fio_argv(ant: Fio, work_dir: Path, timeout_s: float) -> list[str]:
    return [
        "fio",
        f"--name=quell-{ant.id}",
        f"--filename={work_dir / f'{ant.id}.dat'}",
        f"--size={ant.size_mb}M",
        f"--rw={ant.rw}",
        f"--bs={ant.block_size}",
        f"--direct={1 if ant.direct else 0}",
        "--ioengine=libaio",
        f"--iodepth={ant.iodepth}",
        "--time_based",
        f"--runtime={max(1, math.ceil(timeout_s))}",
    ]

"""Antagonists: the noisy neighbours. stress-ng (CPU, cache and memory thrash), iperf3 through a
host's shared link, fio for disk, clamav's clamscan as a heavy job that ends by itself. Each
command is bounded by its own timeout as well as by the supervisor, so none outlives the run
even if the runner is killed."""

from __future__ import annotations

import gzip
import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quell.core.rng import component_rng
from quell.scenario.model import ClamScan, Fio, Iperf3, StressNg

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


# -- clamscan: a data set and a signature database of its own ---------------------------------
SIGNATURE_NAME = "Quell.Test.Marker"
LARGE_SHARE = 0.5
"""Of ``data_mb``: in 1 % of the files, random bytes (clamscan reads and hashes them)."""
TEXT_SHARE = 0.2
GZIP_SHARE = 0.1
"""The rest (0.2) is small random files; the gzip archives (of text) make clamscan unpack."""


def write_clamscan_data(ant: ClamScan, out: Path, seed: int) -> Path:
    """The data set and the database for ``ant`` under ``out``; returns the database file.

    ``data_mb`` MiB in ``ant.files`` files: 1 % large random files holding half of it, 20 %
    text in 20 % of the files, 10 % as gzip archives of text in 5 % of them, small random
    files for the rest. The database holds a body signature (a pattern no file contains: the
    scan finds nothing and exits 0) and the MD5 signature of one small file that is not among
    the data, so clamscan loads a real database of both kinds."""
    rng = component_rng(seed, f"lab/clamscan/{ant.id}")
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    total = ant.data_mb << 20
    n_large = max(1, ant.files // 100)
    n_gzip = max(1, ant.files // 20)
    n_text = max(1, ant.files // 5)
    n_small = max(0, ant.files - n_large - n_gzip - n_text)
    words = np.array([b"quell", b"request", b"latency", b"neighbour", b"scan", b"core", b"cache"])

    def text(size: int) -> bytes:
        picked = words[rng.integers(0, len(words), size=size // 6 + 1)]
        return b" ".join(picked.tolist())[:size]

    def write(kind: str, count: int, share: float, make: Callable[[int], bytes]) -> None:
        each = max(1, int(total * share) // max(1, count))
        sub = data / kind
        sub.mkdir(exist_ok=True)
        for k in range(count):
            body = make(each)
            name = sub / f"{kind}-{k:05d}{'.gz' if kind == 'gzip' else ''}"
            # mtime 0: the same seed writes the same bytes whenever it runs
            packed = gzip.compress(body, compresslevel=1, mtime=0) if kind == "gzip" else body
            name.write_bytes(packed)

    write("large", n_large, LARGE_SHARE, lambda size: rng.bytes(size))
    write("text", n_text, TEXT_SHARE, text)
    write("gzip", n_gzip, GZIP_SHARE, text)
    small_share = 1.0 - LARGE_SHARE - TEXT_SHARE - GZIP_SHARE
    write("small", n_small, small_share, lambda size: rng.bytes(size))
    marker = rng.bytes(24).hex()
    db = out / "quell.ndb"
    db.write_text(f"{SIGNATURE_NAME}:0:*:{marker}\n")
    absent = rng.bytes(4096)
    (out / "quell.hdb").write_text(
        f"{hashlib.md5(absent).hexdigest()}:{len(absent)}:{SIGNATURE_NAME}.Hash\n"
    )
    return db


def clamscan_argv(out: Path, timeout_s: float) -> list[str]:
    """One recursive scan of ``out``'s data with its own database only, bounded by ``timeout``
    (clamscan has no time limit of its own)."""
    return [
        "timeout",
        f"{max(1, math.ceil(timeout_s))}s",
        "clamscan",
        "-r",
        "--infected",
        "--no-summary",
        "-d",
        str(out / "quell.ndb"),
        "-d",
        str(out / "quell.hdb"),
        str(out / "data"),
    ]

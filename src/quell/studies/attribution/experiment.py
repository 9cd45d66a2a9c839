"""The attribution experiments on this machine: the instrumented service
(``quell.studies.attribution.service``) pinned to one CPU in a cgroup of its own, stress-ng
antagonists pinned to the same CPU in another cgroup, one run per cell, each run's per-request
logs, PSI samples (system and the service's cgroup) and cell in a run directory.

Every process it starts carries the run tag (``QUELL_RUN_TAG``) and its cgroups the tag's names,
so ``quell lab clean`` finds what a killed run left; a run ends its processes by their ids and
removes its cgroups whatever happens. Runs start processes on this machine: run under the lab
lock.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from quell.attribute.features import PSI_KEYS
from quell.core.files import write_json
from quell.errors import ComponentError
from quell.instrument.token import rq_map_inheritance
from quell.lab.antagonists import (
    clamscan_argv,
    fio_argv,
    iperf3_client_argv,
    iperf3_server_argv,
    write_clamscan_data,
)
from quell.lab.cgroups import Group, create_group, remove_group
from quell.lab.tag import ENV_VAR, RunTag
from quell.scenario.model import ClamScan, Fio, Iperf3
from quell.signals.cgroup import CgroupLayout, detect_layout
from quell.signals.procfs import read_pressure

SERVICE_MODULE = "quell.studies.attribution.service"


@dataclass(frozen=True)
class Cell:
    """One run: a schedule seed, the service's worker processes, the antagonists (a stress-ng
    stressor; ``antagonist_workers`` tenants, each one stress-ng worker in a cgroup of its own,
    as the seed's other guests; none when 0) and how heavy the requests are."""

    name: str
    seed: int
    workers: int = 1
    stressor: str = "cpu"
    antagonist_workers: int = 0
    cpu_scale: float = 1.0
    requests: int = 3000
    scan_mb: int = 0
    """With more than 0: a clamav scan of that many MiB (the lab's ``clamscan`` neighbour, in a
    cgroup of its own on the service's CPU) starts every ``scan_period_s`` (Fig. 4)."""
    scan_period_s: float = 10.0
    tenant_load_pct: int = 100
    """Below 100: each ``cpu`` tenant keeps its CPU busy that share of the time
    (``stress-ng --cpu-load``), a light background rather than a hog (Fig. 4's low contention)."""

    @property
    def clean(self) -> bool:
        return self.antagonist_workers == 0 and self.scan_mb == 0


class PeriodicScan:
    """Starts the cell's clamscan at 0, P, 2P… (a scan still running delays the next) in a
    thread of its own until stopped; keeps each scan's start and end on CLOCK_MONOTONIC."""

    def __init__(self, argv: list[str], period_s: float, env: dict[str, str]) -> None:
        self.argv = argv
        self.period_s = period_s
        self.env = env
        self.spans: list[tuple[int, int]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        next_s = time.monotonic()
        while not self._stop.is_set():
            t0 = time.monotonic_ns()
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            while self.proc.poll() is None and not self._stop.is_set():
                self._stop.wait(0.02)
            self.spans.append((t0, time.monotonic_ns()))
            next_s += self.period_s
            self._stop.wait(max(0.0, next_s - time.monotonic()))

    def __enter__(self) -> PeriodicScan:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.proc is not None:
            _stop([self.proc])

    def write(self, path: Path) -> None:
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["start_ns", "end_ns"])
            w.writerows(self.spans)


class PsiSampler:
    """Samples the PSI totals every ``period_s`` on CLOCK_MONOTONIC (the records' clock) in a
    thread of its own until stopped."""

    def __init__(self, files: dict[str, Path], period_s: float = 0.05) -> None:
        self.files = files
        self.period_s = period_s
        self.rows: list[list[int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        row = [time.monotonic_ns()]
        for path in self.files.values():
            p = read_pressure(path)
            row.append(-1 if p is None else p.some_total_us)
        self.rows.append(row)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> PsiSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()

    def write(self, path: Path) -> None:
        keep = [i for i, _ in enumerate(self.files) if all(r[i + 1] >= 0 for r in self.rows)]
        names = list(self.files)
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["time_ns", *(names[i] for i in keep)])
            for r in self.rows:
                w.writerow([r[0], *(r[i + 1] for i in keep)])


def _in_group(group: Group, argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first puts itself into ``group`` (so every child it forks
    starts there)."""
    joins = "; ".join(f"echo $$ > {shlex.quote(str(p))}" for p in group.procs_files)
    return ["/bin/sh", "-c", f"{joins}; exec {shlex.join(argv)}"]


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


IPERF3_BASE_PORT = 5301
FIO_FILE_MB = 64


def tenant_argvs(
    kind: str, k: int, cpu: int, work_dir: Path, timeout_s: float, load_pct: int = 100
) -> list[list[str]]:
    """The processes of tenant ``k`` of ``kind``, pinned to ``cpu`` and bounded by ``timeout_s``:
    one stress-ng worker of that stressor; ``fio``, random 4 KiB reads and writes with direct
    I/O on a file of its own (the disk's interrupts and the submitting thread's CPU); or
    ``iperf3``, a server and its client on loopback sending as fast as they can (the stack's
    soft interrupts run on the CPU, charged to whoever is running). ``load_pct`` below 100 makes a
    ``cpu`` tenant busy only that share of the time."""
    if load_pct < 100 and kind != "cpu":
        raise ValueError(f"a tenant's load below 100 % is for cpu tenants, not {kind}")
    pin = ["taskset", "-c", str(cpu)]
    if kind == "fio":
        work_dir.mkdir(parents=True, exist_ok=True)
        spec = Fio(kind="fio", id=f"t{k}", host="h", size_mb=FIO_FILE_MB, iodepth=16)
        return [[*pin, *fio_argv(spec, work_dir, timeout_s)]]
    if kind == "iperf3":
        port = IPERF3_BASE_PORT + k
        server = [*iperf3_server_argv("127.0.0.1", port), "-1"]
        client = iperf3_client_argv(
            Iperf3(kind="iperf3", id=f"t{k}", host="h", streams=1), "127.0.0.1", port, timeout_s
        )
        return [[*pin, *server], [*pin, *client]]
    argv = ["stress-ng", f"--{kind}", "1", "--taskset", str(cpu)]
    if load_pct < 100:
        argv += ["--cpu-load", str(load_pct)]
    return [[*argv, "--timeout", f"{max(1, int(timeout_s))}s"]]


def deadline_for(requests: int) -> float:
    """A run's deadline: room for its requests at 30 ms each, far slower than any cell serves
    (the slowest measured took 8 ms a request)."""
    return 60.0 + 0.03 * requests


def run_cell(
    cell: Cell,
    out: Path,
    cpu: int,
    tag: RunTag,
    layout: CgroupLayout | None = None,
    deadline_s: float | None = None,
    rq_threads_fd: int | None = None,
) -> Path:
    """Run ``cell`` into ``out/cell.name`` (logs/, psi.csv, cell.json); returns the directory.
    With ``rq_threads_fd`` (the attached eBPF split's per-thread map) the service's workers
    inherit it, and their records carry the wait behind other cgroups and the preemptions by
    them."""
    layout = layout or detect_layout()
    deadline_s = deadline_for(cell.requests) if deadline_s is None else deadline_s
    run_dir = out / cell.name
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for old in logs.glob("*.qtlog"):
        old.unlink()
    env = dict(os.environ, QUELL_TOKEN_LOG_DIR=str(logs), **{ENV_VAR: tag.value})
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    groups = [create_group(layout, tag.name(f"attr-svc-{cell.name}"), [cpu])]
    svc = groups[0]
    procs: list[subprocess.Popen[bytes]] = []
    started = time.time()
    try:
        for k in range(cell.antagonist_workers):
            ant = create_group(layout, tag.name(f"attr-ant{k}-{cell.name}"), [cpu])
            groups.append(ant)
            argvs = tenant_argvs(
                cell.stressor, k, cpu, run_dir / "tenants", deadline_s + 10, cell.tenant_load_pct
            )
            for i, argv in enumerate(argvs):
                if i > 0:
                    time.sleep(0.3)  # an iperf3 server listens before its client connects
                procs.append(
                    subprocess.Popen(
                        _in_group(ant, argv),
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )
                )
        if procs:
            time.sleep(1.0)
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                err = (dead[0].stderr.read() if dead[0].stderr else b"").decode(errors="replace")
                what = cell.stressor if cell.stressor in ("fio", "iperf3") else "stress-ng"
                raise ComponentError(what, f"a tenant exited at once: {err.strip()[-300:]}")
        files = {
            "psi_cpu_some_us": Path("/proc/pressure/cpu"),
            "psi_mem_some_us": Path("/proc/pressure/memory"),
            "psi_io_some_us": Path("/proc/pressure/io"),
        }
        if layout.unified is not None:
            base = layout.unified / tag.name(f"attr-svc-{cell.name}")
            files |= {
                "cgroup_psi_cpu_some_us": base / "cpu.pressure",
                "cgroup_psi_mem_some_us": base / "memory.pressure",
                "cgroup_psi_io_some_us": base / "io.pressure",
            }
        assert set(files) <= set(PSI_KEYS)
        workers = []
        scans: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if cell.scan_mb > 0:
            spec = ClamScan(kind="clamscan", id="scan", host="h", data_mb=cell.scan_mb)
            write_clamscan_data(spec, run_dir / "clam", cell.seed)
            scan_group = create_group(layout, tag.name(f"attr-scan-{cell.name}"), [cpu])
            groups.append(scan_group)
            argv = ["taskset", "-c", str(cpu), *clamscan_argv(run_dir / "clam", deadline_s)]
            scans = PeriodicScan(_in_group(scan_group, argv), cell.scan_period_s, env)
        rq_env, rq_fds = rq_map_inheritance(rq_threads_fd)
        with PsiSampler(files) as sampler, scans:
            for index in range(cell.workers):
                argv = [
                    sys.executable, "-m", SERVICE_MODULE, "--seed", str(cell.seed),
                    "--requests", str(cell.requests), "--workers", str(cell.workers),
                    "--index", str(index), "--cpu-scale", str(cell.cpu_scale),
                    "--deadline-s", str(deadline_s),
                ]  # fmt: skip
                worker = subprocess.Popen(
                    ["taskset", "-c", str(cpu), *_in_group(svc, argv)],
                    env=env | rq_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=rq_fds,
                )
                workers.append(worker)
                procs.append(worker)
            served = 0
            for w in workers:
                try:
                    stdout, stderr = w.communicate(timeout=deadline_s + 30)
                except subprocess.TimeoutExpired:
                    raise ComponentError("service", "a worker overran its deadline") from None
                if w.returncode != 0:
                    raise ComponentError("service", stderr.decode(errors="replace")[-500:])
                served += int(stdout.decode().split()[-1])
        sampler.write(run_dir / "psi.csv")
        if isinstance(scans, PeriodicScan):
            scans.write(run_dir / "scans.csv")
    finally:
        _stop(procs)
        for group in groups:
            remove_group(group)
        shutil.rmtree(run_dir / "clam", ignore_errors=True)
        shutil.rmtree(run_dir / "tenants", ignore_errors=True)
    write_json(
        run_dir / "cell.json",
        asdict(cell)
        | {
            "load": cell.workers,
            "cpu": cpu,
            "served": served,
            "ebpf": rq_threads_fd is not None,
            "started": started,
            "seconds": round(time.time() - started, 2),
        },
    )
    return run_dir


def run_cells(
    cells: Sequence[Cell],
    out: Path,
    cpu: int,
    progress: Callable[[str], None] | None = None,
    deadline_s: float | None = None,
    rq_threads_fd: int | None = None,
) -> list[Path]:
    """Run each cell not already in ``out`` (a run directory with cell.json is done)."""
    note = progress or (lambda _: None)
    tag = RunTag.new()
    layout = detect_layout()
    done = []
    for cell in cells:
        if (out / cell.name / "cell.json").is_file():
            note(f"{cell.name}: already measured")
        else:
            t0 = time.monotonic()
            run_cell(cell, out, cpu, tag, layout, deadline_s, rq_threads_fd)
            doc = json.loads((out / cell.name / "cell.json").read_text())
            note(f"{cell.name}: {doc['served']} requests in {time.monotonic() - t0:.1f} s")
        done.append(out / cell.name)
    return done

"""``quell model multicore measure``: the measurement behind the multicore model.

A network-intensive static server (nginx, one worker pinned to each core, ``reuseport`` so the
kernel spreads connections evenly over the workers) in its own namespace, and a load generator
(wrk from Debian, one process pinned to each core, every request on a new connection) in
another, joined by one veth pair. The analogue of the paper's NIC is that pair: Receive Packet
Steering (``/sys/class/net/eth0/queues/rx-0/rps_cpus`` on both ends) decides which cores run the
receive soft interrupts. Two configurations:

* ``one``: all receive work on CPU 0 (the paper's single vNIC);
* ``spread``: receive work hashed over every core by RPS (the paper's multiple vNICs);
* ``local``: RPS off, receive work runs on the core that sent the packet (so on both cores,
  next to the worker or wrk process that caused it, without cross-core hand-offs).

At each request rate it records the per-core busy and soft-interrupt time (``/proc/stat``,
``/proc/softirqs``), the mean, deviation and count of the response times and the throughput,
and appends one row to ``points.csv`` as it goes. The load is bounded: each wrk runs for the
step's duration (``-d``) at a paced rate (exponential think times per connection, a closed loop
that approximates Poisson arrivals below saturation) and is killed if it overruns. Everything
carries the run tag, so teardown (and ``quell lab clean`` after a kill) removes it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quell.core.files import read_text
from quell.errors import ComponentError, InputError, PrerequisiteError, Problem
from quell.experiment.run import ProgressBar, no_progress, unique_run_dir
from quell.lab.network import Topology, netns_pids
from quell.lab.process import Managed, Placement, Supervisor, run_checked
from quell.lab.servers import write_docroot
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.models.multicore_fit import RatePoint
from quell.scenario.model import FileSpec
from quell.signals.procfs import read_processes_schedstat
from quell.signals.softirq import core_usage, read_core_sample

SERVER_ADDR = "10.77.250.1"
CLIENT_ADDR = "10.77.250.2"
CONFIGS = ("one", "spread", "local")
BINARIES = ("ip", "nginx", "wrk", "taskset")
POINTS_FILE = "points.csv"
PLAN_FILE = "plan.json"
POINT_FIELDS = (
    "config",
    "interrupt_cores",
    "rate_rps",
    "throughput_rps",
    "mean_response_s",
    "response_sd_s",
    "responses",
    "errors",
    "util_per_core",
    "softirq_per_core",
    "net_rx_per_s",
    "server_cpu",
    "client_cpu",
    "foreign_cpu",
    "attempt",
)
FOREIGN_LIMIT = 0.08
"""Busy time of processes outside the run, in cores, above which a step is measured again."""
RETRIES = 2

ProgressFn = Callable[[float, str], None]


@dataclass(frozen=True)
class MeasurePlan:
    """What to measure. Rates are the total offered request rates, req/s."""

    rates_rps: tuple[float, ...] = tuple(float(r) for r in range(1000, 10001, 1000))
    step_s: float = 6.0
    warmup_s: float = 1.5
    connections: int = 256
    file_bytes: int = 16384
    configs: tuple[str, ...] = CONFIGS
    seed: int = 1
    cores: tuple[int, ...] = field(default_factory=lambda: tuple(sorted(os.sched_getaffinity(0))))

    def problems(self) -> list[Problem]:
        out = []
        if not self.rates_rps:
            out.append(Problem("rates_rps", "give at least one request rate"))
        for k, r in enumerate(self.rates_rps):
            if not (math.isfinite(r) and 0 < r <= 100_000):
                out.append(Problem(f"rates_rps[{k}]", f"must be in (0, 100000] req/s, got {r}"))
        if not 3.0 <= self.step_s <= 60.0:
            out.append(Problem("step_s", f"must be in [3, 60] s, got {self.step_s}"))
        if not 0.5 <= self.warmup_s <= self.step_s - 1.5:
            out.append(Problem("warmup_s", "must be ≥ 0.5 s and leave ≥ 1.5 s of the step"))
        if not 2 * len(self.cores) <= self.connections <= 8192:
            out.append(
                Problem("connections", f"must be in [2·cores, 8192], got {self.connections}")
            )
        if not 1 <= self.file_bytes <= 10_000_000:
            out.append(Problem("file_bytes", f"must be in [1, 10^7], got {self.file_bytes}"))
        for c in self.configs:
            if c not in CONFIGS:
                out.append(
                    Problem("configs", f"unknown configuration {c!r} ({', '.join(CONFIGS)})")
                )
        if len(self.cores) < 2:
            out.append(Problem("cores", "needs at least 2 CPUs to spread interrupts over"))
        if self.total_s > 600:
            out.append(Problem("rates_rps", f"the run would take {self.total_s:.0f} s (max 600)"))
        return out

    @property
    def total_s(self) -> float:
        return len(self.configs) * len(self.rates_rps) * (self.step_s + 0.5)


def interrupt_cores_of(config: str, cores: int) -> int:
    return 1 if config == "one" else cores


def steered_cpus(config: str, cores: Sequence[int]) -> list[int]:
    """The cores RPS sends receive work to; none means RPS off (work stays where it arises)."""
    return {"one": list(cores[:1]), "spread": list(cores), "local": []}[config]


def rps_mask(cpus: Sequence[int]) -> str:
    return format(sum(1 << c for c in cpus), "x")


PACE_LUA = """-- quell: paced requests, each on a new connection; exponential think times per connection
local think_ms = tonumber(os.getenv("QUELL_THINK_MS"))
math.randomseed(tonumber(os.getenv("QUELL_SEED")))
wrk.headers["Connection"] = "close"
function delay()
  return -think_ms * math.log(1 - math.random())
end
function done(summary, latency, requests)
  io.write(string.format('QUELL {"requests":%d,"duration_us":%d,"mean_us":%.3f,' ..
    '"stdev_us":%.3f,"errors":%d}\\n', summary.requests, summary.duration, latency.mean,
    latency.stdev, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout))
end
"""


def nginx_config(base: Path, docroot: Path, workers: int) -> Path:
    logs = base / "logs"
    tmp = base / "tmp"
    for d in (logs, tmp):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o777)
    config = base / "nginx.conf"
    config.write_text(
        f"""daemon off;
master_process on;
worker_processes {workers};
worker_cpu_affinity auto;
pid {base}/nginx.pid;
error_log {logs}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    sendfile on;
    keepalive_timeout 0;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen {SERVER_ADDR}:80 reuseport backlog=4096;
        root {docroot};
    }}
}}
"""
    )
    return config


def combine_wrk(results: Sequence[dict[str, float]]) -> tuple[float, float, float, int, int]:
    """Throughput, mean and deviation of the response time, count and errors over several wrk
    processes that ran side by side (pooled mean and variance)."""
    n = sum(int(r["requests"]) for r in results)
    if n == 0:
        return 0.0, math.nan, math.nan, 0, sum(int(r["errors"]) for r in results)
    duration = max(r["duration_us"] for r in results) / 1e6
    mean = sum(r["requests"] * r["mean_us"] for r in results) / n
    second = sum(r["requests"] * (r["stdev_us"] ** 2 + r["mean_us"] ** 2) for r in results) / n
    sd = math.sqrt(max(0.0, second - mean**2))
    return n / duration, mean / 1e6, sd / 1e6, n, sum(int(r["errors"]) for r in results)


def _per_core(text: str) -> tuple[float, ...]:
    """A JSON list of per-core numbers, as ``points.csv`` keeps them."""
    values = json.loads(text)
    if not isinstance(values, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    ):
        raise ValueError(f"{text[:40]!r} is not a JSON list of numbers")
    return tuple(float(v) for v in values)


def read_points(run_dir: Path) -> list[tuple[str, int, RatePoint, int]]:
    """``points.csv``: (configuration, interrupt cores, point, errors) per measured rate."""
    path = run_dir / POINTS_FILE
    text = read_text(path, "measured points")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputError(str(path), [Problem("", f"not valid CSV: {exc}")]) from None
    out = []
    problems = []
    for k, row in enumerate(rows):
        try:
            point = RatePoint(
                rate_rps=float(row["rate_rps"]),
                throughput_rps=float(row["throughput_rps"]),
                mean_response_s=float(row["mean_response_s"]),
                response_sd_s=float(row["response_sd_s"]),
                responses=int(row["responses"]),
                util_per_core=_per_core(row["util_per_core"]),
                softirq_per_core=_per_core(row["softirq_per_core"]),
            )
            m = int(row["interrupt_cores"])
            if m < 1:
                raise ValueError(f"interrupt_cores is {m}, not at least 1")
            out.append((str(row["config"]), m, point, int(row["errors"])))
        except (KeyError, ValueError, TypeError) as exc:
            problems.append(Problem(f"row {k + 2}", f"malformed: {exc}"))
    if problems:
        raise InputError(str(path), problems)
    return out


class MulticoreLab:
    """Owns one measurement's namespaces, processes and files; ``close`` removes them all."""

    def __init__(self, plan: MeasurePlan, run_dir: Path, runtime_root: Path = RUNTIME_ROOT) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.tag = RunTag.new()
        self.work = self.tag.runtime_dir(runtime_root)
        self.supervisor = Supervisor(self.tag, run_dir / "logs")
        self.topology = Topology(self.tag)
        self.server: Managed | None = None
        self._closed = False

    @property
    def server_ns(self) -> str:
        return self.tag.name("mc-srv")

    @property
    def client_ns(self) -> str:
        return self.tag.name("mc-cli")

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "state.json").write_text(
            json.dumps({"tag": self.tag.value, "pid": os.getpid(), "run_dir": str(self.run_dir)})
        )
        topo = self.topology
        topo._add_ns(self.server_ns)
        topo._add_ns(self.client_ns)
        topo._veth(self.server_ns, "eth0", self.client_ns, "eth0")
        run_checked(
            ["ip", "-n", self.server_ns, "addr", "add", f"{SERVER_ADDR}/24", "dev", "eth0"],
            "network",
        )
        run_checked(
            ["ip", "-n", self.client_ns, "addr", "add", f"{CLIENT_ADDR}/24", "dev", "eth0"],
            "network",
        )
        # One connection per request: let the client reuse ports in TIME_WAIT and use the whole
        # port range, or connect() scans an exhausted range after a few thousand req/s·minutes.
        for key, value in (
            ("net.ipv4.tcp_tw_reuse", "1"),
            ("net.ipv4.ip_local_port_range", "1024 65535"),
        ):
            run_checked(
                ["ip", "netns", "exec", self.client_ns, "sysctl", "-q", "-w", f"{key}={value}"],
                "sysctl",
            )
        docroot = self.work / "www"
        write_docroot(
            docroot, [FileSpec(path="/f", size_bytes=self.plan.file_bytes)], self.plan.seed
        )
        (self.work).chmod(0o755)
        config = nginx_config(self.work / "nginx", docroot, len(self.plan.cores))
        self.server = self.supervisor.start(
            "nginx",
            [
                "nginx",
                "-p",
                str(self.work / "nginx"),
                "-c",
                str(config),
                "-e",
                str(self.work / "nginx" / "logs" / "error.log"),
            ],
            Placement(self.server_ns),
        )
        self._wait_listening()
        (self.work / "pace.lua").write_text(PACE_LUA)

    def _wait_listening(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        probe = f"exec 3<>/dev/tcp/{SERVER_ADDR}/80"
        while time.monotonic() < deadline:
            if self.server is not None and not self.server.alive():
                raise ComponentError("nginx", f"exited: {self.server.log_tail()}")
            done = run_checked_ok(["ip", "netns", "exec", self.client_ns, "bash", "-c", probe])
            if done:
                return
            time.sleep(0.1)
        raise ComponentError("nginx", f"not listening on {SERVER_ADDR}:80 after {timeout_s:g} s")

    def steer(self, cpus: Sequence[int]) -> None:
        """Receive Packet Steering on both ends of the pair: which cores run receive work."""
        mask = rps_mask(cpus)
        for ns in (self.server_ns, self.client_ns):
            run_checked(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "sh",
                    "-c",
                    f"echo {mask} > /sys/class/net/eth0/queues/rx-0/rps_cpus",
                ],
                "rps",
            )

    def measure_rate(self, config: str, rate_rps: float, step_index: int) -> dict[str, Any]:
        plan = self.plan
        cores = plan.cores
        per_conn = max(1, plan.connections // len(cores))
        think_ms = 1000.0 * per_conn * len(cores) / rate_rps
        duration = round(plan.step_s)
        procs = []
        for k, cpu in enumerate(cores):
            procs.append(
                self.supervisor.start(
                    f"wrk-{config}-{step_index}-{k}",
                    [
                        "wrk",
                        "-t1",
                        f"-c{per_conn}",
                        f"-d{duration}s",
                        "--timeout",
                        "5s",
                        "-s",
                        str(self.work / "pace.lua"),
                        f"http://{SERVER_ADDR}/f",
                    ],
                    Placement(self.client_ns, cpus=[cpu]),
                    env={
                        "QUELL_THINK_MS": repr(think_ms),
                        "QUELL_SEED": str(plan.seed * 1000 + step_index * 10 + k),
                    },
                )
            )
        t0 = time.monotonic()
        time.sleep(plan.warmup_s)
        server_pids = netns_pids(self.server_ns)
        client_pids = netns_pids(self.client_ns)
        mine = {*server_pids, *client_pids, os.getpid()}
        before = read_core_sample()
        run0 = (read_processes_schedstat(server_pids), read_processes_schedstat(client_pids))
        others0 = user_process_run_ns(mine)
        time.sleep(max(0.5, duration - plan.warmup_s - 0.7))
        after = read_core_sample()
        run1 = (read_processes_schedstat(server_pids), read_processes_schedstat(client_pids))
        others1 = user_process_run_ns(mine)
        usage = core_usage(before, after)
        server_cpu = (run1[0].run_ns - run0[0].run_ns) / 1e9 / usage.interval_s
        client_cpu = (run1[1].run_ns - run0[1].run_ns) / 1e9 / usage.interval_s
        # CPU of the machine's other user processes (other tenants) during the window.
        foreign = (
            sum(max(0, ns - others0.get(pid, 0)) for pid, ns in others1.items())
            / 1e9
            / usage.interval_s
        )
        deadline = t0 + duration + 10.0
        for proc in procs:
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        results = []
        for proc in procs:
            alive = proc.alive()
            self.supervisor.stop(proc)
            if alive:
                raise ComponentError("wrk", f"{proc.name} overran its {duration} s step")
            results.append(parse_wrk_log(proc.log_path.read_text(errors="replace"), proc.name))
        tput, mean_s, sd_s, n, errors = combine_wrk(results)
        n_cores = len(cores)
        return {
            "config": config,
            "interrupt_cores": interrupt_cores_of(config, n_cores),
            "rate_rps": rate_rps,
            "throughput_rps": tput,
            "mean_response_s": mean_s,
            "response_sd_s": sd_s,
            "responses": n,
            "errors": errors,
            "util_per_core": json.dumps([round(u, 6) for u in usage.busy]),
            "softirq_per_core": json.dumps([round(u, 6) for u in usage.softirq]),
            "net_rx_per_s": json.dumps(
                [round(u, 1) for u in usage.softirqs_per_s.get("NET_RX", ())]
            ),
            "server_cpu": round(server_cpu, 6),
            "client_cpu": round(client_cpu, 6),
            "foreign_cpu": round(foreign, 6),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        self.supervisor.stop_all()
        errors += self.topology.destroy()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.work)
        if errors:
            raise ComponentError("teardown", "; ".join(errors))


def user_process_run_ns(exclude: set[int], proc_root: Path = Path("/proc")) -> dict[int, int]:
    """Time on CPU (ns, all threads) of every user-space process but ``exclude``; kernel
    threads (empty command line), whose work here is the network's, are left out."""
    out = {}
    for entry in proc_root.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            if not (entry / "cmdline").read_bytes():
                continue
        except OSError:
            continue
        out[int(entry.name)] = read_processes_schedstat([int(entry.name)], proc_root).run_ns
    return out


def run_checked_ok(argv: Sequence[str]) -> bool:
    try:
        run_checked(argv, "probe", timeout_s=5.0)
    except ComponentError:
        return False
    return True


def parse_wrk_log(text: str, name: str) -> dict[str, float]:
    for line in reversed(text.splitlines()):
        if line.startswith("QUELL "):
            data: dict[str, float] = json.loads(line[len("QUELL ") :])
            return data
    raise ComponentError("wrk", f"{name} printed no result: {text[-400:]}")


def preflight(plan: MeasurePlan, which: Callable[[str], str | None] = shutil.which) -> None:
    problems = plan.problems()
    for b in BINARIES:
        if which(b) is None:
            problems.append(Problem("", f"{b} is not installed (run `make install`)"))
    if problems:
        raise InputError("multicore measurement", problems)
    if os.geteuid() != 0:
        raise PrerequisiteError("the lab must run as root", "network namespaces and RPS")


def run_measurement(
    plan: MeasurePlan,
    runs_dir: Path,
    progress: Callable[[], contextlib.AbstractContextManager[ProgressFn]],
) -> Path:
    """Measure every configuration at every rate; returns the run directory. Always tears
    down, also on SIGTERM/SIGHUP (through ``terminate_on_signals``)."""
    from quell.experiment.lab import raise_fd_limit
    from quell.lab.process import terminate_on_signals

    preflight(plan)
    raise_fd_limit()
    run_dir = unique_run_dir(runs_dir, "lab-multicore")
    run_dir.mkdir(parents=True)
    lab = MulticoreLab(plan, run_dir)
    plan_doc = {
        **asdict(plan),
        "run_tag": lab.tag.value,
        "machine": {"hostname": socket.gethostname(), "kernel": os.uname().release},
    }
    (run_dir / PLAN_FILE).write_text(json.dumps(plan_doc, indent=2) + "\n")
    with (
        terminate_on_signals(),
        progress() as report,
        (run_dir / POINTS_FILE).open("w", newline="") as out,
    ):
        writer = csv.DictWriter(out, fieldnames=POINT_FIELDS)
        writer.writeheader()
        out.flush()
        try:
            report(0.0, "starting")
            lab.start()
            done = 0.0
            step = 0
            for config in plan.configs:
                lab.steer(steered_cpus(config, plan.cores))
                for rate in plan.rates_rps:
                    report(done, f"{config} {rate:g}/s")
                    for attempt in range(RETRIES + 1):
                        row = lab.measure_rate(config, rate, step)
                        step += 1
                        if row["foreign_cpu"] <= FOREIGN_LIMIT or attempt == RETRIES:
                            break
                        report(done, "busy machine, again")
                        time.sleep(3.0)
                    writer.writerow({**row, "attempt": attempt})
                    out.flush()
                    done += plan.step_s + 0.5
                    report(done, f"{config} {rate:g}/s")
        finally:
            lab.close()
    return run_dir


def measure(
    rates_rps: Sequence[float] = (),
    step_s: float = 6.0,
    connections: int = 256,
    file_bytes: int = 16384,
    configs: Sequence[str] = (),
    runs_dir: Path = Path("runs"),
    progress: ProgressBar = lambda total_s, label: no_progress(),
) -> Path:
    """``quell model multicore measure``: ``run_measurement`` of the plan these give (the
    default rates and every configuration where none are given); the run directory."""
    defaults = MeasurePlan()
    plan = MeasurePlan(
        rates_rps=tuple(rates_rps) if rates_rps else defaults.rates_rps,
        step_s=step_s,
        connections=connections,
        file_bytes=file_bytes,
        configs=tuple(configs) if configs else CONFIGS,
    )
    return run_measurement(plan, runs_dir, lambda: progress(plan.total_s, "multicore"))

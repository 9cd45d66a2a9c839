"""The per-request instrumentation's overhead (docs/reference/attribution.md, "Instrumentation").

* **C calls** (``bench/attribution/qtbench.c``, compiled here with the library's sources): the
  median over 1,000 batches of 1,000 calls of the thread's CPU time per call (its own cost,
  whatever else the machine runs) of start+end, yield+resume (per call) and read,
  beside the peer "one raw snapshot" (the thread's CPU clock, a pread of its kept-open
  schedstat with sscanf, getrusage(RUSAGE_THREAD)) timed in the same batches, as a ratio;
  beside the previous library (``bench/attribution/quelltoken_prev.c``, which read all three
  on every call) and each part of the snapshot alone, in the same batches; on the path where
  each call follows a sleep (the thread was switched out: schedstat is read again); and per call
  over a request as an event loop serves it (a sleep, then start, yield, resume, yield, resume,
  end).
  With the per-thread log on (records written to a scratch folder). The CPU it runs on:
  ``QUELL_BENCH_CPU`` (default 1). Where the eBPF split loads (root), the same again with the
  split attached and its per-thread map inherited (every call also reads its thread's entry),
  and the ratio of the two runs' costs.
* **Python calls** (``quell.instrument.token`` through ctypes): the same, batches of 1,000,
  beside the raw snapshot through the same binding (``TokenLibrary.snapshot``).
* **lighttpd with and without the preload** (needs root for nothing, but starts real servers:
  run it under the lab lock, ``flock /tmp/quell-lab.lock make bench``): a fresh lighttpd
  1.4.69 on CPU 1 for each run, a 1.4 KB file on 127.0.0.1, one request per connection (as an
  instrumented server is fed), arms interleaved off, on, on, off, ... (4 runs each), under two
  loads on CPU 0:

  - ``open_loop``: one seeded Poisson schedule (1,500 requests a second for 20 s, seed 7)
    replayed by the lab's open-loop generator, the same requests at the same times in every run:
    the A/B on one seed;
  - ``wrk``: ``wrk -t1 -c32 -d8s --latency -H 'Connection: close'``, as fast as it goes, where
    the server is busy most of the time and each microsecond of its CPU shows as queueing.

  Per arm, p50 and p99 as the mean over its runs with a 95 % t interval, and the on - off
  difference with its Welch interval; beside them the server's own CPU time per request
  (``/proc/<pid>/stat``), the direct cost of the preload."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from quell.instrument import bpf, native
from quell.instrument.log import read_records
from quell.instrument.token import LOG_DIR_ENV, TokenLibrary, rq_map_inheritance
from quell.lab.loadgen import write_schedule
from quell.lab.request_log import parse_line

HERE = Path(__file__).resolve().parent
PORT = 18481
WRK_SECONDS = 8
RUNS_PER_ARM = 4
FILE_BYTES = 1400
WRK = ("taskset", "-c", "0", "wrk", "-t1", "-c32", "--latency")
OPEN_RATE_RPS = 1500
"""The open-loop arm's rate: the lab's generator, one connection a request, keeps it on one CPU."""
OPEN_SECONDS = 20
OPEN_SEED = 7
CPU = os.environ.get("QUELL_BENCH_CPU", "1")


def _compile(out: Path, *sources: Path, shared: bool = False) -> Path:
    argv = ["gcc", "-O2", "-pthread", "-I", str(native.NATIVE_DIR)]
    argv += ["-fPIC", "-shared"] if shared else []
    done = subprocess.run(
        [*argv, "-o", str(out), *map(str, sources), "-ldl"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return out


def c_calls(work: Path, rq_threads_fd: int | None = None) -> dict[str, Any]:
    """The C calls' costs; with ``rq_threads_fd`` the benchmark inherits the eBPF split's
    per-thread map, so every call also reads its thread's entry there."""
    exe = _compile(
        work / "qtbench",
        HERE / "attribution" / "qtbench.c",
        native.NATIVE_DIR / "quelltoken.c",
        HERE / "attribution" / "quelltoken_prev.c",
    )
    logs = work / "qtbench-logs"
    logs.mkdir()
    rq_env, rq_fds = rq_map_inheritance(rq_threads_fd)
    done = subprocess.run(
        ["taskset", "-c", CPU, str(exe), "1000"],
        capture_output=True,
        text=True,
        env={**os.environ, LOG_DIR_ENV: str(logs), **rq_env},
        timeout=600,
        pass_fds=rq_fds,
    )
    shutil.rmtree(logs)
    res: dict[str, Any] = json.loads(done.stdout)
    res["cpu"] = int(CPU)
    peer = res["raw_snapshot_ns"]
    for key, name in (
        ("start_end_ns_per_call", "start_end"),
        ("yield_resume_ns_per_call", "yield_resume"),
        ("read_ns", "read"),
    ):
        res[f"{name}_vs_raw_snapshot"] = round(res[key] / peer, 3)
        res[f"{name}_vs_previous"] = round(res[key] / res["previous"][key], 3)
    switch = res["after_a_switch"]
    switch["vs_previous"] = round(
        switch["start_end_ns_per_call"] / switch["previous_start_end_ns_per_call"], 3
    )
    request = res["request"]
    request["vs_previous"] = round(request["ns_per_call"] / request["previous_ns_per_call"], 3)
    return res


def _per_call(fn: Any, per_batch: int, calls_each: int) -> float:
    """The thread's CPU time per call over one batch (its own cost; wall time on a shared
    machine would count the other tenants' turns on the CPU)."""
    t0 = time.thread_time_ns()
    fn(per_batch)
    return (time.thread_time_ns() - t0) / (per_batch * calls_each)


def python_calls(lib_path: Path, batches: int = 300, per_batch: int = 1000) -> dict[str, Any]:
    lib = TokenLibrary(lib_path)
    held = lib.start(1, "/bench")

    def raw(n: int) -> None:
        for _ in range(n):
            lib.snapshot()

    def start_end(n: int) -> None:
        for i in range(n):
            lib.end(lib.start(i, "/bench"))

    def yield_resume(n: int) -> None:
        for _ in range(n):
            lib.yield_(held)
            lib.resume(held)

    def read(n: int) -> None:
        for _ in range(n):
            lib.read(held)

    start_end(3 * per_batch)  # warm up
    kinds = {"raw": (raw, 1), "se": (start_end, 2), "yr": (yield_resume, 2), "rd": (read, 1)}
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(batches):  # interleaved batches: a disturbance hits every kind alike
        for k, (fn, each) in kinds.items():
            samples[k].append(_per_call(fn, per_batch, each))
    lib.end(held)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "batches": batches,
        "calls_per_batch": per_batch,
        "raw_snapshot_ns": round(med["raw"], 1),
        "start_end_ns_per_call": round(med["se"], 1),
        "yield_resume_ns_per_call": round(med["yr"], 1),
        "read_ns": round(med["rd"], 1),
        "start_end_vs_raw_snapshot": round(med["se"] / med["raw"], 3),
        "yield_resume_vs_raw_snapshot": round(med["yr"] / med["raw"], 3),
        "read_vs_raw_snapshot": round(med["rd"] / med["raw"], 3),
    }


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert m, text
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_wrk(out: str) -> dict[str, float]:
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    done = re.search(r"^\s+(\d+) requests in", out, re.M)
    assert rps and done and set(pct) == {"50", "99"}, out
    return {
        "p50_ms": _ms(pct["50"]),
        "p99_ms": _ms(pct["99"]),
        "rps": float(rps.group(1)),
        "requests": int(done.group(1)),
    }


def _wait_listening(port: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"lighttpd did not listen on {port}")


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk(url: str) -> dict[str, Any]:
    wrk = subprocess.run(
        [*WRK, f"-d{WRK_SECONDS}s", "-H", "Connection: close", url],
        capture_output=True,
        text=True,
        timeout=WRK_SECONDS + 30,
    )
    return parse_wrk(wrk.stdout)


def _open_loop(work: Path, k: int) -> dict[str, Any]:
    """The seeded schedule replayed by the lab's open-loop generator (one connection per
    request, X-Request-Id sent), on CPU 0; p50 and p99 of what it measured."""
    out = work / f"open-{k}.csv"
    start = time.monotonic() + 1.0
    gen = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-m",
            "quell.lab.loadgen",
            "--schedule",
            str(work / "schedule.npz"),
            "--out",
            str(out),
            "--port",
            str(PORT),
            "--start-at",
            f"{start:.6f}",
            "--duration",
            str(OPEN_SECONDS),
            "--timeout",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=OPEN_SECONDS + 30,
    )
    if gen.returncode != 0:
        raise RuntimeError(f"the load generator failed: {gen.stderr[-500:]}")
    recs = [r for r in map(parse_line, out.read_text().splitlines()) if r is not None]
    lat = np.array([r.latency_s for r in recs if r.latency_s is not None and r.status == 200])
    out.unlink()
    return {
        "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 4),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 4),
        "rps": round(len(lat) / OPEN_SECONDS, 1),
        "requests": len(lat),
        "failed": len(recs) - len(lat),
    }


def one_run(work: Path, shim: Path | None, k: int, load: str) -> dict[str, Any]:
    env = dict(os.environ)
    logs = work / f"qtlog-{k}"
    if shim is not None:
        logs.mkdir()
        env |= {"LD_PRELOAD": str(shim), LOG_DIR_ENV: str(logs)}
    server = subprocess.Popen(
        ["taskset", "-c", "1", "lighttpd", "-D", "-f", str(work / "lighttpd.conf")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_listening(PORT)
        cpu_before = _cpu_seconds(server.pid)
        if load == "wrk":
            measured = _wrk(f"http://127.0.0.1:{PORT}/index.html")
        else:
            measured = _open_loop(work, k)
        cpu = _cpu_seconds(server.pid) - cpu_before
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    res: dict[str, Any] = {"preload": shim is not None, **measured}
    res["server_cpu_us_per_request"] = round(1e6 * cpu / max(measured["requests"], 1), 2)
    if shim is not None:
        records = read_records(logs)
        res["records"] = int((records["request_class"] == "/index.html").sum())
        res["median_cpu_us"] = round(float(records["cpu_ns"].median()) / 1e3, 1)
        res["median_wall_us"] = round(float(records["wall_ns"].median()) / 1e3, 1)
        shutil.rmtree(logs)
    return res


def _ci(values: list[float]) -> dict[str, float]:
    n = len(values)
    mean = statistics.fmean(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return {
        "mean": round(mean, 4),
        "ci95_low": round(mean - half, 4),
        "ci95_high": round(mean + half, 4),
    }


def _diff(on: list[float], off: list[float]) -> dict[str, float]:
    mo, mf = statistics.fmean(on), statistics.fmean(off)
    vo, vf = statistics.variance(on) / len(on), statistics.variance(off) / len(off)
    se = math.sqrt(vo + vf)
    dof = (vo + vf) ** 2 / (vo**2 / (len(on) - 1) + vf**2 / (len(off) - 1)) if se > 0 else 1.0
    half = stats.t.ppf(0.975, dof) * se
    d = mo - mf
    return {
        "on_minus_off": round(d, 4),
        "ci95_low": round(d - half, 4),
        "ci95_high": round(d + half, 4),
        "relative_pct": round(100 * d / mf, 2),
        "within_ci_or_3pct": bool(abs(d) <= half or abs(d) <= 0.03 * mf),
    }


def _write_schedule(work: Path) -> None:
    rng = np.random.default_rng(OPEN_SEED)
    times = np.cumsum(rng.exponential(1.0 / OPEN_RATE_RPS, int(OPEN_RATE_RPS * OPEN_SECONDS)))
    times = times[times < OPEN_SECONDS]
    write_schedule(
        work / "schedule.npz", times, np.zeros(len(times), dtype=np.int64), ["/index.html"]
    )


def _arms(runs: list[dict[str, Any]], order: list[bool]) -> dict[str, Any]:
    arms = {a: [r for r in runs if r["preload"] == (a == "on")] for a in ("off", "on")}
    out: dict[str, Any] = {"order": ["on" if o else "off" for o in order], "runs": runs}
    for metric in ("p50_ms", "p99_ms", "rps", "server_cpu_us_per_request"):
        on = [r[metric] for r in arms["on"]]
        off = [r[metric] for r in arms["off"]]
        out[metric] = {"off": _ci(off), "on": _ci(on), **_diff(on, off)}
    return out


def lighttpd_ab(work: Path, shim: Path) -> dict[str, Any]:
    """Both loads, each with its arms interleaved off, on, on, off, ...: the seeded open-loop
    schedule (``open_loop``, the acceptance's A/B on one seed) and wrk at saturation
    (``wrk``, where every microsecond of the server's CPU shows as queueing)."""
    www = work / "www"
    www.mkdir()
    (www / "index.html").write_bytes(os.urandom(FILE_BYTES))
    (work / "lighttpd.conf").write_text(
        f'server.document-root = "{www}"\nserver.bind = "127.0.0.1"\nserver.port = {PORT}\n'
        "server.max-worker = 0\nserver.max-connections = 4096\nserver.max-fds = 8192\n"
        'mimetype.assign = ("" => "application/octet-stream")\n'
    )
    _write_schedule(work)
    order = [bool(b) for b in [0, 1, 1, 0] * (RUNS_PER_ARM // 2)]
    out: dict[str, Any] = {
        "open_loop_settings": {
            "rate_rps": OPEN_RATE_RPS,
            "seconds": OPEN_SECONDS,
            "seed": OPEN_SEED,
        },
    }
    for load in ("open_loop", "wrk"):
        runs = [one_run(work, shim if on else None, k, load) for k, on in enumerate(order)]
        out[load] = _arms(runs, order)
    return out


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quell-bench-attr-") as tmp:
        work = Path(tmp)
        lib = _compile(work / "libquelltoken.so", native.NATIVE_DIR / "quelltoken.c", shared=True)
        shim = _compile(
            work / "libquell_lighttpd.so",
            native.NATIVE_DIR / "quell_lighttpd.c",
            native.NATIVE_DIR / "quelltoken.c",
            shared=True,
        )
        result: dict[str, Any] = {"c": c_calls(work), "python": python_calls(lib)}
        if bpf.probe().ok:  # the same calls reading the eBPF split's map too, and the ratio
            with bpf.attached() as split:
                mapped = c_calls(work, split.threads_fd())
            result["c_with_ebpf_map"] = mapped
            result["c_with_ebpf_map_vs_without"] = {
                key: round(mapped[key] / result["c"][key], 3)
                for key in ("start_end_ns_per_call", "yield_resume_ns_per_call", "read_ns")
            }
        if shutil.which("lighttpd") and shutil.which("wrk"):
            result["lighttpd"] = lighttpd_ab(work, shim)
        return result

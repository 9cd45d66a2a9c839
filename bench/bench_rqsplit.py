"""The eBPF run-queue split's cost (docs/reference/attribution.md, "The eBPF run-queue split").

Needs root, the program built (``make native``) and loadable, and stress-ng; starts real load,
so run it under the lab lock (``flock /tmp/quell-lab.lock make bench``). On CPU 0
(``QUELL_BENCH_BPF_CPU``): ``stress-ng --switch 1`` (two processes passing messages, so CPU 0
does little but context switches; in a v1 ``cpu`` group of the largest weight, so the
machine's other work takes well under 1 % of the CPU) for RUN_SECONDS per run, arms interleaved off, on, filtered,
filtered, on, off, ... (REPEATS runs each): "on" records every thread of the machine (the
heaviest use), "filtered" only one unrelated process's threads (the per-CPU accounting still
runs at every switch, as ``quell attribute rqsplit --pid`` does). Switches per second are the
stress-ng tree's own (voluntary + involuntary context switches from its rusage over its wall
time); the cost per switch is 1/rate(on) - 1/rate(off) on the saturated CPU; the ratio
rate(on)/rate(off) uses each arm's median. With ``kernel.bpf_stats_enabled`` on during the
program's runs, each program's run_time_ns / run_cnt from ``bpftool prog show`` (the sysctl is
restored afterwards)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from quell.instrument import bpf

CPU = os.environ.get("QUELL_BENCH_BPF_CPU", "0")
RUN_SECONDS = 2
REPEATS = 6
CPU_V1 = Path("/sys/fs/cgroup/cpu")
SHARES = 262144  # the largest weight: the machine's other work gets well under 1 % of the CPU
ORDER = ("off", "on", "filtered", "filtered", "on", "off")
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
PROGRAMS = ("on_switch", "on_wakeup", "on_wakeup_new")


def _switch_rate(group: Path | None) -> tuple[float, int]:
    """stress-ng --switch 1 on CPU (in ``group``): its tree's context switches per second, and
    their count."""

    def join() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(
        ["taskset", "-c", CPU, "stress-ng", "--switch", "1", "--timeout", f"{RUN_SECONDS}s"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=RUN_SECONDS + 30,
        preexec_fn=join,
    )
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    n = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    return n / wall, n


def _prog_stats() -> dict[str, dict[str, int]]:
    done = subprocess.run(
        ["bpftool", "--json", "prog", "show"], capture_output=True, text=True, timeout=30
    )
    out: dict[str, dict[str, int]] = {}
    for p in json.loads(done.stdout or "[]"):
        if p.get("name") in PROGRAMS and "run_cnt" in p:
            acc = out.setdefault(p["name"], {"run_time_ns": 0, "run_cnt": 0})
            acc["run_time_ns"] += int(p.get("run_time_ns", 0))
            acc["run_cnt"] += int(p["run_cnt"])
    return out


def run() -> dict[str, Any]:
    if os.geteuid() != 0:
        raise RuntimeError("the eBPF benchmark loads a kernel program and needs root")
    found = bpf.probe()
    if not found.ok:
        raise RuntimeError(f"the eBPF program cannot load here: {found.reason}")
    if shutil.which("stress-ng") is None or shutil.which("bpftool") is None:
        raise RuntimeError("needs stress-ng and bpftool")
    rates: dict[str, list[float]] = {"off": [], "on": [], "filtered": []}
    per_call: dict[str, dict[str, list[float]]] = {"on": {}, "filtered": {}}
    group: Path | None = None
    if CPU_V1.is_dir():
        group = CPU_V1 / f"quell-bpfbench-{os.getpid()}"
        group.mkdir()
        (group / "cpu.shares").write_text(str(SHARES))
    old_stats = STATS.read_text().strip()
    STATS.write_text("1")
    try:
        for _ in range(REPEATS // 2 + REPEATS % 2):
            for arm in ORDER:
                if len(rates[arm]) >= REPEATS:
                    continue
                if arm == "off":
                    rates[arm].append(_switch_rate(group)[0])
                    continue
                with bpf.attached(target_tgid=0 if arm == "on" else 1):
                    rates[arm].append(_switch_rate(group)[0])
                    for name, s in _prog_stats().items():
                        if s["run_cnt"]:
                            per_call[arm].setdefault(name, []).append(
                                s["run_time_ns"] / s["run_cnt"]
                            )
    finally:
        STATS.write_text(old_stats)
        if group is not None:
            for _ in range(50):
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    off = statistics.median(rates["off"])
    result: dict[str, Any] = {
        "cpu": int(CPU),
        "cgroup_shares": SHARES if group is not None else None,
        "run_seconds": RUN_SECONDS,
        "switches_per_second": {k: [round(r) for r in v] for k, v in rates.items()},
    }
    for arm in ("on", "filtered"):
        med = statistics.median(rates[arm])
        result[arm] = {
            "rate_ratio_to_off": round(med / off, 3),
            "ns_per_switch_added": round(1e9 / med - 1e9 / off),
            "bpf_stats_ns_per_call": {
                name: [round(x) for x in xs] for name, xs in sorted(per_call[arm].items())
            },
        }
    result["bpf_stats_enabled_restored"] = STATS.read_text().strip() == old_stats
    return result

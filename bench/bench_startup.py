"""Start-up: whole ``quell`` processes, from exec to exit, against ``python -c pass``.

Every command runs ``RUNS`` times after one warm-up run; the commands take turns (each round runs
each once, in the same order), so a slow moment of the machine falls on all of them alike. Per
command: median wall seconds (with min, max and every run), median CPU seconds, and the median
excess over the ``python -c pass`` of the same round. Goals: ``quell --help`` and ``quell scenario
check`` of a scenario without a model file ≤ 0.3 s; ``quell sim run scenarios/sim-mm1-1m.yaml``
(1M M/M/1-PS requests in 51 intervals; run store, summary and all) ≥ 10× faster than SimPy 4
simulating 1M M/M/1 requests (``bench/simpy_mm1.py``), the median of the ratios of the same
rounds. Reported with no goal: ``scenario check`` of the PRIMA demo (it loads and fits a model
bundle), and ``scenarios/sim-mm1-long.yaml``, the same million requests in 1,260 intervals.

Apart from the rounds: ``COMPILE_RUNS`` pairs of ``sim run`` processes, one compiling the event
core into an empty ``NUMBA_CACHE_DIR``, the next loading it from there."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
COMPILE_RUNS = 2
GOAL_S = 0.3
GOAL_RATIO = 10.0
REQUESTS = 1_000_000

PASS = "python -c pass"
HELP = "quell --help"
CHECK = "quell scenario check interference-smoke"
CHECK_MODEL = "quell scenario check prima/demo"
SIM = "quell sim run sim-mm1-1m"
SIM_LONG = "quell sim run sim-mm1-long"
SIMPY = "simpy M/M/1, 1M requests"


def _sim_check(mean_rt_ms: float) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        """The run simulated what it should: a million requests, the M/M/1 mean RT (±3 %)."""
        inst = json.loads(stdout.strip().splitlines()[-1])["phases"][0]["instances"]["i1"]
        if inst["requests"] != REQUESTS or abs(inst["mean_rt_ms"] / mean_rt_ms - 1) > 0.03:
            raise RuntimeError(f"unexpected sim run: {inst}")

    return check


def _commands(runs_dir: Path) -> dict[str, tuple[list[str], Callable[[str], None] | None]]:
    python = sys.executable
    quell = str(Path(python).with_name("quell"))
    sim = [quell, "sim", "run", "--json", "--runs-dir", str(runs_dir)]
    return {
        PASS: ([python, "-c", "pass"], None),
        HELP: ([quell, "--help"], None),
        CHECK: ([quell, "scenario", "check", "scenarios/interference-smoke.yaml"], None),
        CHECK_MODEL: ([quell, "scenario", "check", "scenarios/prima/demo.yaml"], None),
        SIM: ([*sim, "scenarios/sim-mm1-1m.yaml"], _sim_check(2.0)),
        SIM_LONG: ([*sim, "scenarios/sim-mm1-long.yaml"], _sim_check(50.0)),
        SIMPY: ([python, "bench/simpy_mm1.py", str(REQUESTS)], None),
    }


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one whole process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _paired_median(a: list[float], b: list[float], op: Callable[[float, float], float]) -> float:
    return statistics.median(op(x, y) for x, y in zip(a, b, strict=True))


def _compile_vs_cached(argv: list[str]) -> dict[str, Any]:
    compiled, cached = [], []
    for _ in range(COMPILE_RUNS):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            compiled.append(_run(argv, env)[0])
            cached.append(_run(argv, env)[0])
            if not any(Path(cache).rglob("*.nbi")):
                raise RuntimeError("numba wrote no cache index into NUMBA_CACHE_DIR")
    return {
        "command": SIM,
        "compile_s": [round(s, 2) for s in compiled],
        "cached_s": [round(s, 3) for s in cached],
        "compile_minus_cached_s": round(statistics.median(compiled) - statistics.median(cached), 2),
    }


def run() -> dict[str, Any]:
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as runs_dir:
        commands = _commands(Path(runs_dir))
        for argv, _ in commands.values():  # warm-up: page cache, numba's disk cache
            _run(argv)
        for _ in range(RUNS):
            for name, (argv, check) in commands.items():
                w, c, stdout = _run(argv)
                if check is not None:
                    check(stdout)
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
        compile_cache = _compile_vs_cached(commands[SIM][0])
    base = wall[PASS]
    report = {
        name: {
            "median_s": round(statistics.median(w), 3),
            "min_s": round(min(w), 3),
            "max_s": round(max(w), 3),
            "cpu_median_s": round(statistics.median(cpu[name]), 3),
            "excess_over_python_s": round(_paired_median(w, base, lambda x, y: x - y), 3),
            "runs_s": [round(s, 3) for s in w],
        }
        for name, w in wall.items()
    }
    ratio = _paired_median(wall[SIMPY], wall[SIM], lambda x, y: x / y)
    ratio_long = _paired_median(wall[SIMPY], wall[SIM_LONG], lambda x, y: x / y)
    goals = {
        f"{HELP} <= {GOAL_S} s": report[HELP]["median_s"] <= GOAL_S,
        f"{CHECK} <= {GOAL_S} s": report[CHECK]["median_s"] <= GOAL_S,
        f"{SIM} >= {GOAL_RATIO:g}x faster than simpy": ratio >= GOAL_RATIO,
    }
    return {
        "runs": RUNS,
        "commands": report,
        "simpy_over_sim": round(ratio, 1),
        "simpy_over_sim_long": round(ratio_long, 1),
        "numba_compile_vs_cached": compile_cache,
        "goals": goals,
        "meets_goals": all(goals.values()),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

"""The install by role: ``pip install <tree>`` (the agent), ``pip install '<tree>[controller]'``
(the controller, with every policy) and ``pip install '<tree>[controller,plots,sim,lab,research]'``
(every extra), each into a fresh venv of this Python, from PyPI (pip's own cache is used; the
install time is reported, not compared).

Per venv: the bytes of its site-packages (every file, pip and setuptools included, as a venv
has them; and without those two, what the install added), each distribution's share (the sizes
its RECORD lists), and the wall time
of ``quell agent --help`` beside ``python -c pass`` of the same venv: ``RUNS`` rounds after one
warm-up, the venvs and commands taking turns, medians (with every run) and the median excess
over the ``python -c pass`` of the same round. Checked on the way: the
agent-only venv finds none of the extras' modules, ``quell agent --help`` and ``quell live
--help`` answer in each, ``quell live run`` in the agent's venv stops with exit 2 naming
``quell[controller]``, and ``quell sim run`` in the controller's with exit 2 naming ``quell[sim]``."""

from __future__ import annotations

import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quell.core.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]

RUNS = 11
TOP = 8
"""Distributions listed by size per venv."""
VENV_OWN = ("pip", "setuptools")
"""Distributions a fresh venv has before anything is installed."""
AGENT = "agent only"
CONTROLLER = "controller"
FULL = "every extra"
EXTRAS_SPEC = f"[{','.join(EXTRAS)}]"
PASS = "python -c pass"
HELP = "quell agent --help"
MODULES = sorted({m for mods in EXTRAS.values() for m in mods})
ENV = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
"""The venvs' processes see only their own site-packages."""


def _tree(where: Path) -> Path:
    """What pip builds quell from (pyproject, README, src), copied so the build leaves nothing
    in the working tree."""
    where.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, where / name)
    junk = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    shutil.copytree(ROOT / "src", where / "src", ignore=junk)
    return where


def _venv(where: Path, spec: str) -> tuple[Path, float]:
    """A fresh venv at ``where`` with ``spec`` installed; its bin directory and the seconds the
    install took."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    pip = [
        str(where / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    t0 = time.perf_counter()
    done = subprocess.run([*pip, spec], env=ENV, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {spec} failed: {done.stderr[-1000:]}")
    return where / "bin", time.perf_counter() - t0


def _site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python*/site-packages")
    return site


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _distributions(site: Path) -> dict[str, int]:
    """Each distribution's bytes, from the sizes its RECORD lists (files RECORD leaves without a
    size, such as .pyc files written after the install, are measured on disk)."""
    out = {}
    for record in site.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0]
        total = 0
        with record.open(newline="") as fh:
            for row in csv.reader(fh):
                if len(row) < 3:
                    continue
                path = site / row[0]
                if row[2]:
                    total += int(row[2])
                elif path.is_file():
                    total += path.stat().st_size
        out[name] = total
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _check(bin_dir: Path, argv: list[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]],
        cwd=bin_dir,
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != code:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    return done


def _wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=Path(argv[0]).parent, env=ENV, capture_output=True, check=True)
    return time.perf_counter() - t0


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = _tree(Path(tmp) / "tree")
        installs = {
            AGENT: str(tree),
            CONTROLLER: f"{tree}[controller]",
            FULL: f"{tree}{EXTRAS_SPEC}",
        }
        bins: dict[str, Path] = {}
        report: dict[str, dict[str, Any]] = {}
        for name, spec in installs.items():
            bin_dir, install_s = _venv(Path(tmp) / name.replace(" ", "-"), spec)
            bins[name] = bin_dir
            site = _site_packages(bin_dir.parent)
            dists = _distributions(site)
            report[name] = {
                "pip_install": spec.replace(str(tree), "<tree>"),
                "install_s": round(install_s, 1),
                "site_packages_bytes": _bytes(site),
                "installed_bytes": sum(b for d, b in dists.items() if d not in VENV_OWN),
                "distributions": len(dists),
                "largest_bytes": dict(list(dists.items())[:TOP]),
            }
            _check(bin_dir, ["quell", "agent", "--help"])
            _check(bin_dir, ["quell", "live", "--help"])
        found = _check(
            bins[AGENT],
            [
                "python",
                "-c",
                f"import importlib.util as u; print([m for m in {MODULES!r} if u.find_spec(m)])",
            ],
        ).stdout.strip()
        if found != "[]":
            raise RuntimeError(f"the agent-only venv has extras' modules: {found}")
        live = ["quell", "live", "run", "--config", str(ROOT / "deploy/live.yaml")]
        no_controller = _check(bins[AGENT], live, code=2)
        if (
            "pip install 'quell[controller]'" not in no_controller.stderr
            or "Traceback" in no_controller.stderr
        ):
            raise RuntimeError(f"quell live run without numpy: {no_controller.stderr[-500:]}")
        sim = ["quell", "sim", "run", str(ROOT / "scenarios/sim-mm1.yaml"), "--runs-dir", tmp]
        refused = _check(bins[CONTROLLER], sim, code=2)
        if "pip install 'quell[sim]'" not in refused.stderr or "Traceback" in refused.stderr:
            raise RuntimeError(f"quell sim run without numba: {refused.stderr[-500:]}")

        commands = {
            (name, what): [str(bins[name] / argv[0]), *argv[1:]]
            for name in installs
            for what, argv in (
                (PASS, ["python", "-c", "pass"]),
                (HELP, ["quell", "agent", "--help"]),
            )
        }
        for argv in commands.values():  # warm-up: the page cache, each venv's .pyc files
            _wall(argv)
        walls: dict[tuple[str, str], list[float]] = {k: [] for k in commands}
        for _ in range(RUNS):
            for key, argv in commands.items():
                walls[key].append(_wall(argv))
    for (name, what), w in walls.items():
        base = walls[(name, PASS)]
        report[name][what] = {
            "median_s": round(statistics.median(w), 3),
            "excess_over_python_s": round(
                statistics.median(x - y for x, y in zip(w, base, strict=True)), 3
            ),
            "runs_s": [round(s, 3) for s in w],
        }
    agent, controller, full = report[AGENT], report[CONTROLLER], report[FULL]
    return {
        "runs": RUNS,
        "installs": report,
        "controller_over_agent_bytes": round(
            controller["installed_bytes"] / agent["installed_bytes"], 2
        ),
        "full_over_agent_bytes": round(full["installed_bytes"] / agent["installed_bytes"], 2),
        "agent_help_excess_over_python_s": {
            name: report[name][HELP]["excess_over_python_s"] for name in report
        },
        "agent_help_median_s": {name: report[name][HELP]["median_s"] for name in report},
        "agent_only_refuses_live_run": no_controller.stderr.strip(),
        "controller_refuses_sim_run": refused.stderr.strip(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))

"""What a command loads: only what it uses, and what it leaves to the rest of the process. ``quell --help`` and ``quell scenario check`` of a
scenario without a model file load none of numpy, scipy, numba or matplotlib; a simulator run
loads neither matplotlib nor scipy.stats; checking a scenario whose policy has a model bundle
fits the bundle with scipy but loads neither numba nor matplotlib. (How long they take is
measured by ``make bench``, bench/bench_startup.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_cli import quell

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "scipy", "numba", "matplotlib", "pandas")
RUN_REPORTING_MODULES = """
import json, sys
import quell.cli
try:
    quell.cli.main()
finally:
    print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*args: str | Path) -> set[str]:
    proc = quell(*args, code=RUN_REPORTING_MODULES)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in reversed(proc.stderr.splitlines()) if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


@pytest.mark.parametrize(
    "args",
    [["--help"], ["scenario", "check", ROOT / "scenarios" / "interference-smoke.yaml"]],
    ids=["help", "scenario-check"],
)
def test_help_and_check_load_no_numeric_library(args: list[str | Path]) -> None:
    assert heavy(loaded(*args)) == set()


def test_sim_run_loads_neither_plots_nor_statistics(tmp_path: Path) -> None:
    modules = loaded("sim", "run", ROOT / "scenarios" / "sim-mm1.yaml", "--runs-dir", tmp_path)
    assert "numba" in modules
    assert "matplotlib" not in modules
    assert "scipy.stats" not in modules


def test_checking_a_model_bundle_loads_no_simulator_or_plots() -> None:
    modules = loaded("scenario", "check", ROOT / "scenarios" / "prima" / "demo.yaml")
    assert "scipy.interpolate" in modules  # the bundle's response-time model is fitted
    assert "numba" not in modules
    assert "matplotlib" not in modules


GC_AFTER = """
import gc, json, os, sys
import quell.cli
try:
    quell.cli.{func}()
except SystemExit:
    pass
print("GC " + json.dumps([gc.isenabled(), gc.get_freeze_count(), os.environ.get("OPENBLAS_NUM_THREADS")]))
"""


def gc_after(func: str, tmp_path: Path) -> list[object]:
    args = ("sim", "run", ROOT / "scenarios" / "sim-mm1.yaml", "--runs-dir", tmp_path)
    proc = quell(*args, code=GC_AFTER.format(func=func))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("GC "))
    result: list[object] = json.loads(line.removeprefix("GC "))
    return result


def test_main_in_another_program_leaves_its_process_as_it_was(tmp_path: Path) -> None:
    """Tests call ``main``: the collector stays on, nothing is frozen, OpenBLAS untouched."""
    assert gc_after("main", tmp_path) == [True, 0, os.environ.get("OPENBLAS_NUM_THREADS")]


def test_quell_as_its_own_process_freezes_what_it_loaded(tmp_path: Path) -> None:
    enabled, frozen, openblas = gc_after("entry", tmp_path)
    assert enabled is True
    # numba's objects and the rest, out of the collector's way
    assert isinstance(frozen, int) and frozen > 10_000
    assert openblas == os.environ.get("OPENBLAS_NUM_THREADS", "1")  # the user's setting wins

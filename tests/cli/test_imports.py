"""What a command loads: only what it uses. ``quell --help`` and ``quell scenario check`` of a
scenario without a model file load none of numpy, scipy, numba or matplotlib; a simulator run
loads neither matplotlib nor scipy.stats; checking a scenario whose policy has a model bundle
fits the bundle with scipy but loads neither numba nor matplotlib. (How long they take is
measured by ``make bench``, bench/bench_startup.py.)"""

from __future__ import annotations

import json
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

"""The architecture of docs/architecture.md, checked: the layer contract (import-linter, as
``make lint`` runs it), no import cycle between any two modules, the command line imported by
nothing but itself, and importing any module does nothing but define things."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("quell")


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _cycles(adj: dict[str, list[str]]) -> Iterator[list[str]]:
    """Strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    for root in adj:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, k = work.pop()
            if k == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            if k < len(adj[v]):
                work.append((v, k + 1))
                w = adj[v][k]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            for w in adj[v]:
                if w in on:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    yield sorted(comp)


def test_the_cycle_finder_finds_a_cycle() -> None:
    adj = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e2"], "e2": ["e"]}
    assert sorted(_cycles(adj)) == [["a", "b", "c"], ["e", "e2"]]


def test_no_import_cycle_between_any_two_modules(graph: grimp.ImportGraph) -> None:
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    assert list(_cycles(adj)) == []


def test_nothing_outside_the_command_line_imports_it(graph: grimp.ImportGraph) -> None:
    cli = {m for m in graph.modules if m == "quell.cli" or m.startswith("quell.cli.")}
    importers = {m for c in cli for m in graph.find_modules_that_directly_import(c) if m not in cli}
    assert importers <= {"quell.__main__"}


def test_importing_every_module_touches_nothing(tmp_path: Path) -> None:
    """No file written, no global random state drawn from or seeded, no thread started.
    (rich draws a random link id when it is first imported: it is imported first.)"""
    code = """
import importlib, pkgutil, random, threading
import numpy as np
import rich.console
import quell
r0, n0, t0 = random.getstate(), np.random.get_state()[1].copy(), threading.active_count()
names = [m.name for m in pkgutil.walk_packages(quell.__path__, "quell.")]
for name in names:
    if name != "quell.__main__":
        importlib.import_module(name)
assert random.getstate() == r0, "random"
assert (np.random.get_state()[1] == n0).all(), "numpy random"
assert threading.active_count() == t0, "threads"
print(len(names))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 80
    assert list(tmp_path.iterdir()) == []

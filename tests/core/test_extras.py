"""The install's roles: ``quell.core.extras`` and ``pyproject.toml`` name the same extras with the
same distributions, the core dependencies hold none of them, ``make install`` installs every
extra, and a missing extra's module is named with the extra that installs it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from quell.core import extras
from quell.core.extras import DISTRIBUTIONS, EXTRAS, extra_for, missing, missing_extra, require
from quell.errors import PrerequisiteError

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, normalised (PEP 503)."""
    out = set()
    for req in requirements:
        found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        assert found, req
        out.add(re.sub(r"[-_.]+", "-", found.group()).lower())
    return out


def _normalised(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def test_the_extras_are_pyprojects() -> None:
    optional = PROJECT["optional-dependencies"]
    assert set(optional) - {"dev"} == set(EXTRAS)
    for extra, modules in EXTRAS.items():
        assert _names(optional[extra]) == {_normalised(DISTRIBUTIONS[m]) for m in modules}, extra
    assert set(DISTRIBUTIONS) == {m for mods in EXTRAS.values() for m in mods}


def test_the_core_holds_no_extra() -> None:
    core = _names(PROJECT["dependencies"])
    assert core == {"pydantic", "pyyaml", "typer", "rich", "prometheus-client"}
    assert not core & {_normalised(d) for d in DISTRIBUTIONS.values()}


def test_make_install_installs_every_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (spec,) = re.findall(r"pip install -q -e '\.\[([a-z,]+)\]'", makefile)
    assert set(spec.split(",")) == {"dev", *EXTRAS}


def test_research_holds_both_environments() -> None:
    assert set(EXTRAS["lab"]) | set(EXTRAS["sim"]) <= set(EXTRAS["research"])


def test_every_extra_holds_the_controllers() -> None:
    assert all(set(EXTRAS["controller"]) <= set(mods) for mods in EXTRAS.values())


@pytest.mark.parametrize(
    ("module", "preferred", "extra"),
    [
        ("matplotlib.figure", None, "plots"),
        ("matplotlib", "lab", "lab"),
        ("matplotlib", "sim", "sim"),
        ("numba", None, "sim"),
        ("numba", "lab", "sim"),  # the lab extra has no numba: the smallest that has
        ("pandas", None, "lab"),
        ("sklearn.tree", None, "research"),
        ("GPy", "sim", "research"),
        ("scipy", None, "controller"),
        ("httpx", "live", "controller"),
        ("pydantic", None, None),  # core
        ("nonesuch", None, None),
    ],
)
def test_the_extra_for_a_module(module: str, preferred: str | None, extra: str | None) -> None:
    assert extra_for(module, preferred) == extra


def _absent(monkeypatch: pytest.MonkeyPatch, *tops: str) -> None:
    monkeypatch.setattr(extras, "installed", lambda m: m.split(".")[0] not in tops)


def test_a_missing_module_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "numba")
    prereq = missing(["numba.core"], "quell sim run", "sim")
    assert isinstance(prereq, PrerequisiteError) and prereq.exit_code == 2
    assert (
        str(prereq) == "numba is not installed (needed for quell sim run): pip install 'quell[sim]'"
    )


def test_every_missing_module_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "matplotlib", "sklearn", "GPy")
    with pytest.raises(PrerequisiteError) as err:
        require(["sklearn", "matplotlib", "GPy", "numba", "pydantic"], "quell attribute fit")
    assert str(err.value) == (
        "scikit-learn, matplotlib, GPy are not installed (needed for quell attribute fit): "
        "pip install 'quell[research]'"
    )
    _absent(monkeypatch, "matplotlib", "numba", "pandas")
    with pytest.raises(PrerequisiteError, match=r"quell\[research\]'$"):  # the one with all
        require(["numba", "pandas", "matplotlib"], "x", "lab")
    with pytest.raises(PrerequisiteError, match=r"quell\[sim\]'$"):
        require(["numba", "matplotlib"], "x", "sim")


def test_nothing_missing_or_not_an_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "somecore")
    assert missing(["matplotlib", "numba"], "x") is None  # installed here
    assert missing(["somecore"], "x") is None  # a core module is not a role's choice
    require(["pandas"], "x")
    exc = ModuleNotFoundError("No module named 'somecore'", name="somecore")
    assert missing_extra(exc, "x") is None


def test_a_refused_find_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> None:
        raise ModuleNotFoundError(name, name=name)

    monkeypatch.setattr(extras.importlib.util, "find_spec", refuse)
    assert extras.installed("pandas") is False

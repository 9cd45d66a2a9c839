"""quell's install by role. ``pip install quell`` is the agent: ``quell agent`` imports pydantic,
PyYAML, typer, rich and prometheus_client and nothing more, so a fleet's hosts carry no
numerical stack. ``pip install 'quell[controller]'`` adds what the controller needs: ``quell
live run`` with every policy (PRIMA with a model bundle, IC2 with a detector bundle, target
tracking, the baselines) imports numpy, scipy and httpx besides. What the other roles import
comes in further extras, each holding the controller's too (``pyproject.toml`` lists the same;
``tests/core/test_extras.py`` keeps both alike):

| extra | adds | for |
| --- | --- | --- |
| ``controller`` | numpy, scipy, httpx | the live controller and every policy |
| ``plots`` | matplotlib | PNG plots: run reports, comparison pages, the live controller's page |
| ``sim`` | numba, matplotlib | the simulator's compiled event core, and its runs' reports |
| ``lab`` | pandas, matplotlib | lab runs' reports; the per-request records of instrumented instances |
| ``research`` | scikit-learn, GPy and all of the above | the papers' studies: IC2's tree training, Soroban's attribution models, on the lab and the simulator |

Modules of an extra are imported where they are used, never at the top of a module the agent
or the controller imports beyond its own extra (``tests/test_install_roles.py`` refuses them
there). A command that reaches one that is not installed stops with a ``PrerequisiteError``
naming the extra (``quell.cli.main``, through ``missing_extra``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Final

from quell.errors import PrerequisiteError

_CONTROLLER = ("numpy", "scipy", "httpx")

EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "controller": _CONTROLLER,
    "plots": (*_CONTROLLER, "matplotlib"),
    "sim": (*_CONTROLLER, "numba", "matplotlib"),
    "lab": (*_CONTROLLER, "pandas", "matplotlib"),
    "research": (*_CONTROLLER, "sklearn", "GPy", "numba", "pandas", "matplotlib"),
}
"""Extra → the top-level modules it installs, smallest extras first."""

DISTRIBUTIONS: Final[dict[str, str]] = {
    "numpy": "numpy",
    "scipy": "scipy",
    "httpx": "httpx",
    "matplotlib": "matplotlib",
    "numba": "numba",
    "pandas": "pandas",
    "sklearn": "scikit-learn",
    "GPy": "GPy",
}
"""Top-level module of an extra → the distribution pip installs it from."""


def extra_for(module: str, preferred: str | None = None) -> str | None:
    """The extra to install for the top-level ``module``: ``preferred`` (the extra of the
    command's own role) when it provides it, else the smallest that does; ``None`` when no
    extra does (a core dependency, or not quell's at all)."""
    top = module.split(".")[0]
    if preferred is not None and top in EXTRAS.get(preferred, ()):
        return preferred
    return next((extra for extra, mods in EXTRAS.items() if top in mods), None)


def installed(module: str) -> bool:
    """Whether the top-level ``module`` can be found for import (without importing it)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):  # a finder that refuses it; a broken ``__spec__``
        return False


def missing(
    modules: Sequence[str], needed_for: str, preferred: str | None = None
) -> PrerequisiteError | None:
    """The ``PrerequisiteError`` naming every one of ``modules`` an extra provides that is not
    installed, and the fewest extras that install them (``None`` when nothing is missing): ``numba
    is not installed (needed for quell sim run): pip install 'quell[sim]'``. A module no
    extra provides is not this function's to judge (a core module missing is a broken install,
    not a role's choice), nor one that is installed but fails to import (its own error says
    more)."""
    tops = dict.fromkeys(m.split(".")[0] for m in modules)
    absent = [m for m in tops if m in DISTRIBUTIONS and not installed(m)]
    if not absent:
        return None
    covering = [e for e in EXTRAS if set(absent) <= set(EXTRAS[e])]
    if covering:  # one extra installs them all: ``preferred`` when it does, else the smallest
        extras = [preferred if preferred in covering else covering[0]]
    else:
        extras = sorted({extra_for(m, preferred) or "" for m in absent}, key=list(EXTRAS).index)
    names = ", ".join(DISTRIBUTIONS[m] for m in absent)
    verb = "is" if len(absent) == 1 else "are"
    hint = f"pip install 'quell[{','.join(extras)}]'"
    return PrerequisiteError(f"{names} {verb} not installed", needed_for, hint)


def require(modules: Sequence[str], needed_for: str, preferred: str | None = None) -> None:
    """Raise ``missing``'s error, if any: a command that would reach ``modules`` late (after
    runs of minutes) says so before it starts."""
    prereq = missing(modules, needed_for, preferred)
    if prereq is not None:
        raise prereq


def missing_extra(
    exc: ModuleNotFoundError, needed_for: str, preferred: str | None = None
) -> PrerequisiteError | None:
    """``missing`` for the module ``exc`` failed to import."""
    return missing([exc.name or ""], needed_for, preferred)

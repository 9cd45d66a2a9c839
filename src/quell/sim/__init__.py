"""The simulator: a compiled discrete-event core behind the ``Environment`` protocol.

``SimEnvironment`` (in ``quell.sim.environment``) is the Environment and ``EventCore`` (in
``quell.sim.core``) the event core. They load on first use, so importing the CLI never loads or
compiles the core."""

from __future__ import annotations

from typing import Any

__all__ = ["EventCore", "Records", "SimEnvironment"]


def __getattr__(name: str) -> Any:
    if name in ("EventCore", "Records"):
        from quell.sim import core

        return getattr(core, name)
    if name == "SimEnvironment":
        from quell.sim.environment import SimEnvironment

        return SimEnvironment
    raise AttributeError(f"module 'quell.sim' has no attribute {name!r}")

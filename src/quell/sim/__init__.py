"""The simulator: a compiled discrete-event core behind the ``Environment`` protocol."""

from quell.sim.core import EventCore, Records
from quell.sim.environment import SimEnvironment

__all__ = ["EventCore", "Records", "SimEnvironment"]

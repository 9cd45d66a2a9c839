"""The seam every quell system uses: observations, actions, decisions, environments, policies."""

from quell.core.action import (
    Action,
    AddInstance,
    Decision,
    ReconfigureServer,
    RemoveInstance,
    SetCpuCap,
    SetMaxConn,
    SetWeight,
)
from quell.core.clock import Clock, VirtualClock, WallClock
from quell.core.environment import Environment, Policy
from quell.core.observation import Observation, Snapshot

__all__ = [
    "Action",
    "AddInstance",
    "Clock",
    "Decision",
    "Environment",
    "Observation",
    "Policy",
    "ReconfigureServer",
    "RemoveInstance",
    "SetCpuCap",
    "SetMaxConn",
    "SetWeight",
    "Snapshot",
    "VirtualClock",
    "WallClock",
]

"""What a policy may ask for. Actions describe intent; actuators at the edge carry them out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SetWeight:
    """Set an instance's load-balancer weight (HAProxy range 0..256; 0 sends it no new requests)."""

    instance_id: str
    weight: int


@dataclass(frozen=True, slots=True)
class SetMaxConn:
    """Cap the connections the load balancer keeps open to an instance."""

    instance_id: str
    maxconn: int


@dataclass(frozen=True, slots=True)
class AddInstance:
    """Bring a new instance up on a host and put it in the load-balancing group."""

    instance_id: str
    host: str
    weight: int = 100


@dataclass(frozen=True, slots=True)
class RemoveInstance:
    """Take an instance out of the group, draining its connections first when ``drain``."""

    instance_id: str
    drain: bool = True


@dataclass(frozen=True, slots=True)
class ReconfigureServer:
    """Change a server's own settings (e.g. Apache MaxRequestWorkers, php-fpm max_children)."""

    instance_id: str
    settings: Mapping[str, int | float | str] = field(default_factory=dict)
    graceful: bool = True


@dataclass(frozen=True, slots=True)
class SetCpuCap:
    """Cap the instance's cgroup at ``cpus`` CPUs of time per period (``None`` removes the cap)."""

    instance_id: str
    cpus: float | None


Action = SetWeight | SetMaxConn | AddInstance | RemoveInstance | ReconfigureServer | SetCpuCap

SCALING_TYPES = frozenset({AddInstance.__name__, RemoveInstance.__name__})
"""The stored ``type`` of the actions that add or remove an instance."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer to one snapshot: what to do, and why, in words a person can read."""

    actions: tuple[Action, ...] = ()
    reason: str = ""
    detail: Mapping[str, object] = field(default_factory=dict)
    """The numbers behind the reason (per-instance capacities, sums...), JSON-serialisable."""

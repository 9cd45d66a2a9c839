"""Actuators: change a real HAProxy's routing and a real cgroup's CPU cap."""

from __future__ import annotations

from quell.actuate.cgroup import set_cpu_cap
from quell.actuate.haproxy import HAProxyRuntime

__all__ = ["HAProxyRuntime", "set_cpu_cap"]

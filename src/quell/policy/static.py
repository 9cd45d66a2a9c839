"""The ``static`` policy: change nothing; the load balancer's configured algorithm decides."""

from __future__ import annotations

from quell.core.action import Decision
from quell.core.observation import Snapshot


class StaticPolicy:
    name = "static"

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision()

"""PRIMA's video-streaming sessions (Table I of the PRIMA paper).

Placeholder wiring point for the simulator issue, which builds the Zipf/pacing generator here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from quell.errors import InputError, Problem

if TYPE_CHECKING:
    from quell.scenario.model import Scenario
    from quell.workload.schedule import RequestSchedule


def video_schedule(scenario: Scenario, base_dir: Path) -> RequestSchedule:
    raise InputError(
        scenario.name, [Problem("workload.sessions", "video sessions are not available yet")]
    )

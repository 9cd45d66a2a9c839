"""Nothing of the consolidation lab survives it: not an interrupted bring-up, not a runner
killed with kill -9 once ``quell lab clean`` has run (processes, cgroups, the tmpfs, the
ports, the work files, PostgreSQL's System V segments, each named in what it prints). Each test brings a small lab up (a
thousand comments: seconds)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quell.lab.tag import RUNTIME_ROOT
from quell.studies.consolidation.lab import ConsolidationLab
from quell.studies.consolidation.postgres import sysv_shmids
from tests.cli.inprocess import run_quell
from tests.studies.consolidation.consolidation_leftovers import leftovers, shm_ids

pytestmark = pytest.mark.lab


def test_interrupted_bring_up_leaves_nothing() -> None:
    """Ctrl-C while the data loads: everything started so far goes."""
    tags = []

    def status(msg: str) -> None:
        if "loading" in msg:
            raise KeyboardInterrupt

    lab = ConsolidationLab(comments_total=1000, status=status)
    tags.append(lab.tag.value)
    with pytest.raises(KeyboardInterrupt), lab:
        pass
    assert not any(leftovers(tags[0]).values())


RUNNER = """
import sys, time
from quell.studies.consolidation.lab import ConsolidationLab
lab = ConsolidationLab(comments_total=1000)
lab.__enter__()
lab.ensure_front("conservative", False)
print(lab.tag.value, flush=True)
time.sleep(60)
"""


def test_kill_9_then_lab_clean_leaves_nothing() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert runner.stdout is not None
        tag = runner.stdout.readline().strip()
        assert tag, "the runner did not bring the lab up"
        assert leftovers(tag)["mounts"] and leftovers(tag)["ports"]
        segments = sysv_shmids(RUNTIME_ROOT / tag / "pg")
        assert len(segments) == 2 and set(segments) <= shm_ids()
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        time.sleep(0.2)
        cleaned = run_quell("lab", "clean")
        assert cleaned.code == 0, cleaned
        assert not any(leftovers(tag).values())
        assert not set(segments) & shm_ids()
        for shmid in segments:
            assert f"removed shm {shmid}\n" in cleaned.stdout
    finally:
        if runner.poll() is None:
            runner.kill()

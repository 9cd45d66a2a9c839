"""The lab's probe reading per interval, from the prober's records (no root, no lab)."""

from __future__ import annotations

import pytest

from quell.lab.client_log import probe_readings
from quell.lab.prober import ProbeRecord
from quell.probe.severity import PROBE_COUNT_KEY, PROBE_KEY


def test_a_download_that_spills_past_the_interval_is_averaged_not_dropped() -> None:
    # Downloads due at x.92 s each second: the one of 31.92 s takes 0.23 s and ends at 32.15,
    # the one of 32.92 s takes 0.05 s and ends at 32.97; both complete in [32, 33). Keeping only
    # the later one read 50 ms for an interval whose downloads took 140 ms on average.
    records = [
        ProbeRecord(31.92, "i1", 0.23, True),
        ProbeRecord(32.92, "i1", 0.05, True),
        ProbeRecord(32.95, "i1", 0.10, True),  # still running at 33 s: the next interval's
        ProbeRecord(32.10, "i2", 0.30, False),  # failed: not a time
        ProbeRecord(32.20, "i2", 0.07, True),
    ]
    readings, pending = probe_readings(records, 33.0)
    assert readings["i1"][PROBE_KEY] == pytest.approx(0.14)
    assert readings["i1"][PROBE_COUNT_KEY] == 2.0
    assert readings["i2"] == {PROBE_KEY: pytest.approx(0.07), PROBE_COUNT_KEY: 1.0}
    assert pending == [records[2]]
    later, left = probe_readings(pending, 34.0)
    assert later == {"i1": {PROBE_KEY: pytest.approx(0.10), PROBE_COUNT_KEY: 1.0}}
    assert left == []

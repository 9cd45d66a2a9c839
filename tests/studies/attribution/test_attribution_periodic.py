"""Fig. 4's parts without a lab: the periodic job starts on its period and keeps each span; which
requests started inside a span."""

from __future__ import annotations

import os
import time

import numpy as np

from quell.studies.attribution.analysis import _in_spans
from quell.studies.attribution.experiment import PeriodicScan


def test_the_job_starts_every_period_and_each_span_is_kept() -> None:
    with PeriodicScan(["sleep", "0.2"], 0.5, dict(os.environ)) as job:
        time.sleep(1.35)
    spans = np.array(job.spans) / 1e9
    assert len(spans) == 3  # at 0, 0.5 and 1.0 s
    assert np.all((spans[:, 1] - spans[:, 0] > 0.18) & (spans[:, 1] - spans[:, 0] < 0.4))
    assert np.allclose(np.diff(spans[:, 0]), 0.5, atol=0.1)


def test_requests_are_inside_a_span_by_their_start() -> None:
    spans = np.array([[10, 20], [30, 40]])
    starts = np.array([5, 10, 19, 20, 35, 40, 41])
    assert _in_spans(starts, spans).tolist() == [False, True, True, False, True, False, False]

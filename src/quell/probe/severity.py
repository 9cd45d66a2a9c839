"""The severity factor SF (PRIMA Eq. 1) and a per-instance estimator over snapshots."""

from __future__ import annotations

import numpy as np

from quell.core.observation import Snapshot
from quell.probe.table import ProbeTable

PROBE_KEY = "probe_rt_seconds"
"""Where environments put the probe's download time in ``Observation.extra``."""


def severity_factor(probe_rt_s: np.ndarray | float, r_iso_s: np.ndarray | float) -> np.ndarray:
    """Eq. 1: (R_P − R_iso) / R_iso when the probe is slower than in isolation, else 0."""
    rp = np.asarray(probe_rt_s, dtype=float)
    ri = np.asarray(r_iso_s, dtype=float)
    return np.where(rp > ri, (rp - ri) / ri, 0.0)


class SeverityEstimator:
    """SF per instance from each snapshot's probe times and utilisations.

    An instance whose probe did not report in an interval keeps its last SF (the probe runs
    once per period, which may be longer than the control interval). ``fresh_`` names the
    instances whose SF was measured in the last snapshot.
    """

    def __init__(self, table: ProbeTable) -> None:
        self.table = table
        self.sf_: dict[str, float] = {}
        self.fresh_: set[str] = set()

    def update(self, snapshot: Snapshot) -> dict[str, float]:
        ids, rt, util = [], [], []
        for iid, o in snapshot.instances.items():
            p = o.extra.get(PROBE_KEY)
            if p is not None and o.util_pct is not None:
                ids.append(iid)
                rt.append(p)
                util.append(o.util_pct)
        if ids:
            sf = severity_factor(np.array(rt), self.table.predict(np.array(util)))
            self.sf_.update(zip(ids, sf.tolist(), strict=True))
        self.fresh_ = set(ids)
        for gone in set(self.sf_) - set(snapshot.instances):
            del self.sf_[gone]
        return dict(self.sf_)

"""The severity factor SF (PRIMA Eq. 1) and a per-instance estimator over snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import Snapshot
from quell.probe.table import ProbeTable

PROBE_KEY = "probe_rt_seconds"
"""Where environments put the probe's download time in ``Observation.extra``: the mean time of
the downloads that completed in the interval."""
PROBE_COUNT_KEY = "probe_samples"
"""How many downloads completed in the interval and were averaged into ``PROBE_KEY``. A
download that spills past an interval's end completes in the next one, beside the download
that starts there: keeping only the later (faster) one would drop slow samples, and how often
depends on where the probe's phase falls in the interval."""


def probe_extra(times_s: Sequence[float]) -> dict[str, float]:
    """An interval's probe reading from the download times that completed in it (none: none)."""
    if not times_s:
        return {}
    return {PROBE_KEY: float(np.mean(times_s)), PROBE_COUNT_KEY: float(len(times_s))}


def probe_samples(extras: Iterable[Mapping[str, float]]) -> list[float]:
    """Every download time the intervals report, each interval's mean once per download it
    averages (an interval recorded without a count: once), so their mean is the mean over
    downloads."""
    return [
        float(e[PROBE_KEY])
        for e in extras
        if PROBE_KEY in e
        for _ in range(max(int(e.get(PROBE_COUNT_KEY, 1)), 1))
    ]


def severity_factor(probe_rt_s: np.ndarray | float, r_iso_s: np.ndarray | float) -> np.ndarray:
    """Eq. 1: (R_P − R_iso) / R_iso when the probe is slower than in isolation, else 0."""
    rp = np.asarray(probe_rt_s, dtype=float)
    ri = np.asarray(r_iso_s, dtype=float)
    return np.where(rp > ri, (rp - ri) / ri, 0.0)


class SeverityEstimator:
    """SF per instance over its last ``window`` probe samples.

    The estimate is Eq. 1 on the window's mean probe time, each sample taken relative to R_iso
    at its own U: max(0, mean(R_P / R_iso) − 1). That is how the profile reads a model cell's SF
    (Eq. 1 on the cell's mean probe time), so the controller reads SF on the scale its models
    were built on. The median of the samples' SFs, which one outlying sample moves less, reads
    a skewed probe time (a filling link queue) low: over the lab file model's cells with a
    neighbour of 15–30 Mbit/s, windows of 3 read the neighbour's load (IM⁻¹(SF) − U) on average
    5.6 points of U below the truth by the median and 2.7 by the mean, and the lab demo with it
    missed R_th behind its neighbours in two runs of three (docs/papers/prima.md).

    Environments report a probe time only in the interval in which that download completed
    (``extra["probe_rt_seconds"]``, the mean where several did), so every reported value is a
    new sample; an instance whose probe did not report keeps its estimate (the probe runs once
    per period, which may be longer than the control interval). With ``window`` = 1 the estimate
    is the last sample. ``fresh_`` names the instances whose probe reported in the last update.

    ``confidence_z`` (``None``: off): the window's estimate counts only where it exceeds what
    the probe's own scatter gives in isolation at z standard errors: its samples' spread
    (``ProbeTable.spread_levels`` at each sample's U, σ_k) makes the standard error of their
    mean √(Σσ_k²)/n; an estimate at or below z times that reads 0, one above it reads as it is.
    At a handful of samples per window the service's own requests, which a probe meets or not,
    read as a neighbour of several per cent of a link; a neighbour that matters reads far above.

    ``jump`` (``None``: off): a sample whose probe time, relative to R_iso, exceeds the window's
    by more than the factor 1 + ``jump`` ((1 + SF_sample) > (1 + SF_window)(1 + jump)) starts
    the window again from that sample: a neighbour that has just arrived is read at once rather
    than averaged with the samples from before it (a departure still goes through the window).
    """

    def __init__(
        self,
        table: ProbeTable,
        window: int = 1,
        *,
        jump: float | None = None,
        confidence_z: float | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        if confidence_z is not None and confidence_z < 0:
            raise ValueError(f"confidence_z must be at least 0, not {confidence_z}")
        self.table = table
        self.window = window
        self.jump = jump
        self.confidence_z = confidence_z
        self._levels_sd = table.spread_levels() if confidence_z is not None else None
        self._fresh: Sequence[str] = ()
        self._row: dict[str, int] = {}
        self._samples = np.full((0, window), np.nan)  # ring buffer of R_P / R_iso − 1 per row
        self._var = np.full((0, window), np.nan)  # each sample's σ² (confidence_z only)
        self._seen = np.zeros(0, dtype=np.int64)  # samples taken per row
        self._sf = np.full(0, np.nan)  # current estimate per row (NaN: no sample yet)
        self._window = np.full(0, np.nan)  # the window's estimate before the gate
        self._gate = np.full(0, np.nan)  # z standard errors there (NaN: gate off)

    def _lookup(self, ids: Sequence[str]) -> NDArray[np.int64]:
        """The row of each id (-1 for an id not tracked)."""
        return np.fromiter(map(self._row.get, ids, repeat(-1)), dtype=np.int64, count=len(ids))

    def _rows(self, ids: Sequence[str]) -> NDArray[np.int64]:
        """The row of each id, new rows (in order of first appearance) for ids not tracked."""
        r = self._lookup(ids)
        if r.min(initial=0) >= 0:
            return r
        row = self._row
        new = list(dict.fromkeys(ids[k] for k in np.flatnonzero(r < 0).tolist()))
        start = len(row)
        row.update(zip(new, range(start, start + len(new)), strict=True))
        grow = len(new)
        self._samples = np.vstack([self._samples, np.full((grow, self.window), np.nan)])
        self._var = np.vstack([self._var, np.full((grow, self.window), np.nan)])
        self._seen = np.concatenate([self._seen, np.zeros(grow, dtype=np.int64)])
        self._sf = np.concatenate([self._sf, np.full(grow, np.nan)])
        self._window = np.concatenate([self._window, np.full(grow, np.nan)])
        self._gate = np.concatenate([self._gate, np.full(grow, np.nan)])
        return self._lookup(ids)

    def add(
        self, ids: Sequence[str], probe_rt_s: NDArray[np.float64], util_pct: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Take one new probe sample per id (each id once); returns the samples' SF."""
        r_iso = self.table.predict(util_pct)
        excess_now = (np.asarray(probe_rt_s, dtype=float) - r_iso) / r_iso  # Eq. 1 unclipped
        sf: NDArray[np.float64] = np.maximum(excess_now, 0.0)
        self._fresh = tuple(ids)
        if not ids:
            return sf
        r = self._rows(ids)
        if self.jump is not None and self.window > 1:
            before = self._sf[r]
            jumped = r[
                (self._seen[r] > 0) & (1.0 + excess_now > (1.0 + before) * (1.0 + self.jump))
            ]
            if jumped.size:
                self._samples[jumped] = np.nan
                self._var[jumped] = np.nan
                self._seen[jumped] = 0
        slot = self._seen[r] % self.window
        self._samples[r, slot] = excess_now
        self._seen[r] += 1
        block = self._samples[r]
        count = np.minimum(self._seen[r], self.window)
        excess = block[:, 0] if self.window == 1 else _mean_of_samples(block, count)
        if self._levels_sd is not None and self.confidence_z is not None:
            sd = np.interp(np.asarray(util_pct, dtype=float), self.table.util_pct_, self._levels_sd)
            self._var[r, slot] = sd * sd
            se = np.sqrt(np.nansum(self._var[r], axis=1)) / count
            self._window[r] = excess
            self._gate[r] = self.confidence_z * se
            excess = np.where(excess > self._gate[r], excess, 0.0)
        self._sf[r] = np.maximum(excess, 0.0)  # Eq. 1: a window no slower than isolation reads 0
        return sf

    @property
    def fresh_(self) -> set[str]:
        """The instances whose probe reported in the last update."""
        return set(self._fresh)

    def __len__(self) -> int:
        """Instances tracked."""
        return len(self._row)

    def get(self, ids: Sequence[str]) -> NDArray[np.float64]:
        """The current estimate of each id (NaN where no probe has reported yet)."""
        r = self._lookup(ids)
        out = np.full(len(ids), np.nan)
        has = r >= 0
        out[has] = self._sf[r[has]]
        return out

    def gate(self, ids: Sequence[str]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """With ``confidence_z``: each id's window estimate before the gate and the threshold
        it had to exceed (z standard errors), as of its last sample; NaN where the gate is off
        or no probe has reported."""
        r = self._lookup(ids)
        window, gate = np.full(len(ids), np.nan), np.full(len(ids), np.nan)
        has = r >= 0
        window[has] = self._window[r[has]]
        gate[has] = self._gate[r[has]]
        return window, gate

    def forget(self, keep: set[str]) -> None:
        """Drop the instances not in ``keep`` (gone from the group)."""
        gone = [i for i in self._row if i not in keep]
        if not gone:
            return
        live = [i for i in self._row if i in keep]
        r = np.asarray([self._row[i] for i in live], dtype=np.int64)
        self._samples, self._seen, self._sf = self._samples[r], self._seen[r], self._sf[r]
        self._var, self._window, self._gate = self._var[r], self._window[r], self._gate[r]
        self._row = {i: k for k, i in enumerate(live)}

    @property
    def sf_(self) -> dict[str, float]:
        """Instance id → current estimate, for the instances with one."""
        return {i: float(self._sf[k]) for i, k in self._row.items() if self._seen[k] > 0}

    def update(self, snapshot: Snapshot) -> dict[str, float]:
        """Take the snapshot's probe samples, forget instances it no longer shows, and return
        every estimate."""
        ids, rt, util = [], [], []
        for iid, o in snapshot.instances.items():
            p = o.extra.get(PROBE_KEY)
            if p is not None and o.util_pct is not None:
                ids.append(iid)
                rt.append(p)
                util.append(o.util_pct)
        self.add(ids, np.asarray(rt, dtype=float), np.asarray(util, dtype=float))
        self.forget(set(snapshot.instances))
        return self.sf_


def _mean_of_samples(block: NDArray[np.float64], count: NDArray[np.int64]) -> NDArray[np.float64]:
    """The mean of each row's samples, ``count`` of them (slots not yet filled are NaN)."""
    out: NDArray[np.float64] = np.where(np.isnan(block), 0.0, block).sum(axis=1) / count
    return out

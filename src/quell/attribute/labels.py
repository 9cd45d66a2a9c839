"""Ground truth: how much of each contended request's latency the co-located load added.

**Percentile matching** (the seed's §3.5): the same seeded schedule is run uncontended and
contended; within each request class, a contended request at percentile p of its class's
latencies gets excess = its latency − the uncontended latency at the same percentile p. A
request's percentile is the midpoint of its rank, p = (rank + ½) / n (ties in the order of the
records), and the uncontended latency at p is the inverted-CDF quantile: the smallest
uncontended latency whose empirical CDF reaches p. With as many uncontended as contended
requests of a class, the k-th fastest contended request is matched with the k-th fastest
uncontended one, exactly.

**Paired** labels: quell replays identical schedules, so a request id names the same request in
both runs; excess = its contended latency − its own uncontended latency. Percentile matching
assumes contention keeps the requests' order; paired labels do not, but carry each run's own
noise (two runs of one request differ even without contention). ``compare_labels`` says how far
the two kinds differ on the requests both label.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]


def _quantile_inverted_cdf(sorted_values: FloatArray, p: FloatArray) -> FloatArray:
    n = len(sorted_values)
    index = np.clip(np.ceil(p * n - 1e-9).astype(np.int64) - 1, 0, n - 1)
    return np.asarray(sorted_values[index], dtype=np.float64)


def percentile_labels(
    uncontended_seconds: FloatArray,
    uncontended_class: NDArray[np.str_],
    contended_seconds: FloatArray,
    contended_class: NDArray[np.str_],
) -> FloatArray:
    """Each contended request's excess in seconds by percentile matching within its class. A
    contended class with no uncontended request raises ``InputError``."""
    u = np.asarray(uncontended_seconds, dtype=np.float64)
    c = np.asarray(contended_seconds, dtype=np.float64)
    u_cls = np.asarray(uncontended_class)
    c_cls = np.asarray(contended_class)
    problems = []
    if u.shape != u_cls.shape:
        problems.append(Problem("uncontended", "latencies and classes differ in length"))
    if c.shape != c_cls.shape:
        problems.append(Problem("contended", "latencies and classes differ in length"))
    if problems:
        raise InputError("percentile labels", problems)
    missing = sorted(set(c_cls.tolist()) - set(u_cls.tolist()))
    if missing:
        message = f"no uncontended request of class(es) {', '.join(missing[:5])}"
        raise InputError("percentile labels", [Problem("request_class", message)])
    excess = np.empty(len(c), dtype=np.float64)
    for cls in np.unique(c_cls):
        rows = np.flatnonzero(c_cls == cls)
        reference = np.sort(u[u_cls == cls])
        order = np.argsort(c[rows], kind="stable")
        p = (np.arange(len(rows)) + 0.5) / len(rows)
        matched = np.empty(len(rows), dtype=np.float64)
        matched[order] = _quantile_inverted_cdf(reference, p)
        excess[rows] = c[rows] - matched
    return excess


def paired_labels(
    uncontended_id: NDArray[np.int64],
    uncontended_seconds: FloatArray,
    contended_id: NDArray[np.int64],
    contended_seconds: FloatArray,
) -> FloatArray:
    """Each contended request's excess in seconds over the same request id uncontended; NaN
    where the id is -1 (absent), unmatched, or not unique in either run."""
    u_id = np.asarray(uncontended_id, dtype=np.int64)
    c_id = np.asarray(contended_id, dtype=np.int64)
    ids, counts = np.unique(u_id, return_counts=True)
    unique_u = set(ids[counts == 1].tolist())
    c_ids, c_counts = np.unique(c_id, return_counts=True)
    unique_c = set(c_ids[c_counts == 1].tolist())
    by_id = {int(i): float(s) for i, s in zip(u_id, uncontended_seconds, strict=True)}
    out = np.full(len(c_id), np.nan)
    for k, (i, s) in enumerate(zip(c_id.tolist(), contended_seconds, strict=True)):
        if i >= 0 and i in unique_u and i in unique_c:
            out[k] = float(s) - by_id[i]
    return out


@dataclass(frozen=True)
class LabelAgreement:
    """How far percentile labels are from paired labels on the requests both label."""

    n_requests: int
    n_paired: int
    mean_difference_seconds: float
    """Mean of percentile − paired."""
    mae_seconds: float
    p95_abs_difference_seconds: float
    correlation: float
    paired_p99_seconds: float
    percentile_p99_seconds: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def compare_labels(percentile: FloatArray, paired: FloatArray) -> LabelAgreement:
    """The agreement of the two label kinds over the requests the paired labels cover."""
    pct = np.asarray(percentile, dtype=np.float64)
    par = np.asarray(paired, dtype=np.float64)
    if pct.shape != par.shape:
        raise InputError("labels", [Problem("", "percentile and paired labels differ in length")])
    ok = np.isfinite(par) & np.isfinite(pct)
    if not np.any(ok):
        raise InputError("labels", [Problem("request_id", "no request paired by id")])
    d = pct[ok] - par[ok]
    corr = float(np.corrcoef(pct[ok], par[ok])[0, 1]) if ok.sum() > 1 else float("nan")
    return LabelAgreement(
        n_requests=len(pct),
        n_paired=int(ok.sum()),
        mean_difference_seconds=float(d.mean()),
        mae_seconds=float(np.abs(d).mean()),
        p95_abs_difference_seconds=float(np.quantile(np.abs(d), 0.95)),
        correlation=corr,
        paired_p99_seconds=float(np.quantile(par[ok], 0.99)),
        percentile_p99_seconds=float(np.quantile(pct[ok], 0.99)),
    )

"""An interval honest for what the model has not seen: calibration by left-out group.

A GP fitted on requests of several runs learns its noise from the scatter within those runs: on
more requests of the same runs its interval covers what it says, but a run it never saw (another
schedule seed, another antagonist kind or count) differs from every training run as a whole,
and that run-to-run variation is not in the noise. Split-conformal calibration by group (Vovk et
al.; Barber et al. 2021 for the cross-validated form) measures it on the training data alone:

1. for each calibration group (a contended training run, or every training run of one
   antagonist kind), fit the same model on every other
   training row and predict the left-out group's rows (with ``folds``, the groups are dealt
   round-robin into that many folds and each fold is left out at once: fewer fits when there
   are many groups);
2. take each left-out request's normalised residual |y − μ| / σ (σ the model's own predictive
   standard deviation);
3. the calibration scale is the pooled residuals' conformal ``level`` quantile (rank
   ⌈(n + 1)·level⌉ of n) over the Gaussian z of ``level``.

The final model's σ is multiplied by that scale, so its ``level`` interval μ ± z·scale·σ covers,
on a new group drawn like the left-out ones, about ``level`` of its requests. With ``strata``
(the request's class) step 3 is taken per stratum as well: one scale per class (the campaign's
``/php`` requests err by more, relative to σ, than its ``/static`` ones), the pooled scale kept
for the record. The scale widens (or narrows) the interval by one factor per class; the
interval keeps the GP's shape (wider where the GP is unsure). Only training rows are ever used:
the caller never passes test runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from quell.attribute.models import LEVEL, ExcessModel
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
METHOD = "leave-one-group-out"
MIN_SCALE = 1e-6


@dataclass(frozen=True)
class GroupResidual:
    """One left-out group: its requests and, under the uncalibrated interval, its coverage and
    the ``level`` quantile of its normalised residuals."""

    group: str
    n: int
    coverage: float
    quantile: float


@dataclass(frozen=True)
class IntervalCalibration:
    """What multiplies a model's predictive standard deviation, and how it was found."""

    scale: float
    level: float = LEVEL
    method: str = METHOD
    groups: tuple[GroupResidual, ...] = field(default_factory=tuple)
    strata: dict[str, float] = field(default_factory=dict)
    """Per stratum (request class), its own scale; empty: ``scale`` for every request."""

    @property
    def n(self) -> int:
        return sum(g.n for g in self.groups)


def conformal_quantile(values: FloatArray, level: float) -> float:
    """The split-conformal ``level`` quantile of ``values``: the ⌈(n + 1)·level⌉-th smallest
    (the largest value when that rank passes n)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if len(v) == 0:
        raise InputError("conformal quantile", [Problem("values", "none")])
    rank = min(math.ceil((len(v) + 1) * level), len(v))
    return float(v[rank - 1])


def calibrate_by_group(
    make_model: Callable[[], ExcessModel],
    x: FloatArray,
    y: FloatArray,
    groups: NDArray[np.str_],
    calibration_groups: Sequence[str],
    level: float = LEVEL,
    progress: Callable[[str], None] | None = None,
    folds: int | None = None,
    strata: NDArray[np.str_] | None = None,
) -> IntervalCalibration:
    """The scale that makes ``make_model()``'s ``level`` interval cover ``level`` of a group it
    was not fitted on: each of ``calibration_groups`` left out in turn (rows of ``x``, ``y``
    whose ``groups`` entry names it), the model fitted on all other rows, the left-out rows'
    normalised residuals pooled; ``folds``: leave that many folds of groups out instead of one
    group at a time; ``strata`` (a label per row, e.g. the request class): a scale per stratum
    too. Needs at least two calibration groups (and folds)."""
    note = progress or (lambda _: None)
    problems = []
    if not 0 < level < 1:
        problems.append(Problem("level", f"in (0, 1), not {level}"))
    if len(groups) != len(y) or len(x) != len(y):
        problems.append(Problem("groups", "not one group per request"))
    if strata is not None and len(strata) != len(y):
        problems.append(Problem("strata", "not one stratum per request"))
    names = list(dict.fromkeys(calibration_groups))
    if len(names) < 2:
        problems.append(Problem("calibration_groups", "needs at least two groups to leave out"))
    missing = [g for g in names if not np.any(groups == g)]
    if missing:
        problems.append(Problem("calibration_groups", f"no rows of {', '.join(missing)}"))
    k = len(names) if folds is None else folds
    if len(names) >= 2 and not 2 <= k <= len(names):
        problems.append(Problem("folds", f"between 2 and the {len(names)} groups, not {k}"))
    if problems:
        raise InputError("interval calibration", problems)
    z_level = float(norm.ppf(0.5 + level / 2))
    pooled: list[FloatArray] = []
    rows: list[NDArray[np.bool_]] = []
    per_group = []
    for fold in range(k):
        left = names[fold::k]
        out = np.isin(groups, left)
        note(f"calibration: {', '.join(left)} left out")
        model = make_model().fit(x[~out], y[~out])
        pred = model.predict(x[out])
        if pred.std_seconds is None:
            raise InputError("interval calibration", [Problem("model", "has no interval")])
        r_all = np.abs(y[out] - pred.mean_seconds) / np.maximum(pred.std_seconds, 1e-300)
        pooled.append(r_all)
        rows.append(out)
        for g in left:
            r = r_all[groups[out] == g]
            per_group.append(
                GroupResidual(
                    group=g,
                    n=len(r),
                    coverage=float(np.mean(r <= z_level)),
                    quantile=float(np.quantile(r, level)),
                )
            )
    r = np.concatenate(pooled)

    def scale_of(values: FloatArray) -> float:
        # floored: left-out errors all 0 would give an interval of width 0, which no model has
        return max(conformal_quantile(values, level) / z_level, MIN_SCALE)

    by_stratum = {}
    if strata is not None:
        s = np.concatenate([strata[out] for out in rows])
        for name in sorted(set(s.tolist())):
            by_stratum[name] = scale_of(r[s == name])
    return IntervalCalibration(
        scale=scale_of(r), level=level, groups=tuple(per_group), strata=by_stratum
    )


__all__ = [
    "METHOD",
    "MIN_SCALE",
    "GroupResidual",
    "IntervalCalibration",
    "calibrate_by_group",
    "conformal_quantile",
]

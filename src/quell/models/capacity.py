"""PRIMA's data-driven models (Section III-B2) and the effective capacity they give.

* ``ResponseTimeModel`` (RTM, Eq. 2): mean response time as a two-dimensional piecewise-linear
  interpolation of measured (U, SF) → R points.
* ``InterferenceModel`` (IM, Eq. 3): one-dimensional piecewise-linear, monotone and reversible
  map between the total utilisation of the shared resource, U_total = U + U_int, and SF —
  optionally one such curve per utilisation level of the instance, interpolated between.
* ``CapacityModel``: the two together. From an instance's measured U and SF it estimates the
  neighbours' load U_int = IM⁻¹(SF) − U, then the largest utilisation U_max with
  RTM(U_max, IM(U_max + U_int)) ≤ R_th: the instance's effective capacity.

Utilisations are percent of the instance's bottleneck resource; times are seconds. A query
outside the measured region is clamped to its edge and flagged (``Query.clamped``), never
extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator
from scipy.optimize import isotonic_regression

from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Query:
    """Model outputs with a flag per element: True where the input was outside the measured
    region and was clamped to its edge."""

    value: FloatArray
    clamped: BoolArray


def _as_array(x: float | Sequence[float] | FloatArray) -> FloatArray:
    out: FloatArray = np.atleast_1d(np.asarray(x, dtype=float))
    return out


class ResponseTimeModel:
    """RTM(U, SF): piecewise-linear interpolation over a Delaunay triangulation of the points.

    The two axes are scaled to [0, 1] before triangulating so the triangles do not depend on
    units. Inside the points' convex hull the model is exact linear interpolation; a query
    outside the bounding box is clamped onto it, and one inside the box but outside the hull
    takes the nearest measured point; both are flagged.
    """

    def fit(
        self, util_pct: Sequence[float], sf: Sequence[float], rt_s: Sequence[float]
    ) -> ResponseTimeModel:
        u, s, r = _as_array(util_pct), _as_array(sf), _as_array(rt_s)
        problems = []
        if not (u.size == s.size == r.size):
            problems.append(Problem("rtm", f"lengths differ: U {u.size}, SF {s.size}, R {r.size}"))
        elif u.size < 4:
            problems.append(Problem("rtm", f"need at least 4 points, got {u.size}"))
        for name, a in (("U", u), ("SF", s), ("R", r)):
            if not np.all(np.isfinite(a)):
                problems.append(Problem("rtm", f"{name} has non-finite values"))
        if r.size and np.any(r <= 0):
            problems.append(Problem("rtm", "response times must be positive"))
        if not problems and (np.ptp(u) == 0 or np.ptp(s) == 0):
            problems.append(Problem("rtm", "points must span both U and SF"))
        if problems:
            raise InputError("response-time model", problems)
        self.util_pct_, self.sf_, self.rt_s_ = u, s, r
        self.lo_ = np.array([u.min(), s.min()])
        self.span_ = np.array([np.ptp(u), np.ptp(s)])
        xy = self._scale(u, s)
        self._linear = LinearNDInterpolator(xy, r)
        self._nearest = NearestNDInterpolator(xy, r)
        return self

    def _scale(self, u: FloatArray, s: FloatArray) -> FloatArray:
        out: FloatArray = (np.column_stack([u, s]) - self.lo_) / self.span_
        return out

    def predict(self, util_pct: float | FloatArray, sf: float | FloatArray) -> Query:
        u, s = np.broadcast_arrays(_as_array(util_pct), _as_array(sf))
        uc = np.clip(u, self.util_pct_.min(), self.util_pct_.max())
        sc = np.clip(s, self.sf_.min(), self.sf_.max())
        clamped = (uc != u) | (sc != s)
        xy = self._scale(uc, sc)
        out = np.asarray(self._linear(xy), dtype=float)
        hole = np.isnan(out)
        if hole.any():
            out[hole] = self._nearest(xy[hole])
        return Query(out, clamped | hole)

    def sf_for(self, util_pct: float, rt_s: float, sf_grid_points: int = 401) -> Query:
        """The SF at which RTM(U, SF) equals a measured response time (calibration, Section IV):
        the smallest SF on a fine grid whose prediction reaches ``rt_s``; the top of the range,
        flagged, if none does."""
        grid = np.linspace(self.sf_.min(), self.sf_.max(), sf_grid_points)
        pred = self.predict(np.full_like(grid, util_pct), grid)
        reach = np.nonzero(pred.value >= rt_s)[0]
        if reach.size == 0:
            return Query(np.array([grid[-1]]), np.array([True]))
        k = int(reach[0])
        if k == 0:
            return Query(np.array([grid[0]]), np.array([bool(pred.clamped[0])]))
        lo, hi = pred.value[k - 1], pred.value[k]
        frac = (rt_s - lo) / (hi - lo) if hi > lo else 1.0
        sf = grid[k - 1] + frac * (grid[k] - grid[k - 1])
        return Query(np.array([sf]), np.array([bool(pred.clamped[k])]))


class InterferenceModel:
    """IM: U_total ↔ SF, monotone non-decreasing and piecewise linear.

    ``fit`` averages the SF of points that share a total utilisation (rounded to
    ``resolution_pct``), then makes the sequence monotone by isotonic regression (weighted by
    the number of points), so the model can be read both ways.

    With ``level`` given, points are grouped by it (the profile's utilisation level of the
    instance itself) and each group gets its own monotone curve; a query at utilisation U
    interpolates linearly between the two curves whose groups' mean measured U bracket it. This
    is the paper's IM when the SF depends on U_total alone (one group, or identical curves), and
    follows the data where the SF also depends on how U_total splits between the instance and
    its neighbours (a bulk neighbour stream fills the link's queue more than the same volume of
    short service responses). Every curve, and every blend of two, stays monotone in U_total,
    so the model remains reversible at a given U.
    """

    def __init__(self, resolution_pct: float = 2.5) -> None:
        self.resolution_pct = resolution_pct

    def fit(
        self,
        total_util_pct: Sequence[float],
        sf: Sequence[float],
        util_pct: Sequence[float] | None = None,
        level: Sequence[float] | None = None,
    ) -> InterferenceModel:
        u, s = _as_array(total_util_pct), _as_array(sf)
        problems = []
        if u.size != s.size:
            problems.append(Problem("im", f"lengths differ: U_total {u.size}, SF {s.size}"))
        elif not (np.all(np.isfinite(u)) and np.all(np.isfinite(s))):
            problems.append(Problem("im", "non-finite values"))
        if (level is None) != (util_pct is None):
            problems.append(Problem("im", "give both U and its level per point, or neither"))
        if level is not None and util_pct is not None:
            lv, ou = _as_array(level), _as_array(util_pct)
            if not (lv.size == ou.size == u.size):
                problems.append(Problem("im", "U and level need one value per point"))
            elif not (np.all(np.isfinite(lv)) and np.all(np.isfinite(ou))):
                problems.append(Problem("im", "non-finite U or level"))
        else:
            lv, ou = np.zeros(u.size), np.zeros(u.size)
        if problems:
            raise InterferenceModel._refuse(problems)
        curves = []
        for key in np.unique(lv):
            g = lv == key
            curves.append((float(ou[g].mean()), *self._curve(u[g], s[g])))
        grid = np.unique(np.concatenate([c[1] for c in curves]))
        if grid.size < 2:
            raise InterferenceModel._refuse(
                [Problem("im", "need points at 2 or more total utilisations")]
            )
        curves.sort(key=lambda c: c[0])
        self.level_util_pct_ = np.array([c[0] for c in curves])
        """Mean measured U of each group (one group without levels)."""
        self.curves_ = [(c[1], c[2]) for c in curves]
        """Per group: (U_total knots, SF at each), SF monotone non-decreasing."""
        self.total_util_pct_ = grid
        """Every knot of every curve: the U_total axis of ``sf_``."""
        self.sf_ = np.vstack([np.interp(grid, x, y) for x, y in self.curves_])
        """Each curve on ``total_util_pct_`` (held flat beyond its own knots)."""
        self.lo_pct_ = np.array([x[0] for x, _ in self.curves_])
        self.hi_pct_ = np.array([x[-1] for x, _ in self.curves_])
        return self

    @staticmethod
    def _refuse(problems: list[Problem]) -> InputError:
        return InputError("interference model", problems)

    def _curve(self, u: FloatArray, s: FloatArray) -> tuple[FloatArray, FloatArray]:
        key = np.round(u / self.resolution_pct) * self.resolution_pct
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        mean_u = np.bincount(inverse, weights=u) / counts
        mean_s = np.bincount(inverse, weights=s) / counts
        fitted = isotonic_regression(mean_s, weights=counts.astype(float), increasing=True)
        return mean_u, np.maximum(np.asarray(fitted.x, dtype=float), 0.0)

    def _blend(self, util_pct: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
        """For each query U: its curve on ``total_util_pct_`` (rows; with one group, the one
        curve every query shares, 1-D), the U_total range that curve was measured over, and
        whether U lies outside the groups' range."""
        lv = self.level_util_pct_
        if lv.size == 1:
            n = util_pct.size
            return (
                self.sf_[0],
                np.full(n, self.lo_pct_[0]),
                np.full(n, self.hi_pct_[0]),
                np.zeros(n, dtype=bool),
            )
        k = np.clip(np.searchsorted(lv, util_pct, side="right") - 1, 0, lv.size - 2)
        w = np.clip((util_pct - lv[k]) / (lv[k + 1] - lv[k]), 0.0, 1.0)[:, None]
        rows = (1.0 - w) * self.sf_[k] + w * self.sf_[k + 1]
        wf = w[:, 0]
        lo = (1.0 - wf) * self.lo_pct_[k] + wf * self.lo_pct_[k + 1]
        hi = (1.0 - wf) * self.hi_pct_[k] + wf * self.hi_pct_[k + 1]
        return rows, lo, hi, (util_pct < lv[0]) | (util_pct > lv[-1])

    def predict(
        self, total_util_pct: float | FloatArray, util_pct: float | FloatArray | None = None
    ) -> Query:
        """SF at each total utilisation (for an instance at ``util_pct``; needed when the
        model has several groups)."""
        u = _as_array(total_util_pct)
        if util_pct is None:
            if self.level_util_pct_.size > 1:
                raise ValueError("this interference model needs the instance's U")
            own = np.zeros(u.size)
        else:
            u, own = np.broadcast_arrays(u, _as_array(util_pct))
        rows, lo, hi, off = self._blend(own)
        g = self.total_util_pct_
        j = np.clip(np.searchsorted(g, u, side="right") - 1, 0, g.size - 2)
        a = np.clip((u - g[j]) / (g[j + 1] - g[j]), 0.0, 1.0)
        value = (1.0 - a) * _at(rows, j) + a * _at(rows, j + 1)
        return Query(value, (u < lo) | (u > hi) | off)

    def inverse(self, sf: float | FloatArray, near_util_pct: float | FloatArray) -> Query:
        """U_total at each SF, for an instance at ``near_util_pct``. Where the model is flat
        (many U_total give the same SF, as at low load), the answer is the point of that
        interval nearest ``near_util_pct`` — for PRIMA the instance's own U, which reads a zero
        SF as "no neighbour load"."""
        s, near = np.broadcast_arrays(_as_array(sf), _as_array(near_util_pct))
        x = self.total_util_pct_
        rows, _, _, off = self._blend(near)
        top = rows[..., -1]
        clamped = (s > top) | off  # below the lowest SF is just "no more interference than that"
        sc = np.clip(s, rows[..., 0], top)
        lo = self._crossing(x, rows, sc, side="left")
        hi = self._crossing(x, rows, sc, side="right")
        return Query(np.clip(near, lo, hi), clamped)

    @staticmethod
    def _crossing(x: FloatArray, rows: FloatArray, s: FloatArray, side: str) -> FloatArray:
        """Per row (or on the one row all share), the smallest (``left``) or largest
        (``right``) U_total at which the row equals ``s`` (within the row's SF range). Between
        knots k−1 and k with y[k−1] < s ≤ y[k] (left) or y[k−1] ≤ s < y[k] (right),
        interpolate linearly."""
        k = _count_below(rows, s, side)  # rows are non-decreasing: the insertion point
        edge = k == 0 if side == "left" else k == x.size
        k = np.clip(k, 1, x.size - 1)
        y0, y1, x0, x1 = _at(rows, k - 1), _at(rows, k), x[k - 1], x[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(y1 > y0, (s - y0) / (y1 - y0), 1.0)
        out: FloatArray = np.where(
            edge, x[0] if side == "left" else x[-1], x0 + np.clip(frac, 0.0, 1.0) * (x1 - x0)
        )
        return out


def _at(rows: FloatArray, k: NDArray[np.intp]) -> FloatArray:
    """Element ``k[n]`` of row ``n`` (of the one row when ``rows`` is 1-D)."""
    if rows.ndim == 1:
        return rows[k]
    out: FloatArray = rows[np.arange(k.size), k]
    return out


def _count_below(rows: FloatArray, s: FloatArray, side: str) -> NDArray[np.intp]:
    """Per query, how many values of its row are below ``s[n]`` (``left``) or at most it
    (``right``). On one shared non-decreasing row that is a binary search (NaN compares below
    nothing); else a count over the rows."""
    if rows.ndim == 1 and bool(np.all(rows[1:] >= rows[:-1])):
        k = np.searchsorted(rows, s, side="left" if side == "left" else "right")
        k[np.isnan(s)] = 0
        return k
    below = rows < s[:, None] if side == "left" else rows <= s[:, None]
    out: NDArray[np.intp] = below.sum(axis=1)
    return out


class CapacityModel:
    """Effective capacity from RTM and IM (Section III-B2), for many instances at once.

    ``fit`` tabulates U_max as a function of U_int on a fine grid (``u_int_step_pct``), by
    evaluating RTM(U, IM(U + U_int)) on a fine U grid (``u_step_pct``) and taking the largest
    U before the prediction first exceeds R_th. ``capacity`` then costs one interpolation per
    instance, so a controller of 10,000 instances decides in milliseconds.
    """

    def __init__(
        self,
        rtm: ResponseTimeModel,
        im: InterferenceModel,
        target_rt_s: float,
        u_step_pct: float = 0.1,
        u_int_step_pct: float = 0.25,
    ) -> None:
        self.rtm = rtm
        self.im = im
        self.target_rt_s = target_rt_s
        self.u_step_pct = u_step_pct
        self.u_int_step_pct = u_int_step_pct

    def fit(self) -> CapacityModel:
        problems = [
            Problem(name, f"must be a positive number, not {value!r}")
            for name, value in (
                ("target_rt_s", self.target_rt_s),
                ("u_step_pct", self.u_step_pct),
                ("u_int_step_pct", self.u_int_step_pct),
            )
            if not (math.isfinite(value) and value > 0)
        ]
        problems.extend(
            Problem(name, "not fitted")
            for name, model, learned in (("rtm", self.rtm, "util_pct_"), ("im", self.im, "sf_"))
            if not hasattr(model, learned)
        )
        if problems:
            raise InputError("capacity model", problems)
        u_hi = float(self.rtm.util_pct_.max())
        self.u_grid_ = np.arange(0.0, u_hi + self.u_step_pct / 2, self.u_step_pct)
        x_hi = float(self.im.total_util_pct_[-1])
        self.u_int_grid_ = np.arange(0.0, x_hi + self.u_int_step_pct / 2, self.u_int_step_pct)
        uu = self.u_grid_[None, :]
        ui = self.u_int_grid_[:, None]
        own = np.broadcast_to(uu, (ui.size, uu.size)).ravel()
        sf = self.im.predict((uu + ui).ravel(), own).value.reshape(ui.size, uu.size)
        rt = self.rtm.predict(np.broadcast_to(uu, sf.shape).ravel(), sf.ravel())
        over = rt.value.reshape(sf.shape) > self.target_rt_s
        first_over = np.where(over.any(axis=1), over.argmax(axis=1), uu.size)
        self.u_max_pct_ = np.where(first_over > 0, self.u_grid_[np.maximum(first_over - 1, 0)], 0.0)
        self.u_max_pct_[first_over == uu.size] = u_hi
        self.at_model_edge_ = first_over == uu.size
        """Where even the highest modelled U stays under R_th: capacity is the model's edge."""
        self.sf_grid_ = np.linspace(self.rtm.sf_.min(), self.rtm.sf_.max(), 201)
        su = self.u_grid_[:, None]
        ss = self.sf_grid_[None, :]
        self.rt_table_s_ = self.rtm.predict(
            np.broadcast_to(su, (su.size, ss.size)).ravel(),
            np.broadcast_to(ss, (su.size, ss.size)).ravel(),
        ).value.reshape(su.size, ss.size)
        """RTM on the U grid × an SF grid, for calibration's inversion in SF."""
        return self

    def revised_sf(self, util_pct: FloatArray, rt_s: FloatArray) -> Query:
        """For each instance, the SF at which RTM(U, SF) reaches its measured response time
        (calibration, Section IV), from the tabulated RTM: the first SF grid step whose
        prediction reaches ``rt_s``, interpolated linearly; the top of the range, flagged,
        where none does."""
        u = _as_array(util_pct)
        r = _as_array(rt_s)
        row = np.clip(np.rint(u / self.u_step_pct).astype(np.int64), 0, self.u_grid_.size - 1)
        tab = self.rt_table_s_[row]
        reach = tab >= r[:, None]
        none = ~reach.any(axis=1)
        k = np.maximum(reach.argmax(axis=1), 1)
        n = np.arange(u.size)
        lo, hi = tab[n, k - 1], tab[n, k]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(hi > lo, (r - lo) / (hi - lo), 1.0)
        g = self.sf_grid_
        sf = g[k - 1] + np.clip(frac, 0.0, 1.0) * (g[k] - g[k - 1])
        sf = np.where(reach[:, 0], g[0], sf)
        sf = np.where(none, g[-1], sf)
        return Query(sf, np.asarray(none))

    def interference(self, util_pct: FloatArray, sf: FloatArray) -> Query:
        """U_int = IM⁻¹(SF) − U, never below zero."""
        total = self.im.inverse(sf, util_pct)
        return Query(np.maximum(total.value - util_pct, 0.0), total.clamped)

    def capacity_for(self, u_int_pct: FloatArray) -> Query:
        """U_max for the given neighbour loads (flagged beyond the tabulated range)."""
        g = self.u_int_grid_
        if self.at_model_edge_.any():
            edge = np.interp(u_int_pct, g, self.at_model_edge_.astype(float)) > 0
        else:  # the usual case: no neighbour load leaves the model's highest U under R_th
            edge = np.zeros(np.shape(u_int_pct), dtype=bool)
        clamped = (u_int_pct > g[-1]) | edge
        return Query(np.interp(u_int_pct, g, self.u_max_pct_), clamped)

    def capacity(self, util_pct: FloatArray, sf: FloatArray) -> tuple[Query, Query]:
        """(U_int, U_max) for instances measured at ``util_pct`` and ``sf``."""
        u_int = self.interference(_as_array(util_pct), _as_array(sf))
        cap = self.capacity_for(u_int.value)
        return u_int, Query(cap.value, cap.clamped | u_int.clamped)

    def rt_lookup(self, util_pct: FloatArray, sf: FloatArray) -> Query:
        """RTM from its table (bilinear between grid points), for many instances at once."""
        u, s = _as_array(util_pct), _as_array(sf)
        ug, sg = self.u_grid_, self.sf_grid_
        clamped = (u < 0) | (u > ug[-1]) | (s < sg[0]) | (s > sg[-1])
        fu = np.clip(u, 0.0, ug[-1]) / self.u_step_pct
        fs = (np.clip(s, sg[0], sg[-1]) - sg[0]) / (sg[1] - sg[0])
        iu = np.minimum(fu.astype(np.int64), ug.size - 2)
        js = np.minimum(fs.astype(np.int64), sg.size - 2)
        a, b = fu - iu, fs - js
        t = self.rt_table_s_
        row = t.shape[1]
        at = iu * row + js  # t[iu, js] in the flat table: one gather each instead of a 2-D one
        flat = t.ravel()
        rt = (
            flat[at] * (1 - a) * (1 - b)
            + flat[at + row] * a * (1 - b)
            + flat[at + 1] * (1 - a) * b
            + flat[at + row + 1] * a * b
        )
        return Query(rt, clamped)

    def predict_rt(self, util_pct: FloatArray, u_int_pct: FloatArray) -> Query:
        """RTM(U, IM(U + U_int)): the response time an instance would show at ``util_pct``."""
        u = _as_array(util_pct)
        sf = self.im.predict(u + _as_array(u_int_pct), u)
        rt = self.rt_lookup(util_pct, sf.value)
        return Query(rt.value, rt.clamped | sf.clamped)

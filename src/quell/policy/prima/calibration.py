"""PRIMA's runtime calibration (Section IV): the instances whose predicted response time at their
new share lies within ±δ (``DELTA``) of R_th are watched; while a watched instance measures above
its prediction, the SF that RTM needs to explain the measurement replaces the probe's (when higher),
which lowers its capacity. A revision goes when the instance measures at or below the prediction,
when it is no longer watched, or when its probe reads clearly less interference than at the
revision."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from quell.models.capacity import CapacityModel
from quell.policy.prima.capacity import CapacityAccount

FloatArray = NDArray[np.float64]

DELTA = 0.10
"""δ, relative to R_th: an instance is watched while its predicted RT lies within ±δ of R_th.
The paper's 10 % (Section VI-D, its ramp workload); no run here has varied it."""


class Calibration:
    """The watched instances (``watch_``) and their revised SFs (``calibrated_sf_``).

    Parameters
    ----------
    model : the capacity model (predicted RT, the SF that explains a measured RT).
    account : each instance's load once new weights are in force.
    target_rt_s : R_th.
    enabled : without calibration nothing is ever watched.
    """

    def __init__(
        self,
        model: CapacityModel,
        account: CapacityAccount,
        target_rt_s: float,
        enabled: bool,
    ) -> None:
        self.model = model
        self.account = account
        self.target_rt_s = target_rt_s
        self.enabled = enabled
        self.watch_: set[str] = set()
        self.calibrated_sf_: dict[str, float] = {}
        self.calibrated_at_sf_: dict[str, float] = {}
        """The probe's SF of each instance when its SF was revised."""

    def sf(
        self, ids: list[str], util: FloatArray, sf_probe: FloatArray, rt: list[float | None]
    ) -> tuple[FloatArray, NDArray[np.bool_]]:
        """The SF each instance is planned with, and whether it is a revised one, after this
        interval's measurements revised the watched instances' SFs and retired stale ones."""
        self._revise(ids, util, sf_probe, rt)
        self._expire(ids, sf_probe)
        if not self.calibrated_sf_:
            return sf_probe, np.zeros(len(ids), dtype=bool)
        revised = self.calibrated_sf_
        cal = np.fromiter((revised.get(i, 0.0) for i in ids), dtype=float, count=len(ids))
        calibrated = np.fromiter((i in revised for i in ids), dtype=bool, count=len(ids))
        return np.maximum(sf_probe, cal), calibrated

    def watch(self, keep: list[str], total_u: float, u_max: FloatArray, u_int: FloatArray) -> None:
        """Watch the instances whose predicted RT at their new share is within ±δ of R_th."""
        if not self.enabled or not keep:
            self.watch_ = set()
            self.calibrated_sf_ = {}
            self.calibrated_at_sf_ = {}
            return
        new_u = self.account.new_loads(keep, u_max, total_u)
        rt = self.model.predict_rt(new_u, u_int).value
        near = np.abs(rt - self.target_rt_s) <= DELTA * self.target_rt_s
        self.watch_ = {keep[k] for k in np.flatnonzero(near).tolist()}
        for gone in [i for i in self.calibrated_sf_ if i not in self.watch_]:
            del self.calibrated_sf_[gone]
            self.calibrated_at_sf_.pop(gone, None)

    def _revise(
        self, ids: list[str], util: FloatArray, sf_probe: FloatArray, rt: list[float | None]
    ) -> None:
        """For watched instances whose measured RT exceeds the prediction from the probe's SF,
        take the SF RTM needs to explain the measurement when it is higher; a watched instance
        measured at or below the prediction loses its revised SF."""
        if not self.watch_:
            return
        pick = [k for k, i in enumerate(ids) if i in self.watch_ and rt[k] is not None]
        if not pick:
            return
        names = [ids[k] for k in pick]
        u = util[pick]
        r = np.asarray([rt[k] for k in pick], dtype=float)
        sf = sf_probe[pick]
        predicted = self.model.predict_rt(u, self.model.interference(u, sf).value).value
        revised = self.model.revised_sf(u, r).value
        for name, over, new, old in zip(
            names, (r > predicted).tolist(), revised.tolist(), sf.tolist(), strict=True
        ):
            if over and new > old:
                self.calibrated_sf_[name] = new
                self.calibrated_at_sf_[name] = old
            else:
                self.calibrated_sf_.pop(name, None)
                self.calibrated_at_sf_.pop(name, None)

    def _expire(self, ids: list[str], sf_probe: FloatArray) -> None:
        """A revised SF describes the conditions it was measured in: drop it once the probe
        reads clearly less interference than then (the neighbour has left). An instance whose
        revision took its load away is not measured again, so without this it would keep the
        revised SF, and no capacity, for ever."""
        if not self.calibrated_sf_:
            return
        now = dict(zip(ids, sf_probe.tolist(), strict=True))
        for name in list(self.calibrated_sf_):
            then = self.calibrated_at_sf_.get(name, 0.0)
            if name not in now or now[name] < then - max(0.1, 0.5 * then):
                del self.calibrated_sf_[name]
                self.calibrated_at_sf_.pop(name, None)

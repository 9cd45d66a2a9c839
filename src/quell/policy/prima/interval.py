"""What one PRIMA decision sees of the instances it weighs, once their capacities are known."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """The serving instances of one interval: their loads and capacities (arrays in the order of
    ``ids``), the total load U, the sentence that says how U stands against the capacity, and
    the decision's ``detail`` being filled in."""

    ids: list[str]
    total_u: float
    util: FloatArray
    u_max: FloatArray
    u_int: FloatArray
    state: str
    detail: dict[str, object]

    def without(self, drop: Sequence[str]) -> tuple[NDArray[np.bool_], Interval]:
        """A mask over ``ids`` that leaves out ``drop``, and the instances it keeps (in order,
        with the same U, sentence and detail)."""
        gone = set(drop)
        mask = np.fromiter((i not in gone for i in self.ids), dtype=bool, count=len(self.ids))
        keep = [i for i in self.ids if i not in gone]
        kept = replace(
            self, ids=keep, util=self.util[mask], u_max=self.u_max[mask], u_int=self.u_int[mask]
        )
        return mask, kept

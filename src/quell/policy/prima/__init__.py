"""PRIMA (Mukherjee and Krishnamurthy; Section III-B3, calibration of Section IV), in parts:

* ``params``: ``PrimaParams``, the scenario's ``policy.params``;
* ``inputs``: what a snapshot says of the serving instances (U, SF from the probe, RT);
* ``calibration``: SFs revised from measured response times;
* ``capacity``: the capacity against the load, the probe's share, the split of the requests;
* ``interval``: what one decision sees of the instances it weighs;
* ``scale_out`` and ``scale_in``: adding instances on a lasting shortfall, removing the ones
  the load does not need after a trial;
* ``controller``: ``PrimaPolicy``, which composes them.

The votes and the trial are ``quell.policy.hysteresis``'s.
"""

from __future__ import annotations

from quell.policy.prima.controller import PrimaPolicy, instance_rows
from quell.policy.prima.params import PrimaParams

__all__ = ["PrimaParams", "PrimaPolicy", "instance_rows"]

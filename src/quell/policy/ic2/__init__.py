"""IC2 (Maji et al., "Mitigating Interference in Cloud Services by Middleware
Reconfiguration"), in parts:

* ``knowledge``: the knowledge base of Table 3 (context change → which settings move which
  way);
* ``update``: Algorithm 1's update functions over the settings in force, within bounds;
* ``params``: ``Ic2Params``, the scenario's ``policy.params``, and the bounds they resolve to;
* ``controller``: ``Ic2Policy``: features → detector (``quell.detect``) → the state machine
  (``quell.policy.hysteresis``) → ``ReconfigureServer``.
"""

from __future__ import annotations

from quell.policy.ic2.controller import Ic2Policy
from quell.policy.ic2.params import Ic2Params

__all__ = ["Ic2Params", "Ic2Policy"]

"""IC2's knowledge base (Table 3): for a change of context, which settings move which way.

It holds directions, not values: Algorithm 1 (``quell.policy.ic2.update``) gives the sizes.
The paper's IC2 uses the third row (an increased last-level-cache miss rate: a neighbour
thrashing the shared cache) and moves all three settings at once; the other rows are the
paper's too, for servers whose context changes otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

Setting = Literal["max_request_workers", "keepalive_timeout_s", "php_max_children"]
SETTINGS: Final[tuple[Setting, ...]] = (
    "max_request_workers",
    "keepalive_timeout_s",
    "php_max_children",
)
"""The three settings IC2 reconfigures: Apache's MaxRequestWorkers (the paper's MaxClients,
MXC), KeepAliveTimeout (KAT) and php-fpm's pm.max_children (PHP); the keys of
``ReconfigureServer.settings`` and of ``SERVER_SETTING_KEYS``."""

ContextChange = Literal[
    "increased_workload",
    "increased_vcpu_ratio",
    "increased_llc_miss_rate",
    "increased_host_memory_contention",
    "increased_page_faults",
]
Direction = Literal[-1, 1]

KNOWLEDGE_BASE: Final[Mapping[ContextChange, Mapping[Setting, Direction]]] = {
    # Increased workload (high idle memory): MXC ↑ and PHP ↑
    "increased_workload": {"max_request_workers": 1, "php_max_children": 1},
    # Increased virtual/physical CPU ratio: MXC ↓ and KAT ↑
    "increased_vcpu_ratio": {"max_request_workers": -1, "keepalive_timeout_s": 1},
    # Increased LLC miss rate: MXC ↓, KAT ↑, PHP ↑ (the row IC2 uses)
    "increased_llc_miss_rate": {
        "max_request_workers": -1,
        "keepalive_timeout_s": 1,
        "php_max_children": 1,
    },
    # Increased host memory contention: MXC ↓ and PHP ↓
    "increased_host_memory_contention": {"max_request_workers": -1, "php_max_children": -1},
    # Increased page faults (active memory low): PHP ↓
    "increased_page_faults": {"php_max_children": -1},
}
"""Table 3: context change → the settings it moves and which way (+1 up, −1 down); a setting
not in a row stays."""

PAPER_ROW: Final[ContextChange] = "increased_llc_miss_rate"


__all__ = [
    "KNOWLEDGE_BASE",
    "PAPER_ROW",
    "SETTINGS",
    "ContextChange",
    "Direction",
    "Setting",
]

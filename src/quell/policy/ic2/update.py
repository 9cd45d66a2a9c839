"""IC2's update functions (Algorithm 1), directed by the knowledge base (Table 3).

On entering I2, from the settings in force:

* δMXC = MXC × (LPO − LPO_noinf_median) / LPO — cut the workers in proportion to the rise in
  CPU per request (the server's CPU demand rose by that share; fewer workers bring it back);
* δKAT = δresponse × C_KAT, δresponse = RT − RT_noinf_median — keep idle connections longer by
  a multiple of the rise in response time (the request cycle got longer);
* PHP → the interference value (the paper: 400 on its 2-vCPU VM against a baseline of 50).

The knowledge base's row gives each setting's direction; the formulas give the sizes (a rise
that is not there — LPO or RT at or below its clean median — moves nothing). Each new value is
kept within its bounds ("checkBounds": so that throughput does not degrade alarmingly), and
MaxRequestWorkers is rounded to the nearest multiple of ThreadsPerChild when that is known
(Apache would silently lower any other value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from quell.core.observation import SERVER_SETTING_KEYS
from quell.policy.ic2.knowledge import Direction, Setting


@dataclass(frozen=True)
class Settings:
    """The three settings IC2 moves, as Apache and php-fpm take them."""

    max_request_workers: int
    keepalive_timeout_s: float
    php_max_children: int

    def as_dict(self) -> dict[str, int | float]:
        return {
            "max_request_workers": self.max_request_workers,
            "keepalive_timeout_s": self.keepalive_timeout_s,
            "php_max_children": self.php_max_children,
        }

    def changed(self, other: Settings) -> dict[str, int | float]:
        """The settings of ``other`` that differ from these."""
        mine = self.as_dict()
        return {k: v for k, v in other.as_dict().items() if mine[k] != v}

    @classmethod
    def in_force(cls, extra: Mapping[str, float], fallback: Settings) -> Settings:
        """The settings the instance reports (``SERVER_SETTING_KEYS`` in its observation's
        ``extra``), each one it does not report taken from ``fallback``."""

        def read(setting: Setting) -> float | None:
            value = extra.get(SERVER_SETTING_KEYS[setting])
            return None if value is None or not math.isfinite(value) else value

        mxc = read("max_request_workers")
        kat = read("keepalive_timeout_s")
        php = read("php_max_children")
        return cls(
            fallback.max_request_workers if mxc is None else round(mxc),
            fallback.keepalive_timeout_s if kat is None else float(kat),
            fallback.php_max_children if php is None else round(php),
        )


@dataclass(frozen=True)
class Bounds:
    low: Settings
    high: Settings


@dataclass(frozen=True)
class Evidence:
    """What the interval(s) that led to I2 showed, against the clean medians (``None``: not
    known yet)."""

    lpo_cpu_s_per_req: float | None
    lpo_clean_cpu_s_per_req: float | None
    rt_s: float | None
    rt_clean_s: float | None


def _clamp(value: float, low: float, high: float) -> tuple[float, bool]:
    out = min(max(value, low), high)
    return out, out != value


def round_workers(value: float, threads_per_child: int | None) -> int:
    """``value`` to the nearest whole number of workers, and to the nearest multiple of
    ``threads_per_child`` when it is known (half-way rounds up)."""
    step = threads_per_child or 1
    return math.floor(value / step + 0.5) * step


def reconfigure_for_interference(
    now: Settings,
    evidence: Evidence,
    row: Mapping[Setting, Direction],
    bounds: Bounds,
    c_kat: float,
    php_interference: int,
    threads_per_child: int | None = None,
) -> tuple[Settings, dict[str, object]]:
    """Algorithm 1 from the settings ``now`` in force: the new settings, and the numbers behind
    each (JSON-ready) — raw δ, whether a bound held it back, why a setting did not move."""
    out = now
    detail: dict[str, object] = {}
    lo, hi = bounds.low, bounds.high

    d = row.get("max_request_workers")
    if d is not None:
        lpo, clean = evidence.lpo_cpu_s_per_req, evidence.lpo_clean_cpu_s_per_req
        mxc: dict[str, object] = {"direction": d, "lpo_cpu_s_per_req": lpo, "lpo_clean": clean}
        if lpo is None or clean is None or lpo <= 0:
            mxc["held"] = "no LPO or no clean LPO median yet"
        else:
            delta = now.max_request_workers * (lpo - clean) / lpo
            raw = now.max_request_workers + d * max(delta, 0.0)
            value, bounded = _clamp(raw, lo.max_request_workers, hi.max_request_workers)
            workers = round_workers(value, threads_per_child)
            mxc.update(delta=delta, raw=raw, bounded=bounded, value=workers)
            out = replace(out, max_request_workers=workers)
        detail["max_request_workers"] = mxc

    d = row.get("keepalive_timeout_s")
    if d is not None:
        rt, clean = evidence.rt_s, evidence.rt_clean_s
        kat: dict[str, object] = {"direction": d, "rt_s": rt, "rt_clean_s": clean}
        if rt is None or clean is None:
            kat["held"] = "no response time or no clean median yet"
        else:
            delta = (rt - clean) * c_kat
            raw = now.keepalive_timeout_s + d * max(delta, 0.0)
            value, bounded = _clamp(raw, lo.keepalive_timeout_s, hi.keepalive_timeout_s)
            kat.update(delta_s=delta, raw_s=raw, bounded=bounded, value_s=round(value, 3))
            out = replace(out, keepalive_timeout_s=round(value, 3))
        detail["keepalive_timeout_s"] = kat

    d = row.get("php_max_children")
    if d is not None:
        value, bounded = _clamp(php_interference, lo.php_max_children, hi.php_max_children)
        detail["php_max_children"] = {"direction": d, "value": int(value), "bounded": bounded}
        out = replace(out, php_max_children=int(value))
    return out, detail


__all__ = [
    "Bounds",
    "Evidence",
    "Settings",
    "reconfigure_for_interference",
    "round_workers",
]

"""IC2's parameters, as a scenario's ``policy.params`` gives them (flat keys), and the bounds
and interference values they resolve to.

Defaults where the paper gives no number (``docs/ic2.md`` says why):

* MaxRequestWorkers within [baseline / 2, baseline × 2] (multiples of ThreadsPerChild when it
  is known): the paper's optimum under its strongest interference was 0.65 × the baseline's;
  a floor at half keeps the throughput from "degrading alarmingly";
* KeepAliveTimeout within [baseline / 4, baseline × 4]: the paper's curves run from 2 to 40 s
  around a baseline of 5 s;
* PhpMaxChildren within [baseline / 8, baseline × 8], and the interference value 8 × the
  baseline for a row that raises it (the paper's 400 against 50), baseline / 8 for one that
  lowers it.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quell.policy.ic2.knowledge import (
    KNOWLEDGE_BASE,
    PAPER_ROW,
    SETTINGS,
    ContextChange,
    Direction,
    Setting,
)
from quell.policy.ic2.update import Bounds, Settings

MXC_FACTOR = 2
KAT_FACTOR = 4
PHP_FACTOR = 8

Workers = Annotated[int, Field(ge=1, le=100_000)]
Seconds = Annotated[float, Field(gt=0, le=3600)]


class Ic2Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    detector: Annotated[str, Field(min_length=1)]
    """Path of the detector bundle (relative to the scenario file)."""
    workload: str | None = None
    """If set, the detector must have been trained on this workload."""

    max_request_workers: Workers
    """The baseline (no-interference) MaxRequestWorkers: what NI2 returns to."""
    keepalive_timeout_s: Seconds
    """The baseline KeepAliveTimeout."""
    php_max_children: Workers
    """The baseline php-fpm pm.max_children."""
    threads_per_child: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Apache's ThreadsPerChild, if known: MaxRequestWorkers is kept a multiple of it."""

    min_max_request_workers: Workers | None = None
    max_max_request_workers: Workers | None = None
    min_keepalive_timeout_s: Seconds | None = None
    max_keepalive_timeout_s: Seconds | None = None
    min_php_max_children: Workers | None = None
    max_php_max_children: Workers | None = None
    interference_php_max_children: Workers | None = None
    """PHP under interference (the paper: 400 for 2 vCPUs); default in the module docstring."""

    c_kat: Annotated[float, Field(ge=0, le=1000)] = 3.0
    """C_KAT: KeepAliveTimeout grows by this times the rise in response time (the paper: 3)."""
    context_change: ContextChange = PAPER_ROW
    """The knowledge base's row the reconfiguration follows (the paper: increased LLC miss
    rate)."""
    directions: str | None = None
    """A row given directly instead, comma-separated signed setting names: ``+`` moves the
    setting up under interference, ``-`` down (``"+max_request_workers,-keepalive_timeout_s"``);
    a setting it leaves out stays. For a service whose own sweeps (``quell ic2 sweep``) put
    its optimum under interference where the paper's row does not point. Overrides
    ``context_change``."""
    graceful: bool = True
    """True: reconfigure by a graceful restart (the paper's httpd-basic, ``apachectl -k
    graceful``); False: online, without restarting the workers (its httpd-online)."""
    online_settings: str = "max_request_workers,php_max_children"
    """With ``graceful`` False, the settings reconfigured, comma-separated (the others stay as
    they are): what the environment can change without restarting the web server. The default
    is what the paper's httpd-online changed without a restart of Apache's children:
    MaxRequestWorkers, and php-fpm's pool by a reload of php-fpm. The lab changes
    MaxRequestWorkers online as HAProxy's maxconn and max_children by reloading php-fpm alone,
    and refuses KeepAliveTimeout online (the paper patched Apache for it); the simulator can
    change all three."""
    states: Literal[2, 5] = 5
    """The state machine: 5 (NI2/NI1/T/I1/I2, the paper's EC2 one) or 2 (its testbed's)."""
    qos_rt_s: Annotated[float, Field(gt=0)] | None = None
    """If set, an I verdict while the baseline is in force counts only when the response time
    is above this (the paper's trigger "ignores cases where response time was within QoS");
    below it the verdict counts as T. None: every I verdict counts."""
    clean_window_intervals: Annotated[int, Field(ge=1, le=100_000)] = 60
    """LPO_noinf_median and RT_noinf_median: medians over the last this many clean intervals
    (NI verdicts in NI2 with the baseline in force)."""
    evidence_intervals: Annotated[int, Field(ge=1, le=1000)] = 3
    """LPO and RT for Algorithm 1: medians over the last this many I verdicts before I2."""

    @property
    def online(self) -> frozenset[str]:
        """``online_settings`` as a set of names."""
        return frozenset(n.strip() for n in self.online_settings.split(",") if n.strip())

    @property
    def baseline(self) -> Settings:
        return Settings(self.max_request_workers, self.keepalive_timeout_s, self.php_max_children)

    @property
    def row(self) -> dict[Setting, Direction]:
        if self.directions is not None:
            return _parse_directions(self.directions)[0]
        return dict(KNOWLEDGE_BASE[self.context_change])

    @property
    def row_name(self) -> str:
        """What the reasons call the row: the knowledge base's context change, or "the given
        directions"."""
        if self.directions is not None:
            return "the given directions"
        return self.context_change

    def _step(self) -> int:
        return self.threads_per_child or 1

    def bounds(self) -> Bounds:
        step = self._step()
        mxc, kat, php = self.max_request_workers, self.keepalive_timeout_s, self.php_max_children
        return Bounds(
            Settings(
                self.min_max_request_workers or step * max(1, math.ceil(mxc / MXC_FACTOR / step)),
                self.min_keepalive_timeout_s or kat / KAT_FACTOR,
                self.min_php_max_children or max(1, math.ceil(php / PHP_FACTOR)),
            ),
            Settings(
                self.max_max_request_workers or step * (mxc * MXC_FACTOR // step),
                self.max_keepalive_timeout_s or kat * KAT_FACTOR,
                self.max_php_max_children or php * PHP_FACTOR,
            ),
        )

    def php_interference(self) -> int:
        """PHP under interference: as given, else 8 × the baseline (or / 8 for a row that
        lowers it) within the bounds."""
        if self.interference_php_max_children is not None:
            return self.interference_php_max_children
        b = self.bounds()
        up = self.row.get("php_max_children", 1) > 0
        value = (
            self.php_max_children * PHP_FACTOR
            if up
            else math.ceil(self.php_max_children / PHP_FACTOR)
        )
        return min(max(value, b.low.php_max_children), b.high.php_max_children)

    @model_validator(mode="after")
    def _consistent(self) -> Ic2Params:
        if self.directions is not None:
            wrong = _parse_directions(self.directions)[1]
            if wrong:
                raise ValueError("; ".join(wrong))
        b = self.bounds()
        problems = []
        for name in ("max_request_workers", "keepalive_timeout_s", "php_max_children"):
            low, base, high = (getattr(s, name) for s in (b.low, self.baseline, b.high))
            if not low <= base <= high:
                problems.append(f"{name}: bounds [{low}, {high}] must hold the baseline {base}")
        step = self._step()
        if step > 1:
            for name, v in (
                ("max_request_workers", self.max_request_workers),
                ("min_max_request_workers", b.low.max_request_workers),
                ("max_max_request_workers", b.high.max_request_workers),
            ):
                if v % step:
                    problems.append(f"{name} ({v}) must be a multiple of threads_per_child")
        php = self.php_interference()
        d = self.row.get("php_max_children")
        if not b.low.php_max_children <= php <= b.high.php_max_children:
            problems.append(f"interference_php_max_children ({php}) must lie within the bounds")
        elif d is not None and (php - self.php_max_children) * d <= 0:
            way = "above" if d > 0 else "below"
            problems.append(
                f"interference_php_max_children ({php}) must lie {way} the baseline"
                f" ({self.php_max_children}): {self.row_name} moves it that way"
            )
        known = {"max_request_workers", "keepalive_timeout_s", "php_max_children"}
        unknown = sorted(self.online - known)
        if unknown or not self.online:
            problems.append(
                f"online_settings ({self.online_settings!r}) must name one or more of"
                f" {', '.join(sorted(known))}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _parse_directions(text: str) -> tuple[dict[Setting, Direction], list[str]]:
    """``directions`` as a row, and what is wrong with it (each item by name)."""
    row: dict[Setting, Direction] = {}
    wrong: list[str] = []
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        wrong.append("directions must name one or more settings (or be left out)")
    for item in items:
        sign, name = item[:1], item[1:].strip()
        if sign not in ("+", "-") or name not in SETTINGS:
            wrong.append(f"directions: {item!r} must be + or - and one of {', '.join(SETTINGS)}")
        elif name in row:
            wrong.append(f"directions: {name} is given twice")
        else:
            row[name] = 1 if sign == "+" else -1
    return row, wrong


__all__ = ["Ic2Params"]

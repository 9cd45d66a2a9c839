"""IC2's parameters, as a scenario's ``policy.params`` gives them (flat keys), and the bounds
and interference values they resolve to.

Each field says what it does and why it is there: the measurement that justifies it and where
it is recorded (docs/papers/ic2.md for how each run was made, docs/results/ic2.md for the
generated tables), or, where nothing measured it, which scenario sets it and why.

Where the paper gives no number (docs/papers/ic2.md says why):

* MaxRequestWorkers within [baseline / 2, baseline × 2] (multiples of ThreadsPerChild when it
  is known; the ceiling can be given, ``max_max_request_workers``): the paper's optimum under
  its strongest interference was 0.65 × the baseline's; a floor at half keeps the throughput
  from "degrading alarmingly";
* KeepAliveTimeout within [baseline / 4, baseline × 4]: the paper's curves run from 2 to 40 s
  around a baseline of 5 s;
* PhpMaxChildren within [baseline / 8, baseline × 8], and the interference value 8 × the
  baseline for a row that raises it (the paper's 400 against 50), baseline / 8 for one that
  lowers it.

The reconfiguration follows the knowledge base's row for an increased LLC miss rate (the
paper's IC2, ``PAPER_ROW``) unless ``directions`` gives another; the state machine is the
paper's five-state one (``ContextChain``); every I verdict counts, as the detector gives it.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quell.policy.ic2.knowledge import (
    KNOWLEDGE_BASE,
    PAPER_ROW,
    SETTINGS,
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

    # -- the detector -------------------------------------------------------------------------
    detector: Annotated[str, Field(min_length=1)]
    """Path of the detector bundle (relative to the scenario file). Every IC2 scenario names
    one; the lab's (``models/lab/detector.json``) scored recall 0.990 and precision 1.000 over
    ten fresh lab runs, detection and clearing 3 s (docs/papers/ic2.md; docs/results/ic2.md,
    Detection)."""
    workload: str | None = None
    """If set, the detector must have been trained on this workload. Every IC2 scenario sets it
    (``ic2-lab-php16m-40users``, ``ic2-sim-onoff``) so that a detector trained on another
    service is refused; there is nothing to measure."""

    # -- the baseline configuration -----------------------------------------------------------
    max_request_workers: Workers
    """The baseline (no-interference) MaxRequestWorkers, what NI2 returns to: the service's
    own configuration, which every IC2 scenario gives (32 in the lab, 375 in the simulator)
    and the sweeps measure around (docs/results/ic2.md, configuration sweeps)."""
    keepalive_timeout_s: Seconds
    """The baseline KeepAliveTimeout: the service's own (5 s in the lab and the simulator, as
    the paper's), which every IC2 scenario gives."""
    php_max_children: Workers
    """The baseline php-fpm pm.max_children: the service's own (8 in the lab, 100 in the
    simulator), which every IC2 scenario gives."""
    threads_per_child: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Apache's ThreadsPerChild, if known: MaxRequestWorkers is kept a multiple of it, as Apache
    silently lowers any other value to one. Every IC2 scenario gives its service's (8 in the
    lab, 25 in the simulator); there is nothing to measure."""

    # -- Algorithm 1 --------------------------------------------------------------------------
    max_max_request_workers: Workers | None = None
    """The ceiling of MaxRequestWorkers (default: 2 × the baseline). The lab's Table 4
    scenarios and its training spec set 128, all that their Apache runs (ServerLimit 16 ×
    ThreadsPerChild 8) and where the lab service's MaxRequestWorkers sweep found its best value
    in every condition (docs/results/ic2.md, ic2-lab-sweep-mrw)."""
    interference_php_max_children: Workers | None = None
    """PHP under interference (the paper: 400 for 2 vCPUs; default in the module docstring).
    The simulator's scenarios set 150, not 8 × the baseline, as the workers and children at
    the baseline already fill its 1 GB and 800 children would swap (docs/reference/simulator.md);
    no run has varied it."""
    c_kat: Annotated[float, Field(ge=0, le=1000)] = 3.0
    """C_KAT: KeepAliveTimeout moves by this times the rise in response time (the paper: 3).
    ``lab-table4-own-row-ckat.yaml`` sets 10.8, this service's counterpart of the paper's 3
    from its own sweep: over 3 lab repeats it left 52 users' timeouts under interference
    against the fixed configuration's 224 (with 3: 260 against 226), while what users waited
    stayed within its scatter (docs/results/ic2.md, lab-own-row-ckat)."""
    directions: str | None = None
    """The row to follow instead of the paper's, comma-separated signed setting names: ``+``
    moves the setting up under interference, ``-`` down
    (``"+max_request_workers,-keepalive_timeout_s"``); a setting it leaves out stays. For a
    service whose own sweeps (``quell ic2 sweep``) put its optimum under interference where the
    paper's row does not point. The lab's own-row Table 4 scenarios set the row the lab
    service's sweeps call for; over 3 repeats every cut stayed within its standard error
    (docs/results/ic2.md, lab-own-row)."""

    # -- how the server is reconfigured -------------------------------------------------------
    graceful: bool = True
    """True: reconfigure by a graceful restart (the paper's httpd-basic, ``apachectl -k
    graceful``); False: online, without restarting the workers (its httpd-online). The Table 4
    scenarios run both: in the lab, by what users waited over 4 runs, graceful was 40.7 ± 12.5
    % slower than the fixed configuration in the first 60 s and online 2.1 ± 6.8 % faster; in
    the simulator both cut the mean response time under interference by 47 % (by send time,
    seed 3) (docs/results/ic2.md, Table 4: lab and sim-onoff)."""
    online_settings: str = "max_request_workers,php_max_children"
    """With ``graceful`` False, the settings reconfigured, comma-separated (the others stay as
    they are): what the environment can change without restarting the web server. The default
    is what the paper's httpd-online changed without a restart of Apache's children:
    MaxRequestWorkers, and php-fpm's pool by a reload of php-fpm; the lab refuses
    KeepAliveTimeout online (the paper patched Apache for it). The simulator, which can change
    all three, sets all three in ``sim-onoff.yaml`` (the mean response time under interference
    −47.4 % by send time, seed 3; docs/reference/simulator.md)."""

    prefer_online: bool = True
    """With ``graceful`` True, a change whose every setting is in ``online_settings`` is made
    online all the same: a graceful restart costs what an online change does not (in the lab's
    Table 4 graceful IC2 made users wait 40.7 ± 12.5 % longer than the fixed configuration in
    the first 60 s, 602 timeouts against 272; online 2.1 ± 6.8 % less), so it is chosen only
    for a setting that cannot change online. False: every change graceful, the paper's
    httpd-basic, which the Table 4 scenarios that measure it set (``lab-table4.yaml``,
    ``lab-table4-own-row*.yaml``, ``sim-onoff.yaml``) and the simulator's training spec."""
    guard: bool = True
    """Check each reconfiguration for interference by what users then wait and revert it when
    they wait longer beyond the scatter (``quell.policy.guard``; docs/reference/policies.md).
    On ``sim-onoff.yaml``'s first interference period over seeds 3-7 it kept all 10 of IC2's
    changes, graceful and online, and it reverts a change that makes the instance swap 20 s
    after it (``tests/sim/test_sim_guard.py``). False: the paper's IC2, which keeps whatever
    Algorithm 1 chose; the lab's Table 4 scenarios and the simulator's training spec set it to
    reproduce the paper, ``lab-table4-guard.yaml`` runs Table 4 with it on."""

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
        return dict(KNOWLEDGE_BASE[PAPER_ROW])

    @property
    def row_name(self) -> str:
        """What the reasons call the row: the knowledge base's context change, or "the given
        directions"."""
        if self.directions is not None:
            return "the given directions"
        return PAPER_ROW

    def _step(self) -> int:
        return self.threads_per_child or 1

    def bounds(self) -> Bounds:
        step = self._step()
        mxc, kat, php = self.max_request_workers, self.keepalive_timeout_s, self.php_max_children
        return Bounds(
            Settings(
                step * max(1, math.ceil(mxc / MXC_FACTOR / step)),
                kat / KAT_FACTOR,
                max(1, math.ceil(php / PHP_FACTOR)),
            ),
            Settings(
                self.max_max_request_workers or step * (mxc * MXC_FACTOR // step),
                kat * KAT_FACTOR,
                php * PHP_FACTOR,
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

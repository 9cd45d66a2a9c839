"""PRIMA's parameters, as a scenario's ``policy.params`` gives them.

Each field says what it does and why it is there: the measurement that justifies it and where
it is recorded (docs/papers/prima.md for how each run was made, docs/results/prima.md for the
generated tables), or, where nothing measured it, which scenario sets it and why. Defaults are
the paper's PRIMA except where a field says otherwise."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PAPER: dict[str, object] = {
    "sf_window": 3,
    "min_room_pct": 0.0,
    "fast_interval_s": None,
    "host_memory_s": None,
    "scale_in_partial": False,
    "drop_idle_intervals": None,
}
"""The paper's PRIMA (``preset: paper``): each field whose default is a measured choice, at the
value that reads the paper as written (the others' defaults are the paper's). A field a
scenario gives still wins."""


class PrimaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: Literal["defaults", "paper"] = "defaults"
    """``defaults``: every field not given takes the default below, chosen by runs over seeds of
    the simulated Tables VIII-X, prima-sim-1000 and the demo, and judged on a scenario nobody
    chose them on (docs/papers/prima.md, the defaults); ``paper``: the paper's PRIMA
    (``PAPER``), which the lab's reproductions of its tables run with their own settings on
    top."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") == "paper":
            return {**PAPER, **data}
        return data

    # -- the models ---------------------------------------------------------------------------
    model: Annotated[str, Field(min_length=1)]
    """Path of the model bundle (relative to the scenario file). Every PRIMA scenario names
    one; the lab's file model reads RTM 2.2 % and IM 6.5 % mean error on 10 held-out points
    against the paper's 7.2 and 6.9 % (docs/results/prima.md, model validation)."""
    workload: str | None = None
    """If set, the bundle must have been built for this workload. The lab scenarios set it
    (``file-100k``, ``video-lab``) so that a bundle built for another workload is refused;
    there is nothing to measure."""

    # -- reading the probe and the load -------------------------------------------------------
    sf_window: Annotated[int, Field(ge=1, le=100)] = 1
    """SF of an instance: Eq. 1 on the mean probe time of its last this many samples (1: the
    last sample; the paper's 3 with ``preset: paper``). With the fast path the last sample
    wins: prima-sim-1000 (seeds 1000-1001) 99.57 / 99.12 % of settled / all instance-intervals
    at 1.28× the oracle against 98.32 / 97.79 % at 1.29× with 3 and ``sf_jump`` 1 (and
    ``util_window`` 3), the simulated Tables VIII-X within half a point either way. The lab
    demo sets 5: with 3 a run made 9 scaling actions, with 5 two runs made 4 each, every one
    answering a change (docs/papers/prima.md)."""
    sf_jump: Annotated[float, Field(gt=0, le=100)] | None = None
    """With ``sf_window`` > 1: a probe sample whose time relative to R_iso exceeds the window's by
    more than the factor 1 + this starts the window again from it, so a neighbour that has just
    arrived is read at once rather than averaged with the samples from before it
    (``SeverityEstimator``); ``None``: the window as it is. The simulated Tables VIII-X's ``tuned``
    rows set 1.0: Table IX over 5 seeds 98.86 % of settled / 95.32 % of all instance-intervals at
    0.98× the oracle's instance-seconds against 98.11 / 94.54 % at 1.02× without, VIII level (99.14
    against 99.13 % settled) and X identical (docs/papers/prima.md)."""
    sf_confidence_z: Annotated[float, Field(ge=0, le=10)] | None = None
    """An SF estimate counts only above this many standard errors of the probe's own scatter
    in isolation (the profile's spread at each sample's U, over the window's samples); at or
    below, it reads 0 (``SeverityEstimator``). ``None``: every estimate counts, as the paper.
    The lab demo sets 2.33: in six lab runs with it PRIMA made no scaling action in a phase
    where nothing changed, where each of the four runs before it scaled on an unchanged load
    (docs/results/prima.md, prima-demo, 3 repeats twice; docs/papers/prima.md)."""
    util_window: Annotated[int, Field(ge=1, le=100)] = 1
    """U of an instance (and the total load): mean of its last this many intervals' utilisations (1:
    this interval's, as the paper with its 10 s period); the probe's SF is read at the interval's
    own U. The simulated Tables VIII-X's ``tuned`` rows set 3, with ``scale_in_partial`` and a 5 %
    headroom (5 seeds: Table X 100.0 % settled at 1.24× the oracle against 99.17 % at 1.38× with 1
    and 10 %), and the lab demo sets 3 for its 1 s intervals (docs/papers/prima.md)."""
    warmup_intervals: Annotated[int, Field(ge=0, le=1000)] = 0
    """The first this many intervals PRIMA sets weights but neither scales nor counts them
    toward a scale-out or scale-in, while its windows fill and the service and the probe start.
    The lab demo sets 5: a run without it scaled out at 2 s on its first readings (U 36.3 %
    against 25 % offered), and no run with it has scaled in its first 5 s
    (docs/papers/prima.md; docs/results/prima.md, prima-demo)."""

    # -- calibration (Section IV) -------------------------------------------------------------
    calibrate: bool = True
    """Watch the instances whose predicted RT lies within 10 % of R_th and, while one measures
    above its prediction, plan it with the SF the RTM needs to explain the measurement. The
    lab's Table VII ramp read 22.6 ms after the neighbours both with it (the paper's Section
    VI-D, ``table7-ramp-calibrate-lab.yaml``) and without it in the same sitting, so the other
    lab table scenarios set ``false`` and the simulator's run it (docs/papers/prima.md;
    docs/results/prima.md, prima-table7-ramp-calibrate)."""

    # -- capacity and weights -----------------------------------------------------------------
    safety_factor: Annotated[float, Field(ge=0, le=10)] = 0.0
    """Plan capacity for U × (1 + this), so an instance's share stays this much below its U_max
    (the paper's factor of safety). The lab's Table VI sets 0.1, with which PRIMA met R_th in
    every phase (docs/results/prima.md, prima-table6-video); on prima-sim-1000 0.2 bought
    97.07 % of settled instance-intervals at 1.54× the oracle against 96.89 % at 1.32× without
    (docs/papers/prima.md)."""
    min_room_pct: Annotated[float, Field(ge=0, le=100)] = 3.0
    """An instance with less than this U left for requests (U_max less its probe) gets weight 0,
    though its capacity still counts in ΣU_max: behind a strong neighbour an instance's RT has a
    floor no share lowers, and the model, clamped at its edge, leaves it a few per cent (0 with
    ``preset: paper``). 3, measured before it was the default: prima-sim-1000 96.89 / 95.09 % of
    settled / all instance-intervals at 1.32× the oracle against 96.80 / 94.99 %, the misses at
    weights 1-25 falling from 274 to 14, and the tables level or better over 5 seeds
    (docs/papers/prima.md)."""
    onset_scale: Annotated[float, Field(ge=1, le=10)] | None = None
    """When an instance whose last reading showed no neighbour load (U_int at most 2 %) reads some,
    take its U_int this many times as read for that interval (``quell.policy.prima.onset``): a
    neighbour that arrived part-way through the interval is in only the downloads after it, on
    average half. ``None``: as read (the paper). prima-sim-1000's ``tuned`` row sets 2: 96.80 /
    94.99 % of settled / all instance-intervals with ``host_memory_s`` against 96.26 / 94.47 % with
    that alone, and 4 lost (95.95 / 94.10 %) (docs/papers/prima.md)."""
    onset_zero_on_miss: bool = False
    """With ``onset_scale``: an instance at an onset whose measured mean RT in the interval was
    above R_th gets no capacity for the next interval. prima-sim-1000's ``tuned`` row sets it:
    paired over seeds 1000-1004, +0.134 ± 0.021 points of settled SLO (higher on 5 of 5) at −1,530 ±
    5,388 instance-seconds (docs/papers/prima.md)."""

    fast_interval_s: Annotated[float, Field(gt=0, le=3600)] | None = 1.0
    """Glance every this many seconds between intervals and apply the fast rule
    (``quell.policy.prima.fast``): an instance whose rate served while busy (its NIC's bytes
    out over its time with a request in service; the probe's download where that is not
    measured), or a request held past 4 R_th with nothing completed, says it lost capacity gets
    the weight its new capacity gives at once, and the cut carries into the next interval's
    plan. ``None``: decide at the intervals only (the paper; ``preset: paper``). Where the
    environment cannot glance (live), the default's fast path is off and says so. On
    prima-sim-1000 through all 7,200 s (seeds 1000-1001) 99.30 % / 98.84 % of settled / all
    instance-intervals at 1.32x the oracle against 97.09 % / 95.27 % at 1.32x; on the simulated
    Table IX it costs about 2 points of all (docs/papers/prima.md, the defaults)."""

    # -- scale-out ----------------------------------------------------------------------------
    wait_intervals: Annotated[int, Field(ge=0, le=100)] = 1
    """W: scale out when a shortfall shows now and in W + 1 of the last 2W + 1 intervals (a
    steady one after W further intervals; one that noise interrupts is not reset by it); 1 is
    the paper's. The lab's Tables VI and VII set 2 for their 1 s intervals; on the simulated
    Table IX W = 0 gained nothing over 5 seeds (98.77 % settled at 1.00× the oracle against
    98.86 % at 0.98×) (docs/papers/prima.md)."""
    new_instance_load: Literal["probe", "clean"] = "probe"
    """When a new instance is up and its probe has not reported: ``probe``, it serves at weight 0
    until its first SF (counted meanwhile as capacity on its way); ``clean``, it serves at once with
    the capacity of an interference-free instance. The simulated Tables VIII-X's ``tuned`` rows set
    ``clean`` (Table VIII over 5 seeds: 99.58 % settled against 99.15 % behind least connections);
    on prima-sim-1000 it lowered the SLO (94.32 % settled at 1.33×), which keeps ``probe``
    (docs/papers/prima.md)."""
    host_memory_s: Annotated[float, Field(gt=0, le=1e6)] | None = 300.0
    """A scale-out takes the free hosts PRIMA left behind a neighbour last, by the U_int it read
    there; with this, by that U_int × exp(−age / this): a neighbour whose on periods last this long
    on average is, after that age, still there with probability exp(−age / this). ``None``: the
    U_int as read, however old (the paper). 300 s, prima-sim-1000's neighbours' mean on period,
    measured before it was the default: 96.26 / 94.47 % of settled / all instance-intervals at 1.28×
    the oracle with it alone against 96.3 / 94.3 % at 1.30× without (seed 1000;
    docs/papers/prima.md)."""

    # -- scale-in -----------------------------------------------------------------------------
    scale_in_wait_intervals: Annotated[int, Field(ge=0, le=100)] | None = None
    """W of the scale-in vote (default: ``wait_intervals``). The lab's Table VI sets 6: a scale-in
    after 7 s with its 1 s intervals, as the paper's 20 s with 10 s intervals; no run has
    varied it."""
    scale_in_headroom: Annotated[float, Field(ge=0, le=10)] = 0.10
    """Scale in only to instances whose capacities exceed U × (1 + this), and pass a trial only with
    this to spare: the band between scaling out (U > ΣU_max) and in keeps the controller from
    flapping. The simulated Tables VIII-X's ``tuned`` rows and the lab's Table VI set 0.05 (5 seeds,
    with ``util_window: 3`` and ``scale_in_partial``: Table X 100.0 % settled at 1.24× the oracle
    against 99.17 % at 1.38× with 0.10 and no U window) (docs/papers/prima.md)."""
    scale_in_partial: bool = True
    """When a scale-in trial ends without the headroom, bring back only the instances on trial
    that make it up (highest U_max first) and remove the others; ``False``: bring them all
    back and wait twice as long (the paper). Measured before it was the default: on
    prima-sim-1000, with
    ``drop_idle_intervals: 2``, 99.77 % of settled instance-intervals at 1.36× the oracle
    against 99.89 % at 1.76× without either (seed 1000; docs/papers/prima.md)."""
    drop_idle_intervals: Annotated[int, Field(ge=1, le=1000)] | None = 2
    """Remove an instance whose capacity has left nothing for requests (U_max at or below its
    probe's share: it serves at weight 0) for this many intervals in a row, while another
    instance has capacity; ``None``: keep it until a scale-in finds it (the paper). 2, measured
    before it was the default: Table IX over 5 seeds 97.97 % settled at 1.05× the oracle
    against 97.94 % at 1.16× without, VIII identical (docs/papers/prima.md)."""

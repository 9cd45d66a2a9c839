"""PRIMA's parameters, as a scenario's ``policy.params`` gives them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class PrimaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1)]
    """Path of the model bundle (relative to the scenario file)."""
    workload: str | None = None
    """If set, the bundle must have been built for this workload."""
    wait_intervals: Annotated[int, Field(ge=0, le=100)] = 1
    """W: scale out when a shortfall shows now and in W + 1 of the last 2W + 1 intervals (a
    steady one after W further intervals; one that noise interrupts is not reset by it)."""
    scale_in_wait_intervals: Annotated[int, Field(ge=0, le=100)] | None = None
    """Same for scale-in (default: ``wait_intervals``)."""
    warmup_intervals: Annotated[int, Field(ge=0, le=1000)] = 0
    """The first this many intervals PRIMA sets weights but neither scales nor counts them
    toward a scale-out or scale-in: its windows (``sf_window`` probe samples,
    ``util_window`` intervals) hold fewer readings than they are sized for, and the first
    readings of a starting service and probe are its start-up, not its load (the lab demo,
    docs/prima.md, eighth pass)."""
    scale_in_headroom: Annotated[float, Field(ge=0, le=10)] = 0.10
    """Scale in only to instances whose capacities exceed U × (1 + this): the band between
    scaling out (U > ΣU_max) and in keeps the controller from flapping."""
    safety_factor: Annotated[float, Field(ge=0, le=10)] = 0.0
    """Plan capacity for U × (1 + this): spare capacity in proportion to the load, so an
    instance's share stays this much below its U_max and the interval-to-interval swings of
    its load and response time stay under R_th (the paper's factor of safety, relative)."""
    sf_window: Annotated[int, Field(ge=1, le=100)] = 3
    """SF of an instance over its last this many probe samples (1: the last sample)."""
    sf_confidence_z: Annotated[float, Field(ge=0, le=10)] | None = None
    """An SF estimate counts only above this many standard errors of the probe's own scatter
    in isolation (the profile's spread at each sample's U, over the window's samples); at or
    below, it reads 0 (``SeverityEstimator``). ``None``: every estimate counts, as the paper."""
    util_window: Annotated[int, Field(ge=1, le=100)] = 1
    """U of an instance (and the total load): mean of its last this many intervals' utilisations
    (1: this interval's, as the paper with its 10 s period). The probe's SF is always read at
    the interval's own U."""
    calibrate: bool = True
    drop_idle_intervals: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Remove an instance whose capacity has left nothing for requests (U_max at or below its
    probe's share: it serves at weight 0) for this many intervals in a row, while another
    instance has capacity; ``None``: keep it until a scale-in finds it (the paper)."""
    scale_in_partial: bool = False
    """When a scale-in trial ends without the headroom, bring back only the instances on trial
    that make it up (highest U_max first) and remove the others; ``False``: bring them all
    back and wait twice as long (as before)."""
    onset_scale: Annotated[float, Field(ge=1, le=10)] | None = None
    """When an instance whose last reading showed no neighbour load (U_int at most
    2 %, ``quell.policy.prima.onset.FLOOR_PCT``) reads some, take its U_int this many times as read for that interval
    (``quell.policy.prima.onset``): a neighbour that arrived part-way through the interval is
    in only the downloads after it, on average half. ``None``: as read (the paper)."""
    onset_zero_on_miss: bool = False
    """With ``onset_scale``: an instance at an onset whose measured mean response time in the
    interval was above R_th gets no capacity for the next interval (the neighbour is felt, not
    only read)."""
    host_memory_s: Annotated[float, Field(gt=0, le=1e6)] | None = None
    """A scale-out takes the free hosts PRIMA left behind a neighbour last, by the U_int it read
    there; with this, by that U_int × exp(−age / this), age the time since it was read: a
    neighbour whose on periods last this long on average is, after that age, still there with
    probability exp(−age / this). ``None``: the U_int as read, however old (as before)."""
    new_instance_load: Literal["probe", "clean"] = "probe"
    """When a new instance is up and its probe has not reported: ``probe``, it serves at weight
    0 until its first SF (counted meanwhile as capacity on its way); ``clean``, it serves at
    once with the capacity of an interference-free instance (SF 0, as an initial instance
    before its probe), so a scale-out carries load as soon as the instance is up."""
    min_room_pct: Annotated[float, Field(ge=0, le=100)] = 0.0
    """An instance with less than this U left for requests (U_max less its probe) gets weight 0
    (it still counts in ΣU_max): behind a strong neighbour an instance's response time has a
    floor, the neighbour's queue, that no share lowers, and the model, clamped at its edge,
    leaves it a few per cent whose few requests miss R_th. 0: every positive capacity gets its
    share (the paper)."""
    sf_jump: Annotated[float, Field(gt=0, le=100)] | None = None
    """With ``sf_window`` > 1: a probe sample whose time relative to R_iso exceeds the window's
    by more than the factor 1 + this starts the window again from it, so a neighbour that has
    just arrived is read at once, not averaged with the samples from before it
    (``SeverityEstimator``). ``None``: the window as it is."""

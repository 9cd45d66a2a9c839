"""A synthetic web server under antagonists, in closed form with noise: data to train, test and
time IC2's detector on until the lab and the simulator feed it. It is not a model of any real
server; it has the shape the paper describes (Section 3.4, Fig. 4 and 7):

* a cache antagonist (``kind="cache"``, the paper's Dcopy and LLCProbe) raises the CPU each
  request costs (CPI up), more so the more workers run at once: LPO, CPU, response time and
  WorkDone rise, throughput falls once the CPU saturates;
* a CPU antagonist (``kind="cpu"``, a hog on the same cores) takes a share of the cores: the
  run-queue wait and CPU pressure (PSI) rise with the response time, LPO hardly moves;
* each antagonist's effect comes on and goes off with time constants (``rise_s``,
  ``decay_s``: queues drain after it stops), so the 30 s after a change are unlike both sides;
* fewer workers (MaxRequestWorkers) soften a cache antagonist, a longer KeepAliveTimeout saves
  connection set-ups while requests are slow, and a graceful restart costs a few seconds of
  slower service: IC2's reconfiguration moves the metrics, which is why its detector is
  bootstrapped;
* the load drifts (±25 % over 20 minutes), noise is log-normal, and ``ambient`` antagonists
  (unlabelled, weaker, shorter) stand for a cloud's own neighbours.

Every draw comes from the ``numpy`` generator given; nothing global.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from quell.core.observation import SERVER_SETTING_KEYS, Observation
from quell.detect.features import LINK_UTIL_KEY
from quell.detect.labels import Period, Timeline
from quell.policy.ic2.update import Settings


@dataclass(frozen=True)
class ServerModel:
    cores: float = 2.0
    cpu_s_per_req: float = 0.012
    """CPU per request without interference (the baseline LPO)."""
    base_rt_s: float = 0.02
    """Response time that is not CPU (network, disk)."""
    load_rps: float = 90.0
    """Mean offered load (the baseline utilisation is about 55 %)."""
    load_swing: float = 0.25
    load_period_s: float = 1200.0
    cache_cpu_gain: float = 0.7
    """A cache antagonist of intensity 1 with the baseline's workers: CPU per request × 1.7."""
    hog_core_share: float = 0.45
    """A CPU antagonist of intensity 1 takes this share of the cores."""
    rise_s: float = 8.0
    decay_s: float = 25.0
    rt_noise: float = 0.12
    cpu_noise: float = 0.05
    restart_s: float = 10.0
    restart_rt_factor: float = 1.6
    """A graceful restart: response time × this, for ``restart_s``."""
    response_bytes: float = 20_000.0
    link_bps: float = 100e6


def periodic_timeline(
    duration_s: float,
    on_s: float = 240.0,
    off_s: float = 240.0,
    kinds: tuple[str, ...] = ("cache",),
    intensities: tuple[float, ...] = (1.0,),
) -> Timeline:
    """The paper's emulation: off ``off_s``, on ``on_s``, repeated; the k-th period takes the
    k-th kind and intensity, cycling."""
    periods: list[Period] = []
    t, k = off_s, 0
    while t < duration_s:
        stop = min(t + on_s, duration_s)
        periods.append(Period(t, stop, kinds[k % len(kinds)], intensities[k % len(intensities)]))
        t, k = stop + off_s, k + 1
    return Timeline(tuple(periods))


def ambient_timeline(
    rng: np.random.Generator,
    duration_s: float,
    every_s: float = 600.0,
    length_s: tuple[float, float] = (5.0, 25.0),
    intensity: tuple[float, float] = (0.1, 0.4),
) -> Timeline:
    """Unlabelled neighbours: Poisson starts (one per ``every_s`` on average), uniform lengths
    and intensities, cache or CPU at even odds."""
    periods: list[Period] = []
    t = 0.0
    while True:
        t += float(rng.exponential(every_s))
        if t >= duration_s:
            return Timeline(tuple(periods))
        length = float(rng.uniform(*length_s))
        kind = "cache" if rng.random() < 0.5 else "cpu"
        periods.append(Period(t, t + length, kind, float(rng.uniform(*intensity))))


def _effect(p: Period, t: float, model: ServerModel) -> float:
    """How much of antagonist ``p`` acts at time ``t`` (0 before it starts)."""
    if t < p.start_s:
        return 0.0
    on = p.intensity * (1.0 - math.exp(-(min(t, p.stop_s) - p.start_s) / model.rise_s))
    return on if t < p.stop_s else on * math.exp(-(t - p.stop_s) / model.decay_s)


class SyntheticServer:
    """One instance: ``observe`` reports the interval that ends at ``end_s``; ``reconfigure``
    changes its settings at ``at_s``."""

    def __init__(
        self,
        rng: np.random.Generator,
        timeline: Timeline,
        baseline: Settings,
        ambient: Timeline | None = None,
        model: ServerModel | None = None,
        instance_id: str = "web1",
        graceful: bool = True,
    ) -> None:
        self.rng = rng
        self.timeline = timeline
        self.baseline = baseline
        self.ambient = ambient or Timeline()
        self.model = model or ServerModel()
        self.instance_id = instance_id
        self.graceful = graceful
        self.settings_ = baseline
        self.changed_at_s_ = -math.inf
        self.load_phase_ = float(rng.uniform(0, 2 * math.pi))

    def reconfigure(self, settings: Settings, at_s: float) -> None:
        if settings != self.settings_:
            self.settings_ = settings
            self.changed_at_s_ = at_s

    def intensity(self, t: float) -> tuple[float, float]:
        """(cache, cpu) intensity acting at ``t``."""
        cache = cpu = 0.0
        for p in (*self.timeline.periods, *self.ambient.periods):
            x = _effect(p, t, self.model)
            if p.kind == "cpu":
                cpu += x
            else:
                cache += x
        return min(cache, 1.5), min(cpu, 0.9)

    def observe(self, end_s: float, interval_s: float) -> Observation:
        m, s, b, rng = self.model, self.settings_, self.baseline, self.rng
        mid = end_s - interval_s / 2
        x_cache, x_cpu = self.intensity(mid)
        workers = min(1.0, s.max_request_workers / b.max_request_workers)
        cpu_per_req = m.cpu_s_per_req * (1 + m.cache_cpu_gain * x_cache * (0.4 + 0.6 * workers))
        longer_keepalive = min(1.0, max(0.0, s.keepalive_timeout_s / b.keepalive_timeout_s - 1))
        cpu_per_req *= 1 - 0.08 * min(1.0, x_cache + x_cpu) * longer_keepalive
        cores = m.cores * (1 - m.hog_core_share * x_cpu)
        offered = m.load_rps * (1 + m.load_swing * math.sin(2 * math.pi * mid / m.load_period_s))
        capacity = 0.97 * cores / cpu_per_req
        restarting = self.graceful and 0 <= end_s - self.changed_at_s_ < m.restart_s + interval_s
        served = min(offered, capacity) * (0.8 if restarting else 1.0)
        requests = int(rng.poisson(served * interval_s))
        rho = min(offered * cpu_per_req / cores, 1.2)
        rt = cpu_per_req / (1 - min(rho, 0.95)) + m.base_rt_s + 2.0 * max(0.0, rho - 0.95)
        rt *= m.restart_rt_factor if restarting else 1.0
        rt *= float(rng.lognormal(0.0, m.rt_noise))
        thpt = requests / interval_s
        cpu = min(thpt * cpu_per_req * float(rng.lognormal(0.0, m.cpu_noise)), cores)
        extra = {
            SERVER_SETTING_KEYS["max_request_workers"]: float(s.max_request_workers),
            SERVER_SETTING_KEYS["keepalive_timeout_s"]: s.keepalive_timeout_s,
            SERVER_SETTING_KEYS["php_max_children"]: float(s.php_max_children),
            LINK_UTIL_KEY: 100 * thpt * m.response_bytes * 8 / m.link_bps,
        }
        psi_cpu = 100 * min(1.0, 0.3 * rho**4 + 0.6 * x_cpu) * float(rng.lognormal(0, 0.2))
        wait = interval_s * (0.05 * rho**2 + 0.8 * x_cpu) * float(rng.lognormal(0, 0.2))
        return Observation(
            time_s=end_s,
            instance_id=self.instance_id,
            interval_s=interval_s,
            requests=requests,
            throughput_rps=thpt,
            mean_rt_seconds=rt if requests else None,
            cpu_util=cpu,
            psi_cpu_some_pct=min(psi_cpu, 100.0),
            psi_memory_some_pct=0.2 * float(rng.lognormal(0, 0.3)),
            psi_io_some_pct=0.1 * float(rng.lognormal(0, 0.3)),
            runqueue_wait_seconds=wait,
            util_pct=100 * cpu / m.cores,
            extra=extra,
        )


__all__ = [
    "ServerModel",
    "SyntheticServer",
    "ambient_timeline",
    "periodic_timeline",
]

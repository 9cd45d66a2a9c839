"""The Prometheus metrics quell exports, declared as data: each exporter builds its metrics from
its ``MetricSet`` and docs/reference/metrics.md is written from the same sets, so the reference
names exactly what is served.

A counter is declared by its family name and exposed with ``_total`` (``quell_decisions`` is
served as ``quell_decisions_total``), as prometheus_client does; a histogram as ``_bucket``
(with ``le``), ``_count`` and ``_sum``. Metrics kept in a registry between scrapes (counters
and histograms made once) also carry a ``_created`` series; families built at scrape time do
not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its name as prometheus_client is given it, kind, help text, label
    names, the unit its name ends with (``""`` for a count, a ratio or a setting) and, for a
    histogram, its buckets' upper bounds."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    buckets: tuple[float, ...] = ()

    def samples(self, created: bool) -> tuple[str, ...]:
        """The names of the series it is exposed as; ``created``: with the ``_created`` one of
        a counter or histogram kept in a registry."""
        if self.kind == "gauge":
            return (self.name,)
        names: tuple[str, ...]
        if self.kind == "counter":
            names = (f"{self.name}_total",)
        else:
            names = tuple(f"{self.name}_{s}" for s in ("bucket", "count", "sum"))
        return names + ((f"{self.name}_created",) if created else ())


@dataclass(frozen=True)
class MetricSet:
    """The metrics of one exporter, in the order it serves them: ``exporter`` names it, ``served``
    says where its metrics are served, ``created`` whether its counters and histograms carry
    ``_created`` series (``MetricSpec.samples``)."""

    exporter: str
    served: str
    created: bool
    metrics: tuple[MetricSpec, ...]


__all__ = ["Kind", "MetricSet", "MetricSpec"]

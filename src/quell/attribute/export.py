"""Where the answer lands for users: the provider-attributed latency as a Prometheus histogram
per instance (on a registry the caller passes; its exporter serves it) and as attributes of a
request's OpenTelemetry span (the caller's tracer; with only opentelemetry-api installed spans
do not record, and nothing here needs more).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from quell.core.metrics import MetricSet, MetricSpec

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from prometheus_client import CollectorRegistry

FloatArray = NDArray[np.float64]

BUCKETS_SECONDS: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
PROVIDER = MetricSpec(
    "quell_attributed_provider_latency_seconds",
    "histogram",
    "Per-request latency attributed to the provider (co-located load), in seconds.",
    ("instance",),
    "seconds",
    BUCKETS_SECONDS,
)
SERVICE = MetricSpec(
    "quell_attributed_service_latency_seconds",
    "histogram",
    "Per-request latency attributed to the service itself, in seconds.",
    ("instance",),
    "seconds",
    BUCKETS_SECONDS,
)
PROVIDER_METRIC: Final = PROVIDER.name
SERVICE_METRIC: Final = SERVICE.name
METRICS = MetricSet(
    "quell.attribute.export.AttributionMetrics",
    "the registry a caller passes ``AttributionMetrics`` (its own exporter serves it)",
    True,
    (PROVIDER, SERVICE),
)
"""The two histograms, in the order they are registered (docs/reference/metrics.md)."""
SPAN_PREFIX: Final = "quell.attribution."


class AttributionMetrics:
    """Two histograms on ``registry``, labelled by instance: each request's latency attributed to
    the provider and the rest (the service's own)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Histogram

        def histogram(spec: MetricSpec) -> Histogram:
            return Histogram(
                spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry
            )

        self.provider = histogram(PROVIDER)
        self.service = histogram(SERVICE)

    def observe(
        self, instance: str, provider_seconds: FloatArray, wall_seconds: FloatArray
    ) -> None:
        """Observe each request: its provider part and its wall time less that part."""
        p = self.provider.labels(instance=instance)
        s = self.service.labels(instance=instance)
        for prov, wall in zip(provider_seconds.tolist(), wall_seconds.tolist(), strict=True):
            p.observe(prov)
            s.observe(max(wall - prov, 0.0))


def span_attributes(
    provider_seconds: float,
    wall_seconds: float,
    low_seconds: float | None = None,
    high_seconds: float | None = None,
) -> dict[str, float]:
    """One request's attribution as OpenTelemetry span attributes (``quell.attribution.*``):
    provider and service seconds and, when given, the 95 % interval of the provider part."""
    attrs = {
        SPAN_PREFIX + "provider_latency_seconds": float(provider_seconds),
        SPAN_PREFIX + "service_latency_seconds": max(float(wall_seconds - provider_seconds), 0.0),
    }
    if low_seconds is not None and high_seconds is not None:
        attrs[SPAN_PREFIX + "provider_latency_low_seconds"] = float(low_seconds)
        attrs[SPAN_PREFIX + "provider_latency_high_seconds"] = float(high_seconds)
    return attrs


def annotate_span(
    span: Span,
    provider_seconds: float,
    wall_seconds: float,
    low_seconds: float | None = None,
    high_seconds: float | None = None,
) -> None:
    """Set ``span_attributes`` on ``span``."""
    span.set_attributes(span_attributes(provider_seconds, wall_seconds, low_seconds, high_seconds))

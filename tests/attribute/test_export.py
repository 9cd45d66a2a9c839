"""Export: the Prometheus histograms on the caller's registry and the span attributes."""

from __future__ import annotations

import numpy as np
import pytest
from opentelemetry.trace import NonRecordingSpan, SpanContext
from prometheus_client import CollectorRegistry

from quell.attribute.export import (
    PROVIDER_METRIC,
    SERVICE_METRIC,
    AttributionMetrics,
    annotate_span,
)


def test_histograms_per_instance_on_the_given_registry() -> None:
    registry = CollectorRegistry()
    metrics = AttributionMetrics(registry)
    metrics.observe("i1", np.array([0.0, 0.003, 0.02]), np.array([0.004, 0.005, 0.03]))
    metrics.observe("i2", np.array([0.2]), np.array([0.1]))

    def value(name: str, instance: str, le: str | None = None) -> float | None:
        labels = {"instance": instance} | ({"le": le} if le else {})
        return registry.get_sample_value(name, labels)

    assert value(PROVIDER_METRIC + "_count", "i1") == 3
    assert value(PROVIDER_METRIC + "_sum", "i1") == pytest.approx(0.023)
    assert value(PROVIDER_METRIC + "_bucket", "i1", "0.0025") == 1
    assert value(PROVIDER_METRIC + "_bucket", "i1", "0.005") == 2
    assert value(SERVICE_METRIC + "_sum", "i1") == pytest.approx(0.016)
    assert value(SERVICE_METRIC + "_sum", "i2") == 0.0  # never negative


class _Recording(NonRecordingSpan):
    def __init__(self) -> None:
        super().__init__(SpanContext(1, 1, False))
        self.attributes: dict[str, object] = {}

    def set_attributes(self, attributes) -> None:  # type: ignore[no-untyped-def]
        self.attributes.update(attributes)


def test_span_attributes() -> None:
    span = _Recording()
    annotate_span(span, 0.012, 0.020, 0.008, 0.016)
    assert span.attributes == {
        "quell.attribution.provider_latency_seconds": 0.012,
        "quell.attribution.service_latency_seconds": 0.020 - 0.012,
        "quell.attribution.provider_latency_low_seconds": 0.008,
        "quell.attribution.provider_latency_high_seconds": 0.016,
    }

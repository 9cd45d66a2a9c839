"""Each exporter serves exactly its ``MetricSet``: the families in the table's order, with its
kinds, help texts and labels, exposed under the sample names the table gives, and nothing
else. The reference (docs/reference/metrics.md) is written from the same tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quell.attribute import export
from quell.core.metrics import MetricSet, MetricSpec
from quell.live import agent, controller
from quell.live.agent import AgentCollector, ProbeStats, apache_server
from tests.live.agents import cgroup_tree
from tests.live.test_agent_reconfigure import config

SUFFIXES = {"seconds", "bytes", "cpus"}


def assert_serves(text: str, table: MetricSet) -> None:
    parsed = list(text_string_to_metric_families(text))
    # the text format serves a _created series as a gauge family of its own, after its metric's
    created = [f for f in parsed if f.type == "gauge" and f.name.endswith("_created")]
    families = [f for f in parsed if f not in created]
    assert [f.name for f in families] == [m.name for m in table.metrics]
    timed = [f"{m.name}_created" for m in table.metrics if m.kind != "gauge"]
    assert [f.name for f in created] == (timed if table.created else [])
    for fam, spec in zip(families, table.metrics, strict=True):
        assert (fam.type, fam.documentation) == (spec.kind, spec.help)
        assert fam.samples, f"{spec.name} served no sample: the test does not cover it"
        for s in fam.samples:
            assert s.name in spec.samples(table.created)
            assert set(s.labels) - {"le"} == set(spec.labels)


def test_the_agent_serves_its_table(tmp_path: Path) -> None:
    (tmp_path / "cg").mkdir()
    cfg = config(tmp_path, ["reconfigure"])
    layout = cgroup_tree(tmp_path / "cg")
    group = tmp_path / "cg" / "svc"
    (group / "cpu.max").write_text("50000 100000\n")
    for r in ("memory", "io"):
        (group / f"{r}.pressure").write_text(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"
        )
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (group / "cgroup.procs").write_text("4242\n")
    (proc / "stat").write_text("cpu  100 0 50 1000 0 0 0 7 0 0\n")
    (proc / "4242" / "task").mkdir()
    (proc / "4242" / "task" / "4242").mkdir()
    (proc / "4242" / "task" / "4242" / "schedstat").write_text("100 2000000 3\n")
    (proc / "4242" / "net").mkdir()
    (proc / "4242" / "net" / "dev").write_text(
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets"
        " errs drop fifo colls carrier compressed\n"
        "  eth0:    1000      10    0    0    0     0          0         0     2000      20"
        "    0    0    0     0       0          0\n"
    )
    stats = ProbeStats()
    stats.record(0.25, True)
    stats.record(2.0, False)
    assert cfg.instances[0].apache is not None
    servers = {"a": apache_server(cfg.instances[0].apache, "<test>")}
    registry = CollectorRegistry()
    registry.register(AgentCollector(cfg, layout, {"a": stats}, proc, servers))
    assert_serves(generate_latest(registry).decode(), agent.METRICS)


def test_the_controller_serves_its_table() -> None:
    m = controller.ControllerMetrics()
    m.decisions.labels("prima", "act").inc()
    m.faults.labels("haproxy").inc()
    for gauge in (m.weight, m.rt, m.probe, m.capacity, m.predicted):
        gauge.labels("i1").set(1.0)
    m.instances.set(1)
    assert_serves(generate_latest(m.registry).decode(), controller.METRICS)


def test_the_attribution_histograms_serve_their_table() -> None:
    registry = CollectorRegistry()
    export.AttributionMetrics(registry).observe("i1", np.array([0.001]), np.array([0.004]))
    assert_serves(generate_latest(registry).decode(), export.METRICS)


@pytest.mark.parametrize("table", [agent.METRICS, controller.METRICS, export.METRICS])
def test_a_unit_is_the_end_of_its_metrics_name(table: MetricSet) -> None:
    for spec in table.metrics:
        last = spec.name.rsplit("_", 1)[-1]
        assert spec.unit == (last if last in SUFFIXES else ""), spec.name


def test_the_exposed_names_of_each_kind() -> None:
    assert MetricSpec("a_seconds", "counter", "h").samples(False) == ("a_seconds_total",)
    assert MetricSpec("a", "counter", "h").samples(True) == ("a_total", "a_created")
    assert MetricSpec("g", "gauge", "h").samples(True) == ("g",)
    assert MetricSpec("h", "histogram", "h").samples(True) == (
        "h_bucket",
        "h_count",
        "h_sum",
        "h_created",
    )

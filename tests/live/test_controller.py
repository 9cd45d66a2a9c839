"""The live environment and controller on recorded Prometheus answers (a fake Prometheus on
loopback) and an in-memory HAProxy: exact values, holding under every fault and recovering
within one interval, the guard, dry run, and resuming after a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from quell.core.action import AddInstance, Decision, SetWeight
from quell.core.clock import VirtualClock
from quell.core.observation import Snapshot
from quell.live.controller import Controller
from quell.live.environment import LiveEnvironment
from quell.live.prometheus import PrometheusClient
from quell.probe.severity import PROBE_KEY
from quell.signals.haproxy_log import LoggedRequest
from quell.store.run import RunStore
from tests.live.fakes import (
    RECORDED,
    FakeLog,
    FakePrometheus,
    FakeRuntime,
    fake_prometheus,
    live_config,
)


class Wants:
    """A policy that asks for the same actions every interval."""

    name = "wants"

    def __init__(self, *actions: Any) -> None:
        self.actions = actions
        self.seen = 0

    def decide(self, snapshot: Snapshot) -> Decision:
        self.seen += 1
        return Decision(tuple(self.actions), "wants", {})


RIGS: list[Rig] = []
"""The rigs a test made, whose environments (and their HTTP clients) its teardown closes."""


@pytest.fixture(autouse=True)
def _close_rigs() -> Iterator[None]:
    yield
    while RIGS:
        RIGS.pop().env.close()


class Rig:
    def __init__(self, prom: FakePrometheus, run_dir: Path, policy: Any, apply: bool) -> None:
        self.prom = prom
        self.cfg = live_config(prom.url)
        self.runtime = FakeRuntime({"a": "ready", "b": "ready", "h2s1": "maint"})
        self.log = FakeLog()
        self.clock = VirtualClock()
        self.store = RunStore.create(run_dir)
        self.env = LiveEnvironment(
            self.cfg,
            PrometheusClient(prom.url, 2.0),
            self.runtime,
            clock=self.clock,
            open_log=lambda: self.log,  # type: ignore[arg-type,return-value]
        )
        self.ctl = Controller(self.cfg, self.env, policy, self.store, apply=apply)
        RIGS.append(self)

    def start(self, offset_s: float = 0.0) -> None:
        self.clock.sleep_until(offset_s)
        self.env.start()

    def step(self) -> Decision:
        self.clock.sleep_until(self.clock.now() + 1.0)
        d = self.ctl.step()
        self.ctl.save(self.clock.now())
        self.store.commit()
        return d


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with fake_prometheus() as p:
        yield p


def test_a_snapshot_holds_the_recorded_values(prom: FakePrometheus, tmp_path: Path) -> None:
    rig = Rig(prom, tmp_path, Wants(), apply=False)
    rig.start()
    rig.log.pending = [
        LoggedRequest("a", 200, 0.004),
        LoggedRequest("a", 200, 0.010),
        LoggedRequest("a", 503, 0.001),
        LoggedRequest("b", 200, 0.002),
    ]
    rig.clock.sleep_until(1.0)
    snap = rig.env.observe()
    assert not rig.env.faults
    rec = json.loads(RECORDED.read_text())

    def value(expr_start: str, iid: str) -> float:
        (doc,) = [v for k, v in rec.items() if k.startswith(expr_start)]
        (s,) = [r for r in doc["data"]["result"] if r["metric"].get("instance") == iid]
        return float(s["value"][1])

    a = snap.instances["a"]
    assert set(snap.instances) == {"a", "b"}  # the slot is not in service
    assert a.cpu_util == value("rate(quell_cgroup_cpu_usage", "a")
    assert a.net_tx_bytes == round(value("rate(quell_net_transmit", "a") * 1.0)
    assert a.util_pct == pytest.approx(value("rate(quell_net_transmit", "a") * 8 / 1e8 * 100)
    assert a.extra[PROBE_KEY] == value("increase(quell_probe", "a")
    assert (a.requests, a.errors) == (2, 1)
    assert a.mean_rt_seconds == pytest.approx(0.007)
    assert snap.instances["b"].mean_rt_seconds == pytest.approx(0.002)
    assert a.weight == 100
    (steal,) = [
        r
        for r in rec[next(k for k in rec if "steal" in k)]["data"]["result"]
        if r["metric"]["host"] == "h1"
    ]
    assert a.steal_ratio == float(steal["value"][1])


@pytest.mark.parametrize("fault", ["nan", "stale", "empty", "down", "haproxy"])
def test_a_fault_holds_the_weights_and_the_controller_resumes_when_it_ends(
    fault: str, prom: FakePrometheus, tmp_path: Path
) -> None:
    policy = Wants(SetWeight("a", 40), SetWeight("b", 60))
    rig = Rig(prom, tmp_path, policy, apply=True)
    rig.start()
    if fault == "haproxy":
        rig.runtime.gone = True
    else:
        prom.mode = fault  # type: ignore[assignment]
    held = [rig.step() for _ in range(3)]
    assert all(d.reason.startswith("hold:") and not d.actions for d in held)
    assert rig.runtime.weights == {"a": 100, "b": 100, "h2s1": 100}
    assert policy.seen == 0
    rig.runtime.gone = False
    prom.mode = "ok"
    resumed = rig.step()
    assert resumed.actions == (SetWeight("a", 40), SetWeight("b", 60))
    assert rig.runtime.weights["a"] == 40
    logged = rig.store.decision_log()
    assert [r[2].startswith("hold:") for r in logged] == [True, True, True, False]


def test_prometheus_gone_for_good_is_held_without_a_crash(tmp_path: Path) -> None:
    with fake_prometheus() as prom:
        rig = Rig(prom, tmp_path, Wants(SetWeight("a", 5)), apply=True)
        rig.start()
    d = rig.step()  # the server is closed: connection refused
    assert d.reason.startswith("hold:") and "prometheus" in d.reason
    assert rig.runtime.calls == []


def test_the_guard_never_sets_every_weight_to_zero(prom: FakePrometheus, tmp_path: Path) -> None:
    rig = Rig(prom, tmp_path, Wants(SetWeight("a", 0), SetWeight("b", 0)), apply=True)
    rig.start()
    d = rig.step()
    assert d.actions == () and "every serving instance at weight 0" in d.reason
    assert rig.runtime.weights["a"] == 100 and rig.runtime.weights["b"] == 100


def test_the_guard_keeps_min_instances(prom: FakePrometheus, tmp_path: Path) -> None:
    from quell.core.action import RemoveInstance

    rig = Rig(prom, tmp_path, Wants(RemoveInstance("a"), RemoveInstance("b")), apply=True)
    rig.start()
    d = rig.step()
    assert d.actions == (RemoveInstance("a"),)
    assert "below min_instances" in d.reason


def test_a_dry_run_changes_nothing_and_logs_what_it_would_do(
    prom: FakePrometheus, tmp_path: Path
) -> None:
    rig = Rig(prom, tmp_path, Wants(SetWeight("a", 30), AddInstance("x1", "h2")), apply=False)
    rig.start()
    for _ in range(3):
        rig.step()
    assert rig.runtime.calls == []
    assert rig.runtime.weights == {"a": 100, "b": 100, "h2s1": 100}
    logged = rig.store.decision_log()
    assert len(logged) == 3
    assert all(r[4]["mode"] == "dry run" and len(r[3]) == 2 for r in logged)


def test_a_restarted_controller_picks_up_its_run(prom: FakePrometheus, tmp_path: Path) -> None:
    first = Rig(prom, tmp_path, Wants(AddInstance("x1", "h2", weight=20)), apply=True)
    first.start()
    first.step()
    assert first.runtime.states["h2s1"] == "ready" and first.runtime.weights["h2s1"] == 20
    first.ctl.policy = Wants()
    first.step()
    first.store.close()
    second = Rig(prom, tmp_path, Wants(SetWeight("x1", 33)), apply=True)
    second.runtime = first.runtime
    second.env.runtime = first.runtime
    offset = second.ctl.resume()
    assert offset == 2.0
    second.start(offset)
    d = second.step()
    assert d.actions == (SetWeight("x1", 33),)
    assert first.runtime.weights["h2s1"] == 33
    times = [r[0] for r in second.store.decision_log()]
    assert times == [1.0, 2.0, 3.0]


class Remembers:
    """A policy whose decision is its memory: the times of every snapshot it has decided on."""

    name = "remembers"

    def __init__(self) -> None:
        self.seen: list[float] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        self.seen.append(snapshot.time_s)
        return Decision((), f"seen {len(self.seen)}", {"seen": list(self.seen)})


def test_a_restarted_controller_rebuilds_its_policys_memory(
    prom: FakePrometheus, tmp_path: Path
) -> None:
    """The policy of a restarted controller has decided on exactly the snapshots the first
    one's policy had (the held interval left out), so its next decision is the one an
    uninterrupted controller would have made."""
    whole = Rig(prom, tmp_path / "whole", Remembers(), apply=True)
    first = Rig(prom, tmp_path / "cut", Remembers(), apply=True)
    for rig in (whole, first):
        rig.start()
    for k in range(4):
        prom.mode = "nan" if k == 2 else "ok"
        d_whole, d_first = whole.step(), first.step()
        assert d_whole.reason == d_first.reason
    assert d_first.reason == "seen 3"  # the NaN interval was held, not decided on
    first.store.close()
    second = Rig(prom, tmp_path / "cut", Remembers(), apply=True)
    offset = second.ctl.resume()
    assert second.ctl.replayed == 3
    assert second.ctl.policy.seen == first.ctl.policy.seen  # type: ignore[attr-defined]
    second.start(offset)
    prom.mode = "ok"
    assert second.step().detail["seen"] == whole.step().detail["seen"]


def test_the_page_shows_the_last_hours_plots_and_serves_only_those(
    prom: FakePrometheus, tmp_path: Path
) -> None:
    import httpx

    from quell.live.controller import PlotCache, serve
    from quell.report.live_plots import LIVE_PLOTS, write_live_plots

    run_dir = tmp_path / "run"
    rig = Rig(prom, run_dir, Wants(SetWeight("a", 60)), apply=True)
    rig.start()
    for _ in range(3):
        rig.step()
    rig.store.commit()
    draws: list[int] = []

    def draw() -> list[Path]:
        draws.append(1)
        return write_live_plots(run_dir, run_dir / "plots", 0.014)

    server = serve("127.0.0.1", 0, rig.ctl.metrics, run_dir, PlotCache(draw, max_age_s=60.0))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with httpx.Client(trust_env=False, timeout=30.0) as c:
            page = c.get(f"{url}/").text
            assert [n for n in LIVE_PLOTS if f'src="/plots/{n}"' in page] == list(LIVE_PLOTS)
            assert "wants" in page  # the decision log is still there
            png = c.get(f"{url}/plots/response_time.png")
            assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
            assert png.headers["content-type"] == "image/png"
            assert c.get(f"{url}/plots/../run.db").status_code == 404
            assert c.get(f"{url}/plots/run.db").status_code == 404
            c.get(f"{url}/")
        assert len(draws) == 1  # drawn once per max_age_s, not per request
    finally:
        server.shutdown()
        server.server_close()
        rig.store.close()


def test_a_failing_drawing_leaves_the_page_without_plots() -> None:
    from quell.live.controller import PlotCache

    def draw() -> list[Path]:
        raise ValueError("no data")

    cache = PlotCache(draw, max_age_s=0.0)
    assert cache.refresh() == []
    assert cache.read("response_time.png") is None


def test_ic2_runs_live_on_what_the_live_environment_observes(
    prom: FakePrometheus, tmp_path: Path
) -> None:
    """IC2, built by the live controller from its config with the shipped lab detector, gets a
    verdict for every instance from a live snapshot: response time, throughput and CPU, the
    paper's three attributes, are all there."""
    from quell.live.controller import make_policy

    root = Path(__file__).resolve().parents[2]
    params = {
        "detector": "models/lab/detector.json",
        "workload": "ic2-lab-php16m-40users",
        "max_request_workers": 32,
        "keepalive_timeout_s": 5,
        "php_max_children": 8,
        "threads_per_child": 8,
    }
    cfg = live_config(prom.url, policy={"name": "ic2", "params": params})
    policy = make_policy(cfg, root / "scenarios" / "ic2")
    rig = Rig(prom, tmp_path, policy, apply=False)
    rig.start()
    for _ in range(3):
        rig.log.pending = [LoggedRequest(s, 200, 0.004) for s in ("a", "b") for _ in range(10)]
        d = rig.step()
    rows = d.detail["instances"]
    assert set(rows) == {"a", "b"}
    assert all(rows[i]["verdict"] in ("NI", "T", "I") for i in rows), rows
    assert rows["a"]["rt_s"] == pytest.approx(0.004)


def test_closing_the_environment_closes_the_prometheus_client_it_was_given(
    prom: FakePrometheus,
) -> None:
    http = httpx.Client(timeout=2.0, trust_env=False)
    env = LiveEnvironment(
        live_config(prom.url), PrometheusClient(prom.url, client=http), FakeRuntime({"a": "ready"})
    )
    env.close()  # never started: its connections go all the same
    assert http.is_closed


def test_the_log_keeps_a_request_that_ended_before_an_answer() -> None:
    from quell.signals.haproxy_log import parse_log_line

    assert parse_log_line("quell a 200 12") == LoggedRequest("a", 200, 0.012)
    assert parse_log_line("<134>x haproxy[1]: quell <NOSRV> -1 -1") == LoggedRequest(
        "<NOSRV>", -1, None
    )


def test_the_page_shows_what_users_felt_over_the_last_intervals(
    prom: FakePrometheus, tmp_path: Path
) -> None:
    # Ten requests in one interval: 10..70 and 120 ms answered, a 503 in 1 ms and one that
    # ended before an answer, both at the 1 s request timeout. R_th = 50 ms: 5 of 10 above it,
    # 3 above 100 ms, p99 the slowest of the ten. The interval's mean RT leaves both out.
    import httpx

    from quell.cli.live import _users
    from quell.live.controller import serve

    cfg = live_config(prom.url, target_rt_s=0.05, request_timeout_s=1.0)
    rig = Rig(prom, tmp_path / "run", Wants(), apply=False)
    rig.cfg = rig.ctl.cfg = cfg
    rig.start()
    times = [0.010, 0.020, 0.030, 0.040, 0.050, 0.060, 0.070, 0.120]
    rig.log.pending = [LoggedRequest("a" if k % 2 else "b", 200, t) for k, t in enumerate(times)]
    rig.log.pending += [LoggedRequest("a", 503, 0.001), LoggedRequest("<NOSRV>", -1, None)]
    rig.step()
    assert rig.store.observations()[-1].errors + rig.store.observations()[-2].errors == 1
    section = _users(rig.ctl)()
    row = "".join(f'<td class="num">{c}</td>' for c in ("10", "2", "50.00", "30.00", "1000.0"))
    assert section.count(row) == 2  # the last 5 minutes and the last hour: the same interval
    assert "<td>last 5 min (from 1 s, 0 s)</td>" in section
    server = serve("127.0.0.1", 0, rig.ctl.metrics, tmp_path / "run", None, _users(rig.ctl))
    try:
        with httpx.Client(trust_env=False, timeout=30.0) as c:
            page = c.get(f"http://127.0.0.1:{server.server_address[1]}/").text
        assert "What users felt" in page and row in page and "Decision log" in page
    finally:
        server.shutdown()
        server.server_close()
        rig.store.close()


def test_the_window_forgets_what_is_older_than_an_hour_or_past_its_bound() -> None:
    from quell.live.controller import RequestWindow

    w = RequestWindow(window_s=10.0, max_requests=5)
    for t in (1.0, 2.0, 3.0):
        w.add(t, [LoggedRequest("a", 200, t / 100)] * 2)
    first, rt, ok = w.since(0.0)
    assert first == 2.0 and rt.tolist() == [0.02, 0.02, 0.03, 0.03]  # six held past five
    w.add(12.5, [LoggedRequest("a", 200, None)])
    first, rt, ok = w.since(0.0)
    assert first == 3.0 and ok.tolist() == [True, True, False]  # 2 s is 10.5 s old
    assert w.since(12.5)[0] is None and w.since(12.5)[1].size == 0


def test_a_request_timeout_not_above_twice_the_target_is_refused(prom: FakePrometheus) -> None:
    from quell.errors import InputError

    with pytest.raises(InputError) as err:
        live_config(prom.url, target_rt_s=0.5, request_timeout_s=1.0)
    assert [p.location for p in err.value.problems] == ["request_timeout_s"]

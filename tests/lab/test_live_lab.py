"""Live mode on a standing lab, as a user runs it: ``lab up`` (two hosts, two instances, two
slots on h2), an agent per host and a real Prometheus as separate processes, then the
LiveEnvironment through the Environment contract, and a dry run of ``quell live run`` that
must leave HAProxy's weights and servers exactly as they were while logging what it would
have done. Under the lab lock; about 40 s. Nothing may survive."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from quell.actuate.haproxy import HAProxyRuntime
from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetCpuCap,
    SetMaxConn,
    SetWeight,
)
from quell.core.contract import EnvironmentFixture, run_checks
from quell.lab.standing import bring_up, tear_down
from quell.live.agent import read_token
from quell.live.config import load_live_config
from quell.live.environment import AgentClient, LiveEnvironment
from quell.live.prometheus import PrometheusClient
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout
from tests.lab.leftovers import leftovers
from tests.lab.test_contract_lab import APACHE

pytestmark = pytest.mark.lab

SRC = str(Path(__file__).resolve().parents[2] / "src")
NOT_REPEATABLE = "a live fleet runs real processes: no two runs time alike"
NO_GLANCE = "the live controller decides at its interval only and refuses a fast path"


def scenario() -> dict[str, Any]:
    return {
        "name": "live",
        "duration_s": 120,
        "hosts": [{"id": "h1", "link_mbit": 100}, {"id": "h2", "link_mbit": 100}],
        "instances": [
            {"id": "a", "host": "h1", "server": "apache", "apache": APACHE},
            {"id": "b", "host": "h2"},
        ],
        "files": [{"path": "/x.bin", "size_bytes": 5000}],
        "workload": {
            "arrival": {"process": "deterministic", "rate_rps": 20},
            "requests": [{"path": "/x.bin"}],
            "timeout_s": 2,
        },
        "probe": {"period_s": 1, "size_bytes": 10_000},
        "scaling": {"hosts": ["h2"], "boot_s": 0},
        "policy": {"name": "rr"},
    }


class Stack:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: str) -> None:
        env = {**os.environ, "PYTHONPATH": SRC}
        with open(self.run_dir / log, "wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("live")
    run_dir = root / "up"
    layout = detect_layout()
    lab = bring_up(parse_scenario(scenario()), root, run_dir, layout, spares=2)
    s = Stack(run_dir)
    try:
        for host in ("h1", "h2"):
            s.start(
                [
                    sys.executable,
                    "-m",
                    "quell",
                    "agent",
                    "--config",
                    str(run_dir / f"agent-{host}.yaml"),
                ],
                f"agent-{host}.log",
            )
        port = int((run_dir / "prometheus.port").read_text())
        s.start(
            [
                "prometheus",
                f"--config.file={run_dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={run_dir / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            "prometheus.log",
        )
        prom = PrometheusClient(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if len(prom.query("rate(quell_cgroup_cpu_usage_seconds_total[2s])")) >= 4:
                    break
            except Exception:
                pass
            time.sleep(0.3)
        else:
            pytest.fail("Prometheus never had the agents' series")
        prom.close()
        yield s
    finally:
        s.stop()
        tear_down(run_dir, layout)
        left = leftovers(lab.tag)
        assert not any(left.values()), left


def environment(run_dir: Path) -> LiveEnvironment:
    cfg = load_live_config(run_dir / "live.yaml")
    assert cfg.token_file is not None
    return LiveEnvironment(
        cfg,
        PrometheusClient(cfg.prometheus.url),
        HAProxyRuntime(Path(cfg.haproxy.socket)),
        AgentClient(cfg.agents, read_token(cfg.token_file)),
    )


def test_the_live_environment_keeps_the_contract(stack: Stack) -> None:
    supports: frozenset[type[Action]] = frozenset(
        {SetWeight, SetMaxConn, SetCpuCap, AddInstance, RemoveInstance, ReconfigureServer}
    )
    fx = EnvironmentFixture(
        create=lambda: environment(stack.run_dir),
        start=LiveEnvironment.start,
        serving="a",
        host="h2",
        supports=supports,
        step_s=1.2,  # Prometheus scrapes every 0.5 s: a cap shows within a step
        wait_s=4.0,
        not_repeatable=NOT_REPEATABLE,
        no_glance=NO_GLANCE,
        # online: HAProxy's maxconn, and php-fpm reloaded alone through a's agent
        reconfigure=("a", {"max_request_workers": 4, "php_max_children": 2}),
        reconfigure_graceful={  # through a's agent: its Apache and php-fpm files, reloaded
            "max_request_workers": 4,
            "keepalive_timeout_s": 3,
            "php_max_children": 3,
        },
    )
    results = run_checks(fx)
    failed = [r for r in results if r.outcome == "failed"]
    assert not failed, failed
    na = {r.check: r.detail for r in results if r.outcome == "not applicable"}
    assert na == {
        "check_same_seed": NOT_REPEATABLE,
        "check_glance": NO_GLANCE,
        "check_glance_keeps_observe": NOT_REPEATABLE,
        "check_unsupported_action": "supports every Action kind",
    }


def servers(runtime: HAProxyRuntime) -> list[tuple[str, str, int, int | None]]:
    return sorted((s.server, s.status, s.weight, s.slim) for s in runtime.show_stat())


def test_a_dry_run_changes_nothing_and_logs_what_it_would_have_done(stack: Stack) -> None:
    cfg = load_live_config(stack.run_dir / "live.yaml")
    runtime = HAProxyRuntime(Path(cfg.haproxy.socket))
    runtime.set_weight("be", "b", 30)  # round robin wants it back at equal weight
    before = servers(runtime)
    out = stack.run_dir / "dry"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quell",
            "live",
            "run",
            "--config",
            str(stack.run_dir / "live.yaml"),
            "--run-dir",
            str(out),
            "--duration",
            "5",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": SRC},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert servers(runtime) == before
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["ticks"] == 5
    with sqlite3.connect(out / "run.db") as db:
        rows = db.execute("SELECT reason, actions, detail FROM decisions").fetchall()
    acted = [json.loads(a) for r, a, d in rows if not r.startswith("hold:")]
    assert acted, rows
    assert any(a["type"] == "SetWeight" and a["instance_id"] == "b" for a in acted[0])
    assert all(
        json.loads(d).get("mode") == "dry run" for r, _, d in rows if not r.startswith("hold:")
    )
    runtime.set_weight("be", "b", 100)


class Nudge:
    """Moves a's weight between 40 and 50 every interval, so each applied interval shows."""

    name = "nudge"

    def __init__(self) -> None:
        self.k = 0

    def decide(self, snapshot: Any) -> Any:
        from quell.core.action import Decision

        self.k += 1
        return Decision((SetWeight("a", 40 + 10 * (self.k % 2)),), "nudge", {})


def test_faults_hold_the_weights_and_the_controller_resumes_on_its_own(
    stack: Stack, tmp_path: Path
) -> None:
    from quell.live.controller import Controller, continuing_clock
    from quell.store.run import RunStore

    run_dir = stack.run_dir
    cfg = load_live_config(run_dir / "live.yaml")
    sock = Path(cfg.haproxy.socket)
    store_dir = tmp_path / "ctl"

    def controller(offset: float = 0.0) -> tuple[Controller, LiveEnvironment, RunStore]:
        env = environment(run_dir)
        store = RunStore.create(store_dir)
        ctl = Controller(cfg, env, Nudge(), store, apply=True)
        offset = ctl.resume()
        env.clock = continuing_clock(offset)
        env.start()
        return ctl, env, store

    ctl, env, store = controller()
    log: list[tuple[float, bool]] = []

    def tick() -> bool:
        env.clock.sleep_until(env.clock.now() + cfg.interval_s)
        d = ctl.step()
        ctl.save(env.clock.now())
        store.commit()
        held = d.reason.startswith("hold:")
        log.append((env.clock.now(), held))
        return held

    def until_acting(within: int) -> int:
        for k in range(1, within + 1):
            if not tick():
                return k
        return within + 1

    assert until_acting(4) <= 4  # the first windows fill
    runtime = HAProxyRuntime(sock)

    # an agent killed: held while it is down, acting again once it is back
    agent = stack.procs[0]
    agent.terminate()
    agent.wait(timeout=5)
    held = [tick() for _ in range(3)]
    assert held[-1], log
    weights = {s.server: s.weight for s in runtime.show_stat()}
    assert any(w > 0 for w in weights.values())
    stack.start(
        [sys.executable, "-m", "quell", "agent", "--config", str(run_dir / "agent-h1.yaml")],
        "agent-h1-again.log",
    )
    stack.procs[0], stack.procs[-1] = stack.procs[-1], stack.procs[0]
    wait_for(f"{cfg.agents['h1']}/metrics")
    assert until_acting(2) <= 2, log

    # Prometheus stopped: held; restarted on its data, acting again
    prom = stack.procs[2]
    argv = [str(a) for a in prom.args]  # type: ignore[union-attr]
    prom.terminate()
    prom.wait(timeout=10)
    assert tick() and tick(), log
    stack.start(argv, "prometheus-again.log")
    stack.procs[2], stack.procs[-1] = stack.procs[-1], stack.procs[2]
    wait_for(f"{cfg.prometheus.url}/-/ready")
    # back once it has scraped the agents again (a rate needs two scrapes in its window)
    scraped_again(cfg.prometheus.url)
    assert until_acting(2) <= 2, log

    # HAProxy's socket gone: held, then acting on the first interval it is back
    moved = sock.with_name("moved.sock")
    sock.rename(moved)
    try:
        assert tick() and tick()
    finally:
        moved.rename(sock)
    assert until_acting(1) == 1, log

    # the controller restarted mid-run: it resumes its time and log, and acts
    before = len(store.decision_log())
    env.close()
    store.close()
    ctl, env, store = controller()
    assert until_acting(2) <= 2, log
    times = [r[0] for r in store.decision_log()]
    assert before < len(times) == len(log)  # one decision per interval, none lost
    assert times == sorted(times) and times[before] > times[before - 1]
    env.close()
    store.close()


class FaultyExporter:
    """Stands in for an agent on its own port, serving the agent's last real scrape altered:
    every value NaN, or every sample stamped with one frozen time (an exporter whose clock
    or relay stopped: Prometheus keeps answering with the old sample, older every second)."""

    def __init__(self, port: int, text: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.mode = "nan"
        self.frozen_ms = 0
        self.lines = [line for line in text.splitlines() if line]
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = exporter.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def body(self) -> str:
        out = []
        for line in self.lines:
            if line.startswith("#"):
                out.append(line)
                continue
            series, value = line.rsplit(" ", 1)
            if self.mode == "nan":
                out.append(f"{series} NaN")
            else:
                out.append(f"{series} {value} {self.frozen_ms}")
        return "\n".join(out) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_nan_and_stale_metrics_are_held_and_the_controller_resumes_on_its_own(
    stack: Stack, tmp_path: Path
) -> None:
    """Agent h1's port answers, but with NaN values, then with samples frozen in time: the
    controller holds (the weights in force stay, never all 0) while either lasts, and acts
    again within two intervals of the real agent's return."""
    from urllib.parse import urlsplit

    from quell.live.controller import Controller, continuing_clock
    from quell.store.run import RunStore

    run_dir = stack.run_dir
    cfg = load_live_config(run_dir / "live.yaml")
    env = environment(run_dir)
    store = RunStore.create(tmp_path / "ctl")
    ctl = Controller(cfg, env, Nudge(), store, apply=True)
    env.clock = continuing_clock(ctl.resume())
    env.start()
    runtime = HAProxyRuntime(Path(cfg.haproxy.socket))
    reasons: list[str] = []

    def tick() -> bool:
        env.clock.sleep_until(env.clock.now() + cfg.interval_s)
        d = ctl.step()
        ctl.save(env.clock.now())
        store.commit()
        reasons.append(d.reason)
        return d.reason.startswith("hold:")

    def until_acting(within: int) -> int:
        for k in range(1, within + 1):
            if not tick():
                return k
        return within + 1

    try:
        assert until_acting(4) <= 4, reasons
        url = cfg.agents["h1"]
        with httpx.Client(trust_env=False, timeout=2.0) as c:
            text = c.get(f"{url}/metrics").text
        agent = stack.procs[0]
        agent.terminate()
        agent.wait(timeout=5)
        port = urlsplit(url).port
        assert port is not None
        fake = FaultyExporter(port, text)
        try:
            # NaN: held from the first interval the NaN samples fill the rate window
            held = [tick() for _ in range(4)]
            assert held[-2:] == [True, True], reasons
            assert "agent" in reasons[-1], reasons
            assert any(s.weight > 0 for s in runtime.show_stat())
            # stale: real values, one frozen timestamp; held once it is older than stale_s
            fake.frozen_ms = int(time.time() * 1000)
            fake.mode = "stale"
            stale_ticks = int(cfg.prometheus.stale_s / cfg.interval_s) + 3
            held = [tick() for _ in range(stale_ticks)]
            assert held[-2:] == [True, True], reasons
            assert any(s.weight > 0 for s in runtime.show_stat())
        finally:
            fake.close()
        stack.start(
            [sys.executable, "-m", "quell", "agent", "--config", str(run_dir / "agent-h1.yaml")],
            "agent-h1-after-faulty.log",
        )
        stack.procs[0], stack.procs[-1] = stack.procs[-1], stack.procs[0]
        wait_for(f"{url}/metrics")
        scraped_again(cfg.prometheus.url)
        assert until_acting(2) <= 2, reasons
        assert len(store.decision_log()) == len(reasons)  # one decision per interval
    finally:
        env.close()
        store.close()


def scraped_again(prometheus_url: str, within_s: float = 15.0) -> None:
    """Once Prometheus has every instance's CPU rate again (two scrapes in its window)."""
    client = PrometheusClient(prometheus_url)
    deadline = time.monotonic() + within_s
    try:
        while len(client.query("rate(quell_cgroup_cpu_usage_seconds_total[2s])")) < 4:
            assert time.monotonic() < deadline, "Prometheus never scraped the agents again"
            time.sleep(0.1)
    finally:
        client.close()


def answers(url: str) -> bool:
    try:
        with httpx.Client(trust_env=False, timeout=1.0) as c:
            return c.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(url: str, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not answers(url):
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.1)

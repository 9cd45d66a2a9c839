"""The simulator's apache instances: their pools against closed forms (MaxRequestWorkers with no
queue is M/M/c/c, Erlang B; with a queue M/M/c, Erlang C; php-fpm's children M/M/c for PHP
pages), Little's law on workers including those idle kept-alive connections hold, the share of
requests that pay a new connection; ``ReconfigureServer``; and the shapes IC2 reconfigures for
(``scenarios/ic2/sim-sweep.yaml``). Estimates carry a 99 % interval from 20 batch means of the
intervals (``tests.models.test_queueing.batch_ci``); seeded."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quell.core.action import ReconfigureServer, SetWeight
from quell.core.observation import SERVER_SETTING_KEYS, Snapshot
from quell.errors import ActionError, InputError
from quell.experiment.sim import run_sim
from quell.models.queueing import erlang_b, mmc_mean_response_s, mmc_mean_wait_s
from quell.scenario.model import Scenario
from quell.sim import SimEnvironment
from quell.sim.environment import BUSY_WORKERS_KEY
from quell.studies.ic2.sweep import Sweeper, load_sweep
from tests.models.test_queueing import BATCHES, batch_ci
from tests.sim.build import build_scenario

IC2_SWEEP = Path(__file__).resolve().parents[2] / "scenarios" / "ic2" / "sim-sweep.yaml"
MU = 10.0
"""Service rate of one core: work per request Exp(0.1 s), from its exponential size."""

PURE_CPU = {
    # every request's work is its exponential size / bytes_per_cpu_s, nothing else
    "cpus": 4,
    "request_cpu_s": 0,
    "bytes_per_cpu_s": 1e6 * MU,
    "touch_cpu_s": 0,
    "connection_cpu_s": 0,
    "worker_overhead": 0,
    "memory_bytes": None,
}


def apache_scenario(
    apache: dict[str, Any],
    model: dict[str, Any] | None = None,
    arrival: dict[str, Any] | None = None,
    php: bool = False,
    duration_s: float = 4000,
    **over: Any,
) -> Scenario:
    """One apache instance on a CPU of its own, sizes Exp(1 MB); Poisson at 30 req/s unless
    ``arrival`` says otherwise; every request for a PHP page when ``php``."""
    path = "/p.php" if php else "/f"
    return build_scenario(
        seed=4,
        duration_s=duration_s,
        interval_s=duration_s / (2 * BATCHES),
        size_bytes=1_000_000,
        instances=[{"id": "i0", "host": "h0", "server": "apache", "apache": apache}],
        pages=[
            {"path": "/p.php", "working_set_bytes": 4096, "touches": 1, "response_bytes": 10**6}
        ],
        workload={
            "arrival": arrival or {"process": "poisson", "rate_rps": 30},
            "requests": [{"path": path}],
        },
        service={"size": {"distribution": "exponential"}, "apache": PURE_CPU | (model or {})},
        **over,
    )


def observe_all(scenario: Scenario) -> list[Snapshot]:
    env = SimEnvironment(scenario)
    snaps = []
    n = round(scenario.duration_s / scenario.interval_s)
    for k in range(1, n + 1):
        env.clock.sleep_until(k * scenario.interval_s)
        snaps.append(env.observe())
    env.close()
    return snaps[1:]  # the first interval is the warm-up


def per_interval(snaps: list[Snapshot], read: Any) -> np.ndarray:
    return np.asarray([read(s.instances["i0"]) for s in snaps], dtype=np.float64)


def test_max_request_workers_without_a_queue_is_erlang_b() -> None:
    # MaxRequestWorkers c = 4 on 4 cores, ListenBacklog 0: M/M/4/4 at a = λ/μ = 3, so a
    # request is refused with probability B(4, 3) = 0.2061 (PASTA).
    snaps = observe_all(
        apache_scenario(
            {"threads_per_child": 4, "max_request_workers": 4}, model={"listen_backlog": 0}
        )
    )
    blocked = per_interval(snaps, lambda o: o.errors / (o.errors + o.requests))
    mean, half = batch_ci(blocked)
    assert abs(mean - erlang_b(4, 30 / MU)) <= half and half < 0.1 * mean


def test_max_request_workers_with_a_queue_is_erlang_c() -> None:
    # The same pool with an unbounded accept queue: M/M/4, mean response W_q + 1/μ.
    snaps = observe_all(apache_scenario({"threads_per_child": 4, "max_request_workers": 4}))
    rt = per_interval(snaps, lambda o: o.mean_rt_seconds)
    mean, half = batch_ci(rt)
    assert abs(mean - mmc_mean_response_s(30, MU, 4)) <= half and half < 0.05 * mean


def test_php_children_are_a_second_pool() -> None:
    # PHP pages only, plenty of workers, 2 php-fpm children on 4 cores: the children are an
    # M/M/2 FCFS queue of its own at ρ = 0.75 (λ = 15); the workers wait with their requests.
    snaps = observe_all(
        apache_scenario(
            {"max_request_workers": 64, "php_max_children": 2},
            arrival={"process": "poisson", "rate_rps": 15},
            php=True,
            duration_s=16000,
        )
    )
    rt = per_interval(snaps, lambda o: o.mean_rt_seconds)
    mean, half = batch_ci(rt)
    assert abs(mean - mmc_mean_response_s(15, MU, 2)) <= half and half < 0.05 * mean
    assert mmc_mean_wait_s(15, MU, 2) > 0.1  # the pool matters: waits of a service time


@pytest.mark.parametrize("mpm", ["worker", "event"])
def test_littles_law_on_workers_counts_keepalive_holds(mpm: str) -> None:
    # 40 closed-loop users, think Exp(Z = 1 s), KeepAliveTimeout K = 0.5 s, 64 workers (no
    # user ever waits for one). Each answer holds the worker min(think, K) longer with the
    # worker MPM, E = Z (1 - e^(-K/Z)); with the event MPM nothing. Busy workers, on average,
    # = X (R + that) (Little's law on the workers).
    z, k = 1.0, 0.5
    snaps = observe_all(
        apache_scenario(
            {"mpm": mpm, "max_request_workers": 64, "keepalive_timeout_s": k},
            arrival={"process": "closed", "users": 40, "think_time_s": z, "keepalive": True},
            duration_s=2000,
        )
    )
    hold = z * (1 - math.exp(-k / z)) if mpm == "worker" else 0.0
    busy = per_interval(snaps, lambda o: o.extra[BUSY_WORKERS_KEY])
    little = per_interval(
        snaps, lambda o: o.throughput_rps * (o.mean_rt_seconds + hold)
    )  # batch by batch, so both see the same intervals
    mean, half = batch_ci(busy - little)
    assert abs(mean) <= half and half < 0.02 * busy.mean()


def test_connections_closed_by_the_timeout_pay_a_new_connection() -> None:
    # With keep-alive a request comes on a new connection when the think before it outlasted
    # KeepAliveTimeout: P = e^(-K/Z). CPU per request = its work + P × the connection's.
    z, k, conn = 1.0, 0.7, 0.02
    snaps = observe_all(
        apache_scenario(
            {"max_request_workers": 64, "keepalive_timeout_s": k},
            model={"connection_cpu_s": conn},
            arrival={"process": "closed", "users": 20, "think_time_s": z, "keepalive": True},
            duration_s=8000,
        )
    )
    per_request = per_interval(snaps, lambda o: o.cpu_util / o.throughput_rps)
    mean, half = batch_ci(per_request)
    assert abs(mean - (1 / MU + conn * math.exp(-k / z))) <= half and half < 0.01 * mean


# -- ReconfigureServer ------------------------------------------------------------------------------
def two_servers(**apache_model: Any) -> SimEnvironment:
    """i0 apache (2 cores), i1 lighttpd on a link; Poisson load."""
    s = build_scenario(
        instances=[
            {"id": "i0", "host": "h0", "server": "apache", "apache": {"threads_per_child": 4}},
            {"id": "i1", "host": "h1"},
        ],
        service={"apache": {"cpus": 2, **apache_model}},
    )
    return SimEnvironment(s)


def settings_shown(env: SimEnvironment) -> dict[str, float]:
    env.clock.sleep_until(env.clock.now() + 1)
    extra = env.observe().instances["i0"].extra
    return {k: extra[key] for k, key in SERVER_SETTING_KEYS.items()}


def test_reconfigure_at_once_changes_the_pools_and_shows_them() -> None:
    env = two_servers()
    assert settings_shown(env) == {
        "max_request_workers": 32.0,
        "keepalive_timeout_s": 5.0,
        "php_max_children": 16.0,
    }
    env.apply([ReconfigureServer("i0", {"max_request_workers": 8, "php_max_children": 3}, False)])
    assert env.core_.instances_.climit[0] == 8 and env.core_.instances_.plimit[0] == 3
    assert env.core_.resources_.cap[env.core_.instances_.res[0]] == 2.0  # no reload
    assert settings_shown(env)["max_request_workers"] == 8.0


def test_a_graceful_reconfigure_costs_capacity_for_the_reload() -> None:
    env = two_servers(reload_s=3.0, reload_capacity_share=0.4)
    r = env.core_.instances_.res[0]
    env.clock.sleep_until(10.0)
    env.apply([ReconfigureServer("i0", {"keepalive_timeout_s": 9}, graceful=True)])
    assert env.core_.resources_.cap[r] == pytest.approx(2.0 * 0.6)
    env.clock.sleep_until(12.9)
    env.observe()
    assert env.core_.resources_.cap[r] == pytest.approx(1.2)
    env.clock.sleep_until(13.1)
    env.observe()
    assert env.core_.resources_.cap[r] == 2.0


def test_a_graceful_reconfigure_without_a_measured_reload_cost_is_refused() -> None:
    env = two_servers()  # service.apache gives no reload_s
    before = settings_shown(env)
    graceful = ReconfigureServer("i0", {"max_request_workers": 8}, graceful=True)
    with pytest.raises(ActionError) as caught:
        env.apply([graceful])
    assert "service.apache.reload_s" in caught.value.failed[0][1]
    assert settings_shown(env) == before and env.core_.instances_.climit[0] == 32
    env.apply([ReconfigureServer("i0", {"max_request_workers": 8}, graceful=False)])
    assert settings_shown(env)["max_request_workers"] == 8.0


def test_reload_s_and_its_capacity_share_come_together() -> None:
    with pytest.raises(InputError, match="reload_s and reload_capacity_share together"):
        two_servers(reload_s=1.5)


def kept_alive_users(graceful_cost: bool = False) -> SimEnvironment:
    """40 users thinking Exp(0.5 s) on kept-alive connections to a worker-MPM instance with
    KeepAliveTimeout 30 s: each holds its worker through nearly every think."""
    model = {"reload_s": 0.0, "reload_capacity_share": 0.0} if graceful_cost else {}
    return SimEnvironment(
        apache_scenario(
            {"mpm": "worker", "max_request_workers": 64, "keepalive_timeout_s": 30},
            model=model,
            arrival={"process": "closed", "users": 40, "think_time_s": 0.5, "keepalive": True},
            duration_s=200,
        )
    )


def busy_workers_over(env: SimEnvironment, until_s: float) -> float:
    env.clock.sleep_until(until_s)
    return env.observe().instances["i0"].extra[BUSY_WORKERS_KEY]


def test_workers_above_a_lowered_max_request_workers_close_their_connections() -> None:
    # Online, W 64 -> 16: a kept-alive connection on a worker above the new limit closes after
    # its answer (the worker exits) instead of holding it, so the busy workers fall to 16
    env = kept_alive_users()
    assert busy_workers_over(env, 20.0) > 39.0  # all 40 users hold a worker
    env.apply([ReconfigureServer("i0", {"max_request_workers": 16}, graceful=False)])
    assert env.core_.instances_.held[0] > 16  # nothing closes at once
    busy_workers_over(env, 25.0)
    assert busy_workers_over(env, 30.0) == pytest.approx(16.0)


def test_a_graceful_reconfigure_closes_the_idle_kept_alive_connections() -> None:
    env = kept_alive_users(graceful_cost=True)
    busy_workers_over(env, 20.0)
    assert env.core_.instances_.held[0] > 0
    env.apply([ReconfigureServer("i0", {"keepalive_timeout_s": 31}, graceful=True)])
    assert env.core_.instances_.held[0] == 0  # the old children exit, ending them
    busy_workers_over(env, 25.0)
    assert busy_workers_over(env, 30.0) > 39.0  # W unchanged: the users hold workers again


@pytest.mark.parametrize(
    ("action", "why"),
    [
        (ReconfigureServer("i1", {"max_request_workers": 8}), "not an apache instance"),
        (ReconfigureServer("i0", {"max_children": 4}), "unknown setting(s) max_children"),
        (ReconfigureServer("i0", {"max_request_workers": 10}), "multiple of threads_per_child"),
        (ReconfigureServer("i0", {"php_max_children": 2.5}), "php_max_children"),
    ],
)
def test_a_reconfigure_that_cannot_be_applied_is_refused_naming_why(
    action: ReconfigureServer, why: str
) -> None:
    env = two_servers()
    before = settings_shown(env)
    ok = SetWeight("i0", 50)
    with pytest.raises(ActionError) as caught:
        env.apply([action, ok])
    assert caught.value.failed == [(action, caught.value.failed[0][1])]
    assert why in caught.value.failed[0][1] and caught.value.applied == [ok]
    assert settings_shown(env) == before


# -- IC2's Fig. 2 ------------------------------------------------------------------------------------
def best(setting: str, values: list[float], tmp: Path) -> dict[str, float]:
    """The best value of ``setting`` clean and under the scenario's thrasher, by
    ``quell ic2 sweep``'s measure (the response-time law, after 60 s of 300)."""
    spec = tmp / f"{setting}.yaml"
    spec.write_text(
        f"name: t\nenvironment: sim\nscenario: {IC2_SWEEP}\nsetting: {setting}\n"
        f"values: {values}\nconditions: [{{name: clean}}, {{name: thrash, start: [thrash]}}]\n"
        "duration_s: 300\nwarmup_s: 60\n"
    )
    doc = Sweeper(load_sweep(spec), tmp / setting, run_sim).run()
    return {c: float(row["best_value"]) for c, row in doc["table"].items()}


def test_the_best_max_request_workers_falls_and_the_best_keepalive_rises_under_interference(
    tmp_path: Path,
) -> None:
    # Table 2 of the paper: under a cache antagonist MXC's optimum decreases, KAT's increases.
    mrw = best("max_request_workers", [250, 375, 500], tmp_path)
    assert mrw["thrash"] < mrw["clean"]
    kat = best("keepalive_timeout_s", [1, 5, 20], tmp_path)
    assert kat["thrash"] > kat["clean"]
    # each clean optimum is interior: both neighbours are worse (the curves are concave)
    assert mrw["clean"] == 375 and kat["clean"] == 5


def test_more_php_pages_than_the_event_core_tells_apart_are_refused_up_front() -> None:
    pages = [{"path": f"/p{k}.php", "working_set_bytes": 4096, "touches": 1} for k in range(128)]
    s = build_scenario(instances=[{"id": "i0", "host": "h0", "server": "apache"}], pages=pages)
    with pytest.raises(InputError, match="at most 127 PHP pages"):
        SimEnvironment(s)

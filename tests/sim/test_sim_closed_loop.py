"""Closed-loop users in the event core against exact mean-value analysis of the closed network
they form (a processor-sharing or FCFS station and a delay station of their think time), the
interactive response-time law X = N / (R + Z) and Little's law; then whole closed-loop runs
through ``quell sim run`` and ``sim compare``. Estimates carry a 99 % confidence interval from
20 batch means (``tests.models.test_queueing.batch_ci``); seeded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.models.queueing import mva_closed
from quell.scenario import load_scenario
from quell.scenario.schedule import build_population
from quell.sim import SimEnvironment
from quell.sim.core import EventCore, Records
from quell.sim.service import ClosedLoopDraws, page_index
from tests.cli.inprocess import run_quell
from tests.models.test_queueing import BATCHES, batch_ci

IC2_SWEEP = Path(__file__).resolve().parents[2] / "scenarios" / "ic2" / "sim-sweep.yaml"


def closed_run(
    users: int,
    think_s: float,
    demand_s: float,
    requests: int,
    seed: int,
    fcfs: bool = False,
) -> tuple[EventCore, Records]:
    """``users`` users (all starting at 0) on one station of exponential demand ``demand_s``
    (processor sharing, or one FCFS server), thinking Exp(``think_s``), until ``requests``
    requests were sent and answered."""
    sizes = component_rng(seed, "test/sizes")
    thinks = component_rng(seed, "test/think")

    def draw(user: int) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
        n = 64  # the next 64 requests of the user (any user: one stream, in the order asked)
        return (
            sizes.exponential(demand_s, n),
            np.zeros(n, dtype=np.int64),
            thinks.exponential(think_s, n),
        )

    core = EventCore()
    r = core.add_resource(1.0, 1.0 if fcfs else math.inf)
    core.add_instance(r, concurrency_limit=1 if fcfs else None)
    core.add_users(np.zeros(users), keepalive=False, draw=draw, max_requests=requests)
    horizon = requests * (think_s + demand_s * users) / users * 4  # well past the last answer
    parts = [core.run(horizon * k / 8, np.empty(0), np.empty(0)) for k in range(1, 9)]
    rec = Records(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in Records.__annotations__)
    )
    assert core.requests_sent == requests and len(rec) == requests
    return core, rec


def steady(rec: Records) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Completion times and response times in completion order, the first 5 % dropped."""
    done = rec.start_s + rec.rt_s
    keep = slice(int(0.05 * done.size), None)
    return done[keep], rec.rt_s[keep]


def throughput_ci(done_s: NDArray[np.float64]) -> tuple[float, float]:
    """Throughput and the half-width of its 99 % interval: completions per batch of time."""
    edges = np.linspace(done_s[0], done_s[-1], BATCHES + 1)
    counts, _ = np.histogram(done_s, bins=edges)
    return batch_ci(counts / np.diff(edges))


@pytest.mark.parametrize("fcfs", [False, True], ids=["ps", "fcfs"])
@pytest.mark.parametrize("users", [1, 4, 11, 30])
def test_throughput_and_response_time_match_mva(users: int, fcfs: bool) -> None:
    # Demand D = 0.1 s, think Z = 1 s: the knee is at N* = (D + Z) / D = 11 users. A PS station
    # (any demand distribution) and an FCFS one with exponential demand are both product form,
    # so MVA is exact; each estimate within its 99 % interval, and the interval informative.
    demand, think = 0.1, 1.0
    core, rec = closed_run(users, think, demand, 120_000, seed=users + 100 * fcfs, fcfs=fcfs)
    x_mva, r_mva, _ = mva_closed([demand], think, users)
    done, rt = steady(rec)
    x, x_half = throughput_ci(done)
    r, r_half = batch_ci(rt)
    assert abs(x - x_mva) <= x_half and x_half < 0.02 * x
    assert abs(r - r_mva) <= r_half and r_half < 0.05 * r
    # the interactive response-time law with the measured R
    assert abs(x - users / (r + think)) <= x_half
    # Little's law, exact once the users have stopped and the station drained
    assert core.in_system().sum() == 0
    assert core.instances_.area.sum() == pytest.approx(rec.rt_s.sum(), rel=1e-9)


def test_users_ramp_up_evenly_and_stop_at_max_requests() -> None:
    sizes = component_rng(1, "test/sizes")

    def draw(user: int) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
        return sizes.exponential(0.01, 3), np.zeros(3, dtype=np.int64), np.full(3, 100.0)

    core = EventCore()
    core.add_instance(core.add_resource(1.0))
    core.add_users(np.arange(10) * 0.5, keepalive=False, draw=draw, max_requests=15)
    first = core.run(5.0, np.empty(0), np.empty(0))
    assert np.allclose(np.sort(first.start_s), np.arange(10) * 0.5)  # think 100 s: one each
    rest = core.run(1000.0, np.empty(0), np.empty(0))
    assert len(rest) == 5 and core.requests_sent == 15  # then 5 more, and no more


def test_a_closed_loop_scenario_runs_and_compares(tmp_path: Path) -> None:
    run = run_quell("sim", "run", IC2_SWEEP, "--runs-dir", tmp_path, "--json")
    assert run.code == 0, run.stderr
    cmp = run_quell("sim", "compare", IC2_SWEEP, "--runs-dir", tmp_path, "--json")
    assert cmp.code == 0, cmp.stderr
    doc = json.loads(cmp.stdout.splitlines()[-1])
    assert doc["oracle"] is None and doc["policies"][0]["mean_rt_ms"] > 0


def test_users_draw_from_their_own_streams_as_the_lab_does() -> None:
    # Request j of user k takes uniforms 2j and 2j + 1 of stream workload/users/<k>: the path
    # by inverse CDF over the mix, the think -Z ln(1 - u) (quell.workload.population).
    scenario = load_scenario(IC2_SWEEP)
    env = SimEnvironment(scenario)
    draws = ClosedLoopDraws(scenario, env.schedule_, page_index(scenario, env.schedule_.paths))
    u = component_rng(scenario.seed, "workload/users/7").random((128, 2))
    size, page, think = (np.concatenate(x) for x in zip(draws(7), draws(7), strict=True))
    assert np.array_equal(page, np.where(u[:, 0] < 0.5, 1, 0))  # /work.php first in the mix
    assert np.allclose(think, -2.0 * np.log1p(-u[:, 1]), rtol=1e-15)
    assert np.array_equal(size, np.where(page == 1, 1000.0, 10_000.0))


def test_a_user_asks_and_thinks_in_the_simulator_as_in_the_lab() -> None:
    # the lab's load generator takes its users from build_population (UserDraws, one request
    # at a time); the simulator draws blocks for the event core: the same sequence
    scenario = load_scenario(IC2_SWEEP)
    env = SimEnvironment(scenario)
    draws = ClosedLoopDraws(scenario, env.schedule_, page_index(scenario, env.schedule_.paths))
    population = build_population(scenario)
    assert population is not None
    for user in (0, 399):
        lab = population.draws(user)
        asked = [lab.next() for _ in range(150)]
        _, page, think = (
            np.concatenate(x) for x in zip(*(draws(user) for _ in range(3)), strict=True)
        )
        assert [p for p, _ in asked] == [1 - int(k) for k in page[:150]]  # /work.php is page 1
        assert [t for _, t in asked] == think[:150].tolist()


def test_same_seed_same_closed_loop_run(tmp_path: Path) -> None:
    docs = []
    for k in range(2):
        out = run_quell("sim", "run", IC2_SWEEP, "--runs-dir", tmp_path / str(k), "--json")
        doc = json.loads(out.stdout.splitlines()[-1])
        docs.append(doc["phases"])
    assert docs[0] == docs[1]

"""Where missed instance-intervals fall against the neighbours' arrivals, on observations built by
hand (every count worked out below), and ``quell sim misses`` on a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.core.action import AddInstance, Decision
from quell.core.observation import OLDEST_KEY, Observation, Snapshot
from quell.report.misses import PLACES, fleet_short_ends, miss_breakdown
from quell.scenario import parse_scenario
from quell.store.run import RunStore
from tests.cli.inprocess import assert_refused, run_quell
from tests.sim.build import scenario_data

# h0's neighbour: off 45 s, on 40 s, off 45 s... (fixed): within the run it arrives at 45 and leaves
# at 85; h1's neighbour (off 5 s, on 1000 s): arrives at 5 and stays.
DATA: dict[str, Any] = scenario_data(
    n_hosts=2,
    name="misses",
    interval_s=10,
    duration_s=100,
    instances=[{"id": "a", "host": "h0"}],
    scaling={"hosts": ["h1"], "boot_s": 5},
    target={"mean_rt_s": 0.1},
    service={
        "interference": [
            {
                "hosts": ["h0"],
                "bitrate_mbit": 40,
                "on_seconds": 40,
                "off_seconds": 45,
                "durations": "fixed",
                "start": "off",
            },
            {
                "hosts": ["h1"],
                "bitrate_mbit": 40,
                "on_seconds": 1000,
                "off_seconds": 5,
                "durations": "fixed",
                "start": "off",
            },
        ]
    },
)

# (instance, t): (requests, mean RT, weight, extra); t is the interval (t - 10, t]
OBS: dict[tuple[str, int], tuple[int, float | None, int, dict[str, float]]] = {
    ("a", 10): (5, 0.05, 100, {}),
    ("a", 20): (5, 0.05, 100, {}),
    ("a", 30): (5, 0.05, 100, {}),
    ("a", 40): (5, 0.2, 100, {}),  # no neighbour: clear, above 0.1 s
    ("a", 50): (5, 0.3, 100, {OLDEST_KEY: 1.5}),  # arrived at 45, a request still held
    ("a", 60): (2, 0.4, 0, {}),  # next interval at weight 0: stranded, missed
    ("a", 70): (1, 0.05, 0, {}),  # the one after, at weight 0: met
    ("a", 80): (0, None, 0, {}),  # nothing served
    ("a", 90): (3, 0.15, 50, {}),  # the neighbour was there at 80 (it left at 85): on
    ("a", 100): (4, 0.05, 100, {}),  # clear, met
    # b added on h1 at 30, whose neighbour arrived at 15: serving from 40
    ("b", 40): (3, 0.12, 100, {}),  # there from before: on
    ("b", 50): (3, 0.08, 100, {}),
}


def observations() -> list[Observation]:
    return [
        Observation(
            time_s=float(t),
            instance_id=iid,
            interval_s=10.0,
            requests=n,
            mean_rt_seconds=rt,
            weight=w,
            extra=extra,
        )
        for (iid, t), (n, rt, w, extra) in sorted(OBS.items(), key=lambda kv: kv[0][1])
    ]


def test_each_miss_is_placed_by_the_arrivals_on_its_host() -> None:
    b = miss_breakdown(observations(), parse_scenario(DATA), {"a": "h0", "b": "h1"})
    assert b.served == 11  # a at 80 served nothing
    assert b.misses == 5  # a 40, 50, 60, 90; b 40
    assert b.by_place == {
        "arrival": (1, 0),
        "next": (0, 1),
        "second": (0, 0),
        "on": (2, 0),
        "clear": (1, 0),
    }
    assert list(b.by_place) == list(PLACES)
    assert (b.arrival_served, b.arrivals_served, b.arrivals_in_flight) == (1, 1, 1)
    assert (b.stranded_intervals, b.stranded_misses) == (1, 1)
    # one arrival with a request held, every stranded interval missed: 1 unavoidable miss
    assert b.stranded_bound == 1.0
    assert b.settled_ceiling == pytest.approx(1 - 1 / (11 - 1))
    assert b.all_ceiling == pytest.approx(1 - (1 + 1) / 11)


def test_an_instance_whose_host_is_unknown_is_left_out() -> None:
    b = miss_breakdown(observations(), parse_scenario(DATA), {"a": "h0"})
    assert (b.served, b.misses) == (9, 4)


def test_without_neighbours_every_miss_is_clear_and_nothing_is_bounded() -> None:
    data = {k: v for k, v in DATA.items() if k != "service"}
    b = miss_breakdown(observations(), parse_scenario(data), {"a": "h0", "b": "h1"})
    assert b.by_place["clear"] == (4, 1)  # a 40, 50, 90, b 40 above 0; a 60 at weight 0
    assert b.stranded_bound is None and b.settled_ceiling is None
    assert b.notes


def write_run(run_dir: Path, environment: str = "sim") -> None:
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(DATA))
    store = RunStore.create(run_dir)
    store.set_meta(scenario="misses", environment=environment, duration_s=100, finished_at=1.0)
    for t in range(10, 101, 10):
        obs = {o.instance_id: o for o in observations() if o.time_s == t}
        store.add_snapshot(Snapshot(float(t), "sim", obs))
    store.add_decision(30.0, "p", Decision((AddInstance("b", "h1"),), "grow"))
    store.commit()
    store.close()


def test_sim_misses_reads_hosts_from_the_run_and_prints_json(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    out = run_quell("sim", "misses", tmp_path / "run", "--json")
    assert out.code == 0, out
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["scenario"] == "misses"
    assert (doc["served"], doc["misses"]) == (11, 5)
    assert doc["by_place"]["on"] == {"weight_above_0": 2, "weight_0": 0}
    assert doc["stranded_bound"] == 1.0
    assert "the interval a neighbour arrived in" in out.stdout
    assert "at most 90.00% settled" in out.stdout


def test_sim_misses_on_a_lab_run_places_the_misses_and_says_why_there_is_no_ceiling(
    tmp_path: Path,
) -> None:
    write_run(tmp_path / "run", environment="lab")
    out = run_quell("sim", "misses", tmp_path / "run", "--json")
    assert out.code == 0, out
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["misses"] == 5 and doc["arrivals_in_flight"] is None
    assert doc["settled_ceiling"] is None
    assert "does not report the requests an instance holds" in out.stdout


def test_sim_misses_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    assert_refused(run_quell("sim", "misses", tmp_path), "not a run directory")


def test_an_antagonist_started_at_an_interval_boundary_arrives_in_the_interval_after() -> None:
    # iperf3 on h1 from the event at 20 s to the one at 60 s; b misses at 30, 40, 60 and 70.
    data = {k: v for k, v in DATA.items() if k != "service"} | {
        "antagonists": [{"id": "n", "kind": "iperf3", "host": "h1", "bitrate_mbit": 40}],
        "events": [{"at_s": 20, "start": ["n"]}, {"at_s": 60, "stop": ["n"]}],
    }
    obs = [
        Observation(time_s=float(t), instance_id="b", interval_s=10.0, requests=4,
                    mean_rt_seconds=0.2, weight=100)
        for t in (30, 40, 60, 70)
    ]  # fmt: skip
    b = miss_breakdown(obs, parse_scenario(data), {"b": "h1"})
    # 30: (20, 30] holds the start at 20; 40: the next; 60: there from before (on at 50);
    # 70: gone at 60, so clear
    assert b.by_place == {
        "arrival": (1, 0),
        "next": (1, 0),
        "second": (0, 0),
        "on": (1, 0),
        "clear": (1, 0),
    }


def test_a_run_that_does_not_report_requests_in_flight_gets_no_estimate() -> None:
    b = miss_breakdown(
        observations(), parse_scenario(DATA), {"a": "h0", "b": "h1"}, in_flight_reported=False
    )
    assert b.by_place["arrival"] == (1, 0)  # placing the misses needs no more than the scenario
    assert b.arrivals_in_flight is None
    assert b.stranded_bound is None and b.settled_ceiling is None and b.all_ceiling is None
    assert any("does not report" in n for n in b.notes)


def short_data(rate_rps: float) -> dict[str, Any]:
    """DATA at a steady ``rate_rps`` (deterministic arrivals)."""
    return DATA | {
        "workload": DATA["workload"]
        | {"arrival": {"process": "deterministic", "rate_rps": rate_rps}}
    }


def test_the_fleet_is_short_where_every_host_together_falls_below_the_load() -> None:
    # λ_max = (C − S / R_th) / S with S = 100 kB, R_th = 0.1 s: a clean 12.5 MB/s link takes
    # 115 requests/s, one with 40 Mbit/s taken (7.5 MB/s) 65. At 140 requests/s the two hosts
    # fall short only while both neighbours are on, h0's from 45 to 85 s: (50, 60], (60, 70] and
    # (70, 80] (130 < 140); (40, 50] and (80, 90] are half clean on h0 (90 + 65 = 155).
    ends = fleet_short_ends(parse_scenario(short_data(140.0)), Path("."))
    assert ends is not None and ends.tolist() == [60.0, 70.0, 80.0]
    assert fleet_short_ends(parse_scenario(short_data(125.0)), Path(".")).size == 0  # type: ignore[union-attr]


def test_misses_in_the_intervals_the_fleet_falls_short_are_counted() -> None:
    scenario = parse_scenario(short_data(140.0))
    ends = fleet_short_ends(scenario, Path("."))
    b = miss_breakdown(observations(), scenario, {"a": "h0", "b": "h1"}, short_ends_s=ends)
    # the misses are a 40, 50, 60, 90 and b 40: only a 60 is in a short interval
    assert (b.short_intervals, b.short_misses) == (3, 1)
    assert b.to_dict()["short_misses"] == 1
    assert type(b).from_dict(b.to_dict()) == b
    unknown = miss_breakdown(observations(), scenario, {"a": "h0", "b": "h1"})
    assert unknown.short_intervals is None and unknown.short_misses == 0


def test_sim_misses_says_how_many_misses_fell_where_the_fleet_was_short(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(short_data(140.0)))
    out = run_quell("sim", "misses", run_dir, "--json")
    assert out.code == 0, out
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert (doc["short_intervals"], doc["short_misses"]) == (3, 1)
    assert "In 3 intervals every host the policy may use" in out.stdout

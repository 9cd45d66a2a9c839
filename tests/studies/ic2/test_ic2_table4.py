"""Table 4's arithmetic on a run written by hand: the response time of each antagonist period's
first part and the rest, request-weighted, and the latencies of the reconfigurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from quell.core.action import Decision, ReconfigureServer
from quell.core.observation import Observation, Snapshot
from quell.scenario import load_scenario
from quell.store.run import RequestRecord, RunStore
from quell.studies.ic2.table4 import period_rt, table4
from tests.cli.inprocess import assert_refused, run_quell

ROOT = Path(__file__).resolve().parents[3]


def scenario(tmp: Path, one_instance: bool = False):  # type: ignore[no-untyped-def]
    doc = yaml.safe_load((ROOT / "scenarios" / "interference-smoke.yaml").read_text())
    if one_instance:  # i2 alone, on the antagonist's host
        doc["instances"] = [i for i in doc["instances"] if i["id"] == "i2"]
        doc["hosts"] = [h for h in doc["hosts"] if h["id"] == "h2"]
    doc.update(
        duration_s=40,
        events=[
            {"at_s": 10, "phase": "on", "start": ["noise"]},
            {"at_s": 20, "phase": "off", "stop": ["noise"]},
        ],
    )
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_scenario(path)


def write_run(
    run_dir: Path, rt_on_s: float, reconfigure_at: list[float], cpu_on: float = 0.5
) -> Path:
    # i2 (on the antagonist's host): 10 requests a second at 10 ms on 0.1 of a core, 20 at
    # rt_on_s on cpu_on while the antagonist runs (intervals ending 11..20); i1 (not
    # interfered) at 500 ms on 0.9, never counted.
    with RunStore.create(run_dir) as store:
        for t in range(1, 41):
            on = 10 < t <= 20
            snap = Snapshot(
                float(t),
                "test",
                {
                    "i1": Observation(
                        float(t), "i1", 1.0, requests=10, mean_rt_seconds=0.5, cpu_util=0.9
                    ),
                    "i2": Observation(
                        float(t),
                        "i2",
                        1.0,
                        requests=20 if on else 10,
                        mean_rt_seconds=rt_on_s if on else 0.01,
                        cpu_util=cpu_on if on else 0.1,
                    ),
                },
            )
            store.add_snapshot(snap)
            if t in reconfigure_at:
                store.add_decision(float(t), "ic2", Decision((ReconfigureServer("i2", {}),)))
        store.commit()
    return run_dir


def test_period_means_and_latencies(tmp_path: Path) -> None:
    sc = scenario(tmp_path)
    run = write_run(tmp_path / "a", 0.2, reconfigure_at=[13.0, 24.0])
    with RunStore.open(run) as store:
        r = period_rt(store, sc, first_s=4)
    # first 4 s: intervals ending 11..14 at 0.2 s; after: 15..20 at 0.2 s
    assert r["first_rt_s"] == pytest.approx(0.2)
    assert r["after_rt_s"] == pytest.approx(0.2)
    assert r["clean_rt_s"] == pytest.approx(0.01)
    assert r["detect_latency_s"] == 3.0 and r["clear_latency_s"] == 4.0
    assert r["reconfigurations"] == 2
    assert [(p["start_s"], p["stop_s"]) for p in r["periods"]] == [(10.0, 20.0)]
    # CPU per request: 10 intervals of 0.5 core for 20 requests each; 30 of 0.1 for 10
    assert r["interfered_cpu_s_per_request"] == pytest.approx(0.025)
    assert r["clean_cpu_s_per_request"] == pytest.approx(0.01)


def test_reductions_against_the_first_run(tmp_path: Path) -> None:
    sc = scenario(tmp_path)
    base = write_run(tmp_path / "base", 0.2, [])
    better = write_run(tmp_path / "better", 0.15, [12.0])
    doc = table4(sc, [("static", base), ("ic2", better)], first_s=4)
    assert doc["rows"]["static"]["first_reduction_pct"] == 0.0
    assert doc["rows"]["ic2"]["first_reduction_pct"] == 25.0
    assert doc["rows"]["ic2"]["after_reduction_pct"] == 25.0
    assert doc["rows"]["static"]["detect_latency_s"] is None
    assert doc["rows"]["ic2"]["detect_latency_s"] == 2.0


def test_by_send_time_each_request_counts_whole_where_it_was_sent(tmp_path: Path) -> None:
    # i2's antagonist runs [10, 20); first_s 4. A request sent at 12 s that waits 90 s ends in
    # a clean interval: the interval figures book it there, the send-time ones in the period.
    sc = scenario(tmp_path)
    run = write_run(tmp_path / "a", 0.2, [])
    with RunStore.create(run) as store:
        store.add_requests(
            [
                RequestRecord(5.0, 0.01, 200, 100, "i2"),
                RequestRecord(11.0, 0.3, 200, 100, "i2"),
                RequestRecord(12.0, 90.0, 200, 100, "i2"),
                RequestRecord(16.0, 0.2, 200, 100, "i2"),
                RequestRecord(18.0, None, 0, 0, "i2", "timeout"),
                RequestRecord(21.0, 0.5, 200, 100, "i2"),  # within first_s of the stop
                RequestRecord(25.0, 0.02, 200, 100, "i2"),
                RequestRecord(35.0, 0.01, 200, 100, "i2"),
                RequestRecord(12.0, 7.0, 200, 100, "i1"),  # i1's host runs no antagonist
            ]
        )
        store.commit()
    with RunStore.open(run) as store:
        r = period_rt(store, sc, first_s=4)
    assert r["sent_first_rt_s"] == pytest.approx((0.3 + 90.0) / 2)
    assert r["sent_after_rt_s"] == pytest.approx(0.2)  # the failure has no response time
    assert r["sent_rt_s"] == pytest.approx((0.3 + 90.0 + 0.2) / 3)
    assert r["sent_clean_rt_s"] == pytest.approx((0.01 + 0.02 + 0.01) / 3)
    assert r["sent_requests"] == 4 and r["sent_over_first_s"] == 2  # 90 s, and the failure
    assert r["first_rt_s"] == pytest.approx(0.2)  # the intervals' figures as before
    # what users waited: the timed-out request (sent at 18 s, in the rest) at the timeout
    timeout = sc.workload.timeout_s
    assert r["sent_first_waited_s"] == pytest.approx((0.3 + 90.0) / 2)
    assert r["sent_after_waited_s"] == pytest.approx((0.2 + timeout) / 2)
    assert r["sent_waited_s"] == pytest.approx((0.3 + 90.0 + 0.2 + timeout) / 4)
    assert r["sent_failed"] == 1


def test_failing_requests_do_not_make_a_policy_faster(tmp_path: Path) -> None:
    """A run that answers its fast requests as fast but lets one user time out: faster by the
    answered requests' mean, slower by what users waited."""
    sc = scenario(tmp_path)
    timeout = sc.workload.timeout_s
    runs = []
    for name, last in (
        ("base", RequestRecord(17.0, 0.6, 200, 100, "i2")),
        ("worse", RequestRecord(17.0, None, 0, 0, "i2", "timeout")),
    ):
        run = write_run(tmp_path / name, 0.2, [])
        with RunStore.create(run) as store:
            store.add_requests([RequestRecord(16.0, 0.2, 200, 100, "i2"), last])
            store.commit()
        runs.append((name, run))
    row = table4(sc, runs, first_s=4)["rows"]["worse"]
    assert row["sent_reduction_pct"] == pytest.approx(100 * (0.4 - 0.2) / 0.4, abs=0.05)
    waited = (0.2 + timeout) / 2
    assert row["after_waited_reduction_pct"] == pytest.approx(100 * (0.4 - waited) / 0.4, abs=0.05)
    assert row["after_waited_reduction_pct"] < 0 and row["sent_failed"] == 1


def test_a_timeout_without_a_server_is_the_only_instances(tmp_path: Path) -> None:
    """The load generator's timeout names no server: with one instance it was that one's, with
    two it cannot be told whose and is left out."""
    unnamed = RequestRecord(17.0, None, 0, 0, "", "timeout")
    for one, failed in ((True, 1), (False, 0)):
        sc = scenario(tmp_path, one_instance=one)
        run = write_run(tmp_path / f"one-{one}", 0.2, [])
        with RunStore.create(run) as store:
            store.add_requests([RequestRecord(16.0, 0.2, 200, 100, "i2"), unnamed])
            store.commit()
        with RunStore.open(run) as store:
            r = period_rt(store, sc, first_s=4)
        assert r["sent_failed"] == failed and r["sent_requests"] == 1 + failed


def test_the_results_page_is_generated_from_its_data(monkeypatch: pytest.MonkeyPatch) -> None:
    from quell.studies.ic2.results import render

    monkeypatch.chdir(ROOT)
    page = render(Path("docs/results/data/ic2"))
    assert "## Table 4" in page and "## Detection" in page
    assert page == Path("docs/results/ic2.md").read_text()


def test_runs_of_one_label_are_repetitions_paired_with_the_baseline_s(tmp_path: Path) -> None:
    sc = scenario(tmp_path)
    base = [write_run(tmp_path / f"b{k}", rt, []) for k, rt in enumerate((0.2, 0.4))]
    mine = [write_run(tmp_path / f"m{k}", rt, [12.0, 23.0]) for k, rt in enumerate((0.15, 0.2))]
    runs = [("static", base[0]), ("ic2", mine[0]), ("static", base[1]), ("ic2", mine[1])]
    doc = table4(sc, runs, first_s=4)
    static, ic2 = doc["rows"]["static"], doc["rows"]["ic2"]
    assert static["repetitions"] == ic2["repetitions"] == 2
    assert static["first_rt_s"] == pytest.approx(0.3) and ic2["first_rt_s"] == pytest.approx(0.175)
    # the reduction of the means, 1 - 0.175 / 0.3; the pairs' own are 25 % and 50 %, whose
    # standard error is stdev(25, 50) / sqrt(2) = 12.5
    assert ic2["first_reduction_pct"] == 41.7 and ic2["after_reduction_pct"] == 41.7
    assert ic2["first_reduction_pct_se"] == 12.5
    assert "first_reduction_pct_se" not in static
    assert [r["first_reduction_pct"] for r in ic2["runs"]] == [25.0, 50.0]
    assert ic2["run_dirs"] == [str(m) for m in mine]
    # latencies over both runs' periods; reconfigurations per run
    assert ic2["detect_latency_s"] == 2.0 and ic2["clear_latency_s"] == 3.0
    assert ic2["reconfigurations"] == 2.0


def test_the_page_shows_how_hard_the_neighbour_reached_each_run(tmp_path: Path) -> None:
    import json

    from quell.studies.ic2.results import render

    sc = scenario(tmp_path)
    runs = [
        ("static", write_run(tmp_path / "b0", 0.2, [], cpu_on=0.5)),
        ("ic2", write_run(tmp_path / "m0", 0.15, [12.0], cpu_on=0.8)),
        ("static", write_run(tmp_path / "b1", 0.4, [], cpu_on=0.7)),
        ("ic2", write_run(tmp_path / "m1", 0.2, [12.0], cpu_on=0.4)),
    ]
    doc = table4(sc, runs, first_s=4)
    assert doc["rows"]["static"]["interfered_cpu_s_per_request"] == pytest.approx(0.03)
    data = tmp_path / "data"
    data.mkdir()
    (data / "table4-t.json").write_text(json.dumps(doc))
    page = render(data)
    # 0.5 x 10 / 200 = 25 ms a request, 0.7: 35, 0.8: 40, 0.4: 20; outside 0.1 / 10 = 10 ms
    assert "| static | 25.0, 35.0 | 10.0, 10.0 |" in page
    assert "| ic2 | 40.0, 20.0 | 10.0, 10.0 |" in page


def recorded(run_dir: Path, scenario_json: dict[str, object]) -> Path:
    """``run_dir`` with the scenario it ran in its meta, as a run of the runner records it."""
    with RunStore.create(run_dir) as store:
        store.set_meta(scenario_json=scenario_json)
    return run_dir


def test_the_command_labels_runs_by_their_policy_and_names_every_bad_input(
    tmp_path: Path,
) -> None:
    sc = scenario(tmp_path)
    doc = sc.model_dump(mode="json")
    static = recorded(write_run(tmp_path / "b", 0.2, []), doc | {"policy": {"name": "static"}})
    ic2 = recorded(
        write_run(tmp_path / "m", 0.15, [12.0]), doc | {"policy": {"name": "ic2", "label": "on"}}
    )
    done = run_quell("ic2", "table4", static, ic2, "--first-s", "4", "--json")
    assert done.code == 0, done.stderr
    rows = json.loads(done.stdout.splitlines()[-1])["rows"]
    assert list(rows) == ["static", "on"]
    assert rows["on"]["first_reduction_pct"] == 25.0  # 1 - 0.15 / 0.2
    assert "mean RT of the interfered instances under interference" in done.stdout
    other = recorded(write_run(tmp_path / "o", 0.2, []), doc | {"duration_s": 30})
    assert_refused(
        run_quell("ic2", "table4", static, other, "--first-s", "0"),
        "--first-s: must be > 0, got 0",
        "RUN_DIRS: are not runs of one scenario",
    )
    assert_refused(
        run_quell("ic2", "table4", tmp_path / "b-nowhere"), "not a run directory (no run.db)"
    )

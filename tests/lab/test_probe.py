"""The interference probe and the host link's total utilisation, on real components: iperf3
floods host 2's link; the probe on host 2 slows, host 1's does not; ``link_util_pct`` sees the
flood, the instance's own ``util_pct`` does not."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from quell.core.observation import Observation
from quell.lab.prober import max_downloads, parse_record
from quell.probe.severity import PROBE_COUNT_KEY, PROBE_KEY
from quell.scenario import parse_scenario
from quell.store.run import RunStore
from tests.lab.leftovers import run_clean

pytestmark = pytest.mark.lab

FLOOD_AT_S = 10.0
DURATION_S = 22.0
SCENARIO = {
    "name": "probe",
    "seed": 11,
    "duration_s": DURATION_S,
    "hosts": [{"id": "h1", "link_mbit": 20}, {"id": "h2", "link_mbit": 20}],
    "instances": [{"id": "a", "host": "h1"}, {"id": "b", "host": "h2"}],
    "files": [{"path": "/x.bin", "size_bytes": 20000}],
    "workload": {
        "arrival": {"process": "poisson", "rate_rps": 20},
        "requests": [{"path": "/x.bin"}],
    },
    "antagonists": [{"id": "noise", "kind": "iperf3", "host": "h2", "streams": 2}],
    "events": [{"at_s": FLOOD_AT_S, "phase": "flood", "start": ["noise"]}],
    "probe": {"period_s": 1, "size_bytes": 200_000},
}


def median(values: list[float]) -> float:
    assert values
    return statistics.median(values)


def test_probe_and_link_utilisation_see_a_neighbour_flood_the_link(tmp_path: Path) -> None:
    scenario = parse_scenario(SCENARIO)
    run_dir = run_clean(scenario, tmp_path)
    with RunStore.open(run_dir) as store:
        obs = store.observations()

    def value(o: Observation, key: str) -> float | None:
        return o.util_pct if key == "util_pct" else o.extra.get(key)

    def series(iid: str, key: str, start_s: float, end_s: float) -> list[float]:
        picked = [o for o in obs if o.instance_id == iid and start_s < o.time_s <= end_s]
        return [v for o in picked if (v := value(o, key)) is not None]

    def medians(key: str) -> dict[tuple[str, str], float]:
        return {(i, p): median(series(i, key, *w)) for i in "ab" for p, w in windows.items()}

    # every instance reports a probe time in (nearly) every 1 s interval
    for iid in ("a", "b"):
        probes = series(iid, PROBE_KEY, 1.0, DURATION_S)
        assert len(probes) >= 0.7 * (DURATION_S - 1), (iid, len(probes))
    # the log is bounded: one download per period, never more
    records = [parse_record(line) for line in (run_dir / "probes.csv").read_text().splitlines()]
    last_s = max(o.time_s for o in obs)
    for iid in ("a", "b"):
        mine = [r for r in records if r is not None and r.instance_id == iid]
        assert len(mine) <= max_downloads(DURATION_S, 1.0)
        assert all(r.ok for r in mine if r.time_s < FLOOD_AT_S)
        # every successful download is in the intervals' readings, none dropped for a faster
        # one completing in the same interval (behind the flood, b's spill past an interval's
        # end): their counts add up to the log's, their means average to its mean
        done = [r.seconds for r in mine if r.ok and r.end_s < last_s]
        read = [o.extra for o in obs if o.instance_id == iid and PROBE_KEY in o.extra]
        counted = sum(e[PROBE_COUNT_KEY] for e in read)
        assert len(done) - 1 <= counted <= len(done) + 1, (iid, counted, len(done))
        mean_read = sum(e[PROBE_KEY] * e[PROBE_COUNT_KEY] for e in read) / counted
        assert mean_read == pytest.approx(statistics.fmean(done), rel=0.05), iid

    # iperf3 needs a moment to fill the link
    windows = {"calm": (1.0, FLOOD_AT_S), "flood": (FLOOD_AT_S + 2.0, DURATION_S)}
    probe = medians(PROBE_KEY)
    # 200 kB at 20 Mbit/s alone is about 80 ms; behind the flood's queue it takes several times that
    assert probe["b", "flood"] >= 1.5 * probe["b", "calm"], probe
    assert probe["a", "flood"] <= 1.3 * probe["a", "calm"], probe

    link, util = medians("link_util_pct"), medians("util_pct")
    print(
        f"medians: probe {probe}, link_util_pct {link}, util_pct {util}"
    )  # for docs/reference/lab.md
    assert link["b", "calm"] <= 40.0 and link["b", "flood"] >= 85.0, link
    assert link["a", "flood"] <= 40.0, link
    # the instance's own traffic did not grow: the flood is its neighbour's
    assert util["b", "flood"] <= util["b", "calm"] + 10.0, util
    # one instance per host: its bytes are a part of what left the host (from the second
    # interval on: the first one's two byte counters start from baselines read moments apart,
    # and its end time is 1.000x s, so `time_s > 1.0` did not leave it out)
    for o in obs:
        if o.time_s > 1.5:
            assert o.util_pct is not None and o.util_pct <= o.extra["link_util_pct"] + 3.0, o

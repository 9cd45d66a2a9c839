"""A run store built by hand with known values, so the report tests can check exact numbers.

Two instances (web1, web2), interval 2 s, phases baseline [0, 10) and noisy [10, 20).
"""

from __future__ import annotations

from pathlib import Path

from quell.core.action import AddInstance, Decision, SetWeight
from quell.core.observation import Observation, Snapshot
from quell.store.run import RequestRecord, RunStore

INTERVAL_S = 2.0
PHASES = [["baseline", 0.0, 10.0], ["noisy", 10.0, 20.0]]

# Known client-side latencies (seconds) by (instance, phase); all status 200.
LATENCIES_S = {
    ("web1", "baseline"): [0.010, 0.020, 0.030, 0.040, 0.100],
    ("web1", "noisy"): [0.050, 0.070, 0.090, 0.110],
    ("web2", "baseline"): [0.005, 0.015, 0.025],
    ("web2", "noisy"): [0.200, 0.300],
}
SEND_S = {"baseline": [1.0, 3.0, 5.0, 7.0, 9.999], "noisy": [10.0, 12.0, 14.0, 16.0]}


def cpu_util(iid: str, t: float) -> float:
    """web1 uses 0.5 cores in the baseline and 0.9 when noisy; web2 0.25 and 0.75."""
    base, noisy = (0.5, 0.9) if iid == "web1" else (0.25, 0.75)
    return base if t <= 10.0 else noisy


def util_pct(iid: str, t: float) -> float:
    return 100.0 * cpu_util(iid, t) / 2.0


def observation(iid: str, t: float, **over: object) -> Observation:
    values: dict[str, object] = {
        "time_s": t,
        "instance_id": iid,
        "interval_s": INTERVAL_S,
        "requests": 10,
        "throughput_rps": 5.0 if iid == "web1" else 2.5,
        "mean_rt_seconds": 0.02 if t <= 10.0 else 0.08,
        "p95_rt_seconds": 0.04 if t <= 10.0 else 0.16,
        "cpu_util": cpu_util(iid, t),
        "util_pct": util_pct(iid, t),
    }
    values.update(over)
    return Observation(**values)  # type: ignore[arg-type]


def fill_run(
    run_dir: Path, *, finished: bool = True, requests: bool = True, until_s: float = 20.0
) -> RunStore:
    """Write the known run into ``run_dir``; observations every 2 s up to ``until_s``."""
    store = RunStore.create(run_dir)
    store.set_meta(
        scenario="twoweb",
        environment="sim",
        duration_s=20.0,
        interval_s=INTERVAL_S,
        phases=PHASES,
        started_at=1.0,
    )
    t = INTERVAL_S
    while t <= until_s + 1e-9:
        store.add_snapshot(
            Snapshot(t, "sim", {iid: observation(iid, t) for iid in ("web1", "web2")})
        )
        t += INTERVAL_S
    if requests:
        records = []
        for (iid, phase), lats in LATENCIES_S.items():
            for send, lat in zip(SEND_S[phase], lats, strict=False):
                if send <= until_s:
                    records.append(RequestRecord(send, lat, 200, 1000, iid))
        # One server error answered by web1 in the baseline, one request nobody answered.
        records.append(RequestRecord(4.0, 0.001, 503, 0, "web1", "HTTP 503"))
        records.append(RequestRecord(6.0, None, 0, 0, "", "timeout"))
        store.add_requests(records)
    store.add_event(10.0, "event", phase="noisy", start=["hog"], stop=[])
    store.add_event(15.0, "cycle_error", message="RuntimeError: boom")
    store.add_decision(
        12.0, "static", Decision(actions=(SetWeight("web1", 50),), reason="web1 p95 above target")
    )
    # A scaling decision with its per-instance numbers, as PRIMA records them.
    store.add_decision(
        14.0,
        "static",
        Decision(
            actions=(AddInstance("web3", "h3"),),
            reason="short by 7.5%",
            detail={
                "instances": {
                    "id": ["web1", "web2"],
                    "u_max_pct": [30.0, 12.5],
                    "sf_calibrated": [False, True],
                }
            },
        ),
    )
    store.commit()
    if finished:
        store.set_meta(finished_at=2.0, cycle_errors=1, ticks=10)
    return store

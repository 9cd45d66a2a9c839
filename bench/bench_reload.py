"""What reconfiguring an apache instance costs the requests it serves, measured under a steady
load, for each way of changing each setting: graceful (Apache restarts its children, php-fpm
its pool; the paper's "httpd-basic") against online (MaxRequestWorkers as HAProxy's maxconn;
the paper's "httpd-online"), with the worker and the event MPM, and a control where nothing is
changed.

Each trial is a fresh lab (a reload can leave the service in a state the next trial would
inherit): one apache instance pinned to CPU 0, the load generator on CPU 1, open-loop Poisson
requests for a PHP page (a 4 MiB working set, about 10 ms of CPU each) at 30 per second, HAProxy
on CPU 1 with the load generator, its server connections closed with the client's
(``http_reuse: never``). One more case keeps HAProxy's default (``safe``), whose idle server
connections hold worker-MPM threads for KeepAliveTimeout (``quell.scenario.model``).
After 5 s the change is applied; the requests sent in the 10 s after it are compared with those
of the 5 s before:

* ``failed``: no answer in time (5 s) or an error status;
* ``slowed``: answered, but slower than three times the p95 before (at least 50 ms);
  ``worst_ms`` the longest answer;
* ``bad_s``: a 0.5 s slice (by send time) is bad if a request sent in it failed or their mean
  response time is over twice the p95 before (``bad_slices_s``: their starts); the time in bad
  slices, which the control shows too (this machine's neighbours make one now and then);
* ``recovered_s``: the end of the last bad slice before the first 3 s without one (0 when the
  window starts with them), ``null`` if the 10 s hold no 3 s without a bad slice (a bad slice
  after such a stretch is counted in ``bad_s``, not here);
* ``apply_s``: how long ``apply`` took (the control loop waits that long).

Medians over the repetitions, and every trial, go to ``bench/results/reload.json``, with each
case's excess over the control of the same MPM in the same run (failed and slowed requests and
bad time more than it, its mean response time after the change divided by the control's)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from quell.core.action import Action, ReconfigureServer
from quell.lab.environment import LabEnvironment
from quell.lab.process import terminate_on_signals
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout
from quell.store.run import RequestRecord

RATE_RPS = 30.0
BEFORE_S = 5.0
AFTER_S = 10.0
SLICE_S = 0.5
STEADY_S = 3.0
"""Good slices in a row that count as recovered."""
TIMEOUT_S = 5.0
REPEATS = 2
START = {
    "threads_per_child": 8,
    "server_limit": 8,
    "max_request_workers": 32,
    "keepalive_timeout_s": 5,
    "php_max_children": 8,
}
CONTROL = "none (control)"
POOLED = "graceful KeepAliveTimeout 5 -> 10 s, HAProxy http-reuse safe"
"""The case run with HAProxy's default pool of idle server connections (worker MPM only)."""
CASES: dict[str, Action | None] = {
    CONTROL: None,
    "graceful MaxRequestWorkers 32 -> 16": ReconfigureServer("web", {"max_request_workers": 16}),
    "graceful MaxRequestWorkers 32 -> 48": ReconfigureServer("web", {"max_request_workers": 48}),
    "graceful KeepAliveTimeout 5 -> 10 s": ReconfigureServer("web", {"keepalive_timeout_s": 10}),
    "graceful php max_children 8 -> 12": ReconfigureServer("web", {"php_max_children": 12}),
    "online MaxRequestWorkers 32 -> 16": ReconfigureServer(
        "web", {"max_request_workers": 16}, graceful=False
    ),
    POOLED: ReconfigureServer("web", {"keepalive_timeout_s": 10}),
}


def _scenario(mpm: str, http_reuse: str = "never") -> dict[str, Any]:
    return {
        "name": f"bench-reload-{mpm}",
        "seed": 5,
        "duration_s": BEFORE_S + AFTER_S + 2,
        "hosts": [{"id": "h1", "cpus": [0]}],
        "instances": [
            {"id": "web", "host": "h1", "server": "apache", "apache": {"mpm": mpm, **START}}
        ],
        "load_balancer": {"cpus": [1], "http_reuse": http_reuse},
        "files": [{"path": "/x.bin", "size_bytes": 1000}],
        "pages": [
            {
                "path": "/p.php",
                "working_set_bytes": 4 << 20,
                "touches": 60000,
                "response_bytes": 2000,
            }
        ],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": RATE_RPS},
            "requests": [{"path": "/p.php"}],
            "timeout_s": TIMEOUT_S,
            "cpus": [1],
        },
    }


def _trial(mpm: str, action: Action | None, root: Path, http_reuse: str) -> dict[str, Any]:
    scenario = parse_scenario(_scenario(mpm, http_reuse))
    env = LabEnvironment(scenario, root, root / "run", detect_layout())
    records: list[RequestRecord] = []

    def follow(until_s: float) -> None:
        while env.clock.now() < until_s:
            env.clock.sleep_until(min(until_s, env.clock.now() + SLICE_S))
            env.observe()
            records.extend(env.take_requests())

    try:
        env.start()
        follow(BEFORE_S)
        at_s = env.clock.now()
        t = time.monotonic()
        if action is not None:
            env.apply([action])
        apply_s = time.monotonic() - t
        follow(at_s + AFTER_S + TIMEOUT_S + 0.5)  # every request of the window has ended
    finally:
        env.close()
    return _measure(records, at_s, apply_s)


def _answered(r: RequestRecord) -> float | None:
    """The response time of a request answered in time with a good status, else None."""
    return r.latency_s if r.latency_s is not None and 200 <= r.status < 400 else None


def _measure(records: list[RequestRecord], at_s: float, apply_s: float) -> dict[str, Any]:
    before = [
        lat
        for r in records
        if at_s - BEFORE_S + 1 <= r.send_s < at_s and (lat := _answered(r)) is not None
    ]
    p95 = float(np.percentile(before, 95))
    after = [(r.send_s - at_s, _answered(r)) for r in records if at_s <= r.send_s < at_s + AFTER_S]
    answered = [lat for _, lat in after if lat is not None]
    bad: list[float] = []
    for k in range(int(AFTER_S / SLICE_S)):
        part = [lat for t, lat in after if k * SLICE_S <= t < (k + 1) * SLICE_S]
        good = [lat for lat in part if lat is not None]
        if len(good) < len(part) or (good and statistics.mean(good) > 2 * p95):
            bad.append(k * SLICE_S)
    return {
        "apply_s": round(apply_s, 3),
        "before_mean_ms": round(1000 * statistics.mean(before), 1),
        "before_p95_ms": round(1000 * p95, 1),
        "sent_after": len(after),
        "failed": len(after) - len(answered),
        "slowed": sum(lat > max(3 * p95, 0.05) for lat in answered),
        "after_mean_ms": round(1000 * statistics.mean(answered or [0.0]), 1),
        "worst_ms": round(1000 * max(answered or [0.0]), 1),
        "bad_s": len(bad) * SLICE_S,
        "recovered_s": _recovered(bad),
        "bad_slices_s": bad,
    }


def _recovered(bad: list[float]) -> float | None:
    """The end of the last bad slice before the first ``STEADY_S`` without one."""
    last_end = 0.0
    for start in [*bad, AFTER_S]:
        if start - last_end >= STEADY_S - 1e-9:
            return last_end
        last_end = start + SLICE_S
    return None


def _median(trials: list[dict[str, Any]], key: str) -> float | None:
    values = [t[key] for t in trials]
    if any(v is None for v in values):
        return None  # one trial that did not recover: the case does not
    return round(float(statistics.median(values)), 3)


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def _run_trials(results: dict[str, dict[str, Any]]) -> None:
    """Every case with each MPM, ``REPEATS`` rounds of them (the rounds interleave, so the
    machine's slow moments spread over the cases)."""
    for rep in range(REPEATS):
        for mpm in ("worker", "event"):
            for name, action in CASES.items():
                if name == POOLED and mpm != "worker":
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    reuse = "safe" if name == POOLED else "never"
                    trial = _trial(mpm, action, Path(tmp), reuse)
                print(f"   {mpm:6s} {name:38s} rep {rep}: {trial}", flush=True)
                results.setdefault(f"{mpm}: {name}", {"trials": []})["trials"].append(trial)


def run() -> dict[str, Any]:
    if os.geteuid() != 0:
        raise RuntimeError("the reload benchmark runs a real lab and needs root")
    results: dict[str, dict[str, Any]] = {}
    with terminate_on_signals():  # a killed benchmark still tears its lab down
        _run_trials(results)
    for case in results.values():
        trials = case["trials"]
        keys = ("apply_s", "failed", "slowed", "after_mean_ms", "worst_ms", "bad_s", "recovered_s")
        for key in keys:
            case[key] = _median(trials, key)
    for name, case in results.items():
        control = results[f"{name.split(':')[0]}: {CONTROL}"]
        case["over_control"] = {
            "failed": _difference(case["failed"], control["failed"]),
            "slowed": _difference(case["slowed"], control["slowed"]),
            "bad_s": _difference(case["bad_s"], control["bad_s"]),
            "after_mean_ratio": round(case["after_mean_ms"] / control["after_mean_ms"], 2),
        }
    return {
        "benchmark": "reload cost: requests failed and slowed, and time to recover, per change",
        "load": f"Poisson {RATE_RPS:g} req/s of a PHP page (4 MiB working set, 60000 reads)",
        "window_s": {"before": BEFORE_S, "after": AFTER_S, "slice": SLICE_S, "steady": STEADY_S},
        "start_settings": START,
        "repeats": REPEATS,
        "cases": results,
    }

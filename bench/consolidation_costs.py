"""The database cost of each transaction class in the consolidation lab, one request at a time
through the whole chain (HAProxy, nginx, php-fpm, pdo_pgsql) with the full data, caps off:
pg_stat_statements' mean execution time and the tier's CPU per request (``cpuacct.usage``
delta over the requests; the CPU the backend used, unlike execution time, does not grow while
it waits for the core). ``python bench/consolidation_costs.py OUT.json`` (takes the lab lock)."""

from __future__ import annotations

import fcntl
import json
import sys
import time
from pathlib import Path

from quell.signals.cgroup import detect_layout, read_cpu_usage_ns
from quell.studies.consolidation.lab import LB_PORTS, ConsolidationLab, _get
from quell.studies.consolidation.point import ConsolidationPoint
from quell.studies.consolidation.postgres import reset_statements, statement_stats

COUNTS = {"light": 300, "heavy": 40}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    layout = detect_layout()
    result: dict[str, object] = {}
    with open("/tmp/quell-lab.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with ConsolidationLab() as lab:
            lab.ensure_front("liberal", ctp=False)
            caps = {"const": {"users": 0}, "inc": {"users": 0}}
            lab.set_caps(ConsolidationPoint.model_validate(caps))
            cluster, group = lab.clusters["inc"], lab.groups["inc"].name
            for cls, n in COUNTS.items():
                reset_statements(cluster)
                u0, t0 = read_cpu_usage_ns(layout, group), time.monotonic()
                for _ in range(n):
                    _get(LB_PORTS["inc"], f"/{cls}")
                u1, t1 = read_cpu_usage_ns(layout, group), time.monotonic()
                stats = [
                    s
                    for s in statement_stats(cluster)
                    if ("ILIKE" in s.query) == (cls == "heavy")
                    and ("ILIKE" in s.query or "BETWEEN" in s.query)
                ]
                result[cls] = {
                    "requests": n,
                    "calls_total": stats[0].calls_total,
                    "mean_exec_ms": round(stats[0].mean_exec_seconds * 1e3, 3),
                    "stddev_exec_ms": round(stats[0].stddev_exec_seconds * 1e3, 3),
                    "db_cpu_ms_per_request": round((u1 - u0) / 1e6 / n, 3),
                    "end_to_end_ms": round((t1 - t0) * 1e3 / n, 3),
                }
                print(cls, result[cls], flush=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

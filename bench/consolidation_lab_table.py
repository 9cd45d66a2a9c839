"""The lab sweep's measurements as a markdown table: per cap and Sys_Inc load, each quantity's
mean over the seeds and its range. ``python bench/consolidation_lab_table.py RUNS_DIR``."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from quell.studies.consolidation.point import ConsolidationMeasurement


def cell(xs: list[float], scale: float = 1.0, digits: int = 0) -> str:
    a = np.asarray(xs, dtype=np.float64) * scale
    if a.size == 0 or np.all(np.isnan(a)):
        return "–"
    fmt = f"{{:.{digits}f}}"
    return f"{fmt.format(np.nanmean(a))} ({fmt.format(np.nanmin(a))}–{fmt.format(np.nanmax(a))})"


def main(argv: list[str]) -> int:
    runs = Path(argv[0])
    groups: dict[
        tuple[float, int, bool, float, str], list[tuple[ConsolidationMeasurement, dict]]
    ] = defaultdict(list)
    for f in sorted(runs.rglob("measurement.json")):
        m = ConsolidationMeasurement.from_json(json.loads(f.read_text()))
        lab = json.loads((f.parent / "lab.json").read_text())
        p = m.point
        spin = (
            f"{'idle ' if p.competitor_idle else ''}{p.competitor_cpu_pct:g} %"
            if p.competitor_cpu_pct > 0
            else "–"
        )
        key = (p.const.cap_pct, p.inc.users, p.ctp, p.dispersion_index, spin)
        groups[key].append((m, lab))
    print(
        "| cap | Sys_Inc users | CTP | I | spinner | n | Sys_Const RT ms "
        "| Sys_Const light / heavy ms | Sys_Inc RT ms | DB CPU const / inc % "
        "| Sys_Const CPU ms / request | throttled const / inc | our CPU 0 % | CPU 1 other % |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (cap, users, ctp, disp, spin), ms in sorted(groups.items()):
        c = [m.systems["const"] for m, _ in ms]
        i = [m.systems["inc"] for m, _ in ms]
        ours = [lab["front_cpu_pct"] + lab["client_cpu_pct"] for _, lab in ms]
        other = [lab["cpu1_other_pct"] for _, lab in ms]
        print(
            f"| {cap:g} | {users} | {'on' if ctp else 'off'} | {disp:g} | {spin} | {len(ms)} "
            f"| {cell([s.mean_rt_seconds for s in c], 1e3)} "
            f"| {cell([s.light_mean_rt_seconds or np.nan for s in c], 1e3)} / "
            f"{cell([s.heavy_mean_rt_seconds or np.nan for s in c], 1e3)} "
            f"| {cell([s.mean_rt_seconds for s in i], 1e3) if users else '–'} "
            f"| {cell([s.db_cpu_pct for s in c])} / {cell([s.db_cpu_pct for s in i])} "
            f"| {cell([10.0 * s.db_cpu_pct / s.throughput_per_second for s in c], digits=1)} "
            f"| {cell([s.throttled_periods_total for s in c])} / "
            f"{cell([s.throttled_periods_total for s in i])} "
            f"| {cell(ours)} | {cell(other)} |"
        )
    print()
    print(
        "| cap | Sys_Inc users | CTP | I | spinner | Sys_Const 0.1 s: at cap / idle % "
        "| Sys_Const 2 s: at cap / idle % | Sys_Const 0.1 s p50 / p90 % |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (cap, users, ctp, disp, spin), ms in sorted(groups.items()):
        fine = np.concatenate([np.asarray(m.systems["const"].cpu_pct_100ms) for m, _ in ms])
        coarse = np.concatenate(
            [
                np.asarray(
                    m.systems["const"].cpu_pct_100ms[
                        : len(m.systems["const"].cpu_pct_100ms) // 20 * 20
                    ]
                )
                .reshape(-1, 20)
                .mean(axis=1)
                for m, _ in ms
            ]
        )
        at = 0.9 * cap

        def pct(a: np.ndarray, cond: np.ndarray) -> float:
            return 100.0 * float(cond.sum()) / a.size if a.size else float("nan")

        print(
            f"| {cap:g} | {users} | {'on' if ctp else 'off'} | {disp:g} | {spin} "
            f"| {pct(fine, fine >= at):.0f} / {pct(fine, fine < 5):.0f} "
            f"| {pct(coarse, coarse >= at):.0f} / {pct(coarse, coarse < 5):.0f} "
            f"| {np.percentile(fine, 50):.0f} / {np.percentile(fine, 90):.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

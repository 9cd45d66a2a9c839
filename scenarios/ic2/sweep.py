"""Sweep MaxRequestWorkers and KeepAliveTimeout of scenarios/ic2/sim-sweep.yaml in the
simulator, clean and under its stress-ng antagonist, and print the tables docs/simulator.md
shows (the best value of each column in bold). Run: .venv/bin/python scenarios/ic2/sweep.py"""

from __future__ import annotations

from pathlib import Path

from quell.scenario import load_scenario
from quell.sim.sweep import SweepPoint, sweep

HERE = Path(__file__).resolve().parent
SWEEPS = {
    "max_request_workers": [150, 200, 250, 275, 300, 325, 350, 375, 400, 425, 450, 500],
    "keepalive_timeout_s": [0.5, 1, 2, 3, 5, 8, 12, 20, 40],
}
WARMUP_S = 60.0


def table(setting: str, points: list[SweepPoint]) -> str:
    rows = {
        False: [p for p in points if not p.interference],
        True: [p for p in points if p.interference],
    }
    best = {k: min(v, key=lambda p: p.mean_rt_s).value for k, v in rows.items()}
    lines = [
        f"| {setting} | clean: mean RT ms | req/s | stress-ng: mean RT ms | req/s |",
        "|---|---|---|---|---|",
    ]
    for clean, loaded in zip(rows[False], rows[True], strict=True):
        cells = []
        for p in (clean, loaded):
            rt = f"{1000 * p.mean_rt_s:,.1f}"
            cells += [
                f"**{rt}**" if p.value == best[p.interference] else rt,
                f"{p.throughput_rps:.1f}",
            ]
        lines.append(f"| {clean.value:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    scenario = load_scenario(HERE / "sim-sweep.yaml")
    for setting, values in SWEEPS.items():
        print(table(setting, sweep(scenario, setting, values, WARMUP_S, HERE)))
        print()


if __name__ == "__main__":
    main()

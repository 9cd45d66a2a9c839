"""One simulator comparison over several seeds: each policy's spread, and its paired difference
from the first policy.

A single seed is one draw of the arrivals, the request sizes and the neighbours; two policies
that differ by a point on one seed may not differ at all. Every seed runs every policy on the
same draw, so the fair comparison is *paired*: per seed, a policy's SLO % minus the first
policy's, then the mean of those differences and its standard error (sd / √n).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from quell.report.fit import FitTable

_STATS = (
    "slo_pct",
    "slo_all_pct",
    "slo_feasible_pct",
    "settling_pct",
    "instance_seconds",
    "oracle_instance_seconds",
)
_PAIRED = ("slo_pct", "slo_all_pct", "slo_feasible_pct", "instance_seconds")
"""The statistics whose paired difference from the first policy is reported
(``<stat>_vs_first``)."""


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample sd (``None`` from one value), min and max."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {"mean": mean, "sd": sd, "min": min(values), "max": max(values)}


def _paired(
    by_seed: Sequence[Mapping[str, Mapping[str, Any]]], name: str, first: str, key: str
) -> dict[str, Any] | None:
    """Per seed ``name``'s ``key`` minus ``first``'s: mean, standard error (sd / √n), and on
    how many seeds it was higher; ``None`` for the first policy or without a pair."""
    pairs = [
        (float(s[name][key]), float(s[first][key]))
        for s in by_seed
        if s[name].get(key) is not None and s[first].get(key) is not None
    ]
    if name == first or not pairs:
        return None
    d = spread([a - b for a, b in pairs])
    se = None if d["sd"] is None else d["sd"] / math.sqrt(len(pairs))
    return {
        "mean": d["mean"],
        "se": se,
        "higher_on": sum(a > b for a, b in pairs),
        "of": len(pairs),
    }


def seed_summary(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per policy (in the order of the first document): mean, sample sd, min and max of each
    statistic over the seeds that measured it, and the paired difference from the first
    policy of the settled SLO %, the SLO % over all instance-intervals and the
    instance-seconds (mean, standard error, and on how many seeds the policy was higher)."""
    if not docs:
        return []
    names = [row["policy"] for row in docs[0]["policies"]]
    by_seed = [{row["policy"]: row for row in doc["policies"]} for doc in docs]
    first = names[0]
    rows: list[dict[str, Any]] = []
    for name in names:
        row: dict[str, Any] = {"policy": name, "seeds": len(docs)}
        for key in _STATS:
            values = [float(s[name][key]) for s in by_seed if s[name].get(key) is not None]
            row[key] = spread(values) if values else None
        for key in _PAIRED:
            row[f"{key}_vs_first"] = _paired(by_seed, name, first, key)
        rows.append(row)
    return rows


def _pm(stat: Mapping[str, Any] | None, fmt: str, spread: str = "sd") -> str:
    """``mean ± stat[spread]``, or the mean alone where there is no spread (one seed)."""
    if stat is None:
        return "-"
    sd = stat[spread]
    mean = format(stat["mean"], fmt)
    return mean if sd is None else f"{mean} ± {format(sd, fmt.lstrip('+'))}"


def print_seed_summary(
    scenario: str, seeds: Sequence[int], rows: Sequence[Mapping[str, Any]], console: Console
) -> None:
    span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
    # min, max and the paired difference stay beside the figure they are of
    table = FitTable(
        title=f"{scenario}: {span}", title_justify="left", together=(2, 3, 4, 5, 7, 10)
    )
    first = rows[0]["policy"] if rows else ""
    headers = (
        "policy",
        "SLO %",
        "min",
        "max",
        f"vs {first}",
        "higher",
        "all %",
        "vs",
        "settling %",
        "inst-s",
        "vs",
        "oracle",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in rows:
        slo = row["slo_pct"]
        vs = row["slo_pct_vs_first"]
        table.add_row(
            row["policy"],
            _pm(slo, ".1f"),
            "-" if slo is None else f"{slo['min']:.1f}",
            "-" if slo is None else f"{slo['max']:.1f}",
            _pm(vs, "+.1f", spread="se"),
            "-" if vs is None else f"{vs['higher_on']}/{vs['of']}",
            _pm(row.get("slo_all_pct"), ".1f"),
            _pm(row.get("slo_all_pct_vs_first"), "+.1f", spread="se"),
            _pm(row.get("settling_pct"), ".1f"),
            _pm(row["instance_seconds"], ".0f"),
            _pm(row.get("instance_seconds_vs_first"), "+.0f", spread="se"),
            _pm(row["oracle_instance_seconds"], ".0f"),
        )
    console.print(table)
    console.print(
        "SLO %: settled, mean ± sample sd over the seeds; all %: over all instance-intervals; "
        "settling %: the share left out; vs: the paired difference from the first policy, "
        "mean ± standard error; higher: seeds on which the policy scored above it"
    )

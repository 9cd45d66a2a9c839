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
from rich.table import Table

_STATS = ("slo_pct", "slo_all_pct", "instance_seconds", "oracle_instance_seconds")


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {"mean": mean, "sd": sd, "min": min(values), "max": max(values)}


def seed_summary(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per policy (in the order of the first document): mean, sample sd, min and max of each
    statistic over the seeds that measured it, and the paired SLO % difference from the first
    policy (mean, standard error, and on how many seeds the policy scored higher)."""
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
            row[key] = _spread(values) if values else None
        pairs = [
            (float(s[name]["slo_pct"]), float(s[first]["slo_pct"]))
            for s in by_seed
            if s[name].get("slo_pct") is not None and s[first].get("slo_pct") is not None
        ]
        diffs = [a - b for a, b in pairs]
        if name == first or not diffs:
            row["slo_pct_vs_first"] = None
        else:
            d = _spread(diffs)
            se = None if d["sd"] is None else d["sd"] / math.sqrt(len(diffs))
            row["slo_pct_vs_first"] = {
                "mean": d["mean"],
                "se": se,
                "higher_on": sum(a > b for a, b in pairs),
                "of": len(pairs),
            }
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
    table = Table(title=f"{scenario}: {span}", title_justify="left")
    first = rows[0]["policy"] if rows else ""
    for header in ("policy", "SLO %", "min", "max", f"vs {first}", "higher", "inst-s", "oracle"):
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
            _pm(row["instance_seconds"], ".0f"),
            _pm(row["oracle_instance_seconds"], ".0f"),
        )
    console.print(table)
    console.print(
        "SLO %: mean ± sample sd over the seeds; vs: the paired difference from the first "
        "policy, mean ± standard error; higher: seeds on which the policy scored above it"
    )

"""The terminal tables of ``quell ic2``'s commands, from the documents the commands return
(``campaign.train``, ``evaluate.evaluate``, ``sweep.sweep``, ``table4.table4_of_runs``,
``campaign.ablate`` and ``campaign.sizes``): what a person reads; ``--json`` prints the
documents themselves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from quell.report.fit import FitTable as Table
from quell.studies.ic2.results import reduction_text, sweep_cell_ms

if TYPE_CHECKING:
    from rich.console import Console

    from quell.studies.ic2.campaign import Trained
    from quell.studies.ic2.evaluate import Evaluation

Columns = Sequence[tuple[str, str, str]]
"""(header, key, format): ``s`` text on the left, ``ms`` seconds shown in milliseconds, any
other a format spec; a missing or ``None`` value shows as -."""


def rows_table(title: str, cols: Columns, rows: Sequence[dict[str, Any]]) -> Table:
    """One row per document of ``rows``, one column per entry of ``cols``."""
    table = Table(title=escape(title), title_justify="left")
    for header, _, fmt in cols:
        table.add_column(header, justify="left" if fmt == "s" else "right")
    for row in rows:
        cells = []
        for _, key, fmt in cols:
            v = row.get(key)
            if v is None:
                cells.append("-")
            elif fmt == "ms":
                cells.append(f"{1e3 * v:.1f}")
            else:
                cells.append(escape(format(v, fmt)))
        table.add_row(*cells)
    return table


def print_training(trained: Trained, console: Console) -> None:
    """Per phase of the bootstrap: the intervals collected, those trained on, and per class."""
    table = Table(title=f"{trained.name}: detector in {trained.detector}")
    for col in ("phase", "collected", "trained on", "NI", "T", "I"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for p in trained.phases:
        collected: Any = p["collected"]
        trained_on: Any = p["trained_on"]
        counts = trained_on["class_counts"]
        table.add_row(
            str(p["phase"]),
            str(collected["samples"]),
            str(trained_on["samples"]),
            str(counts["NI"]),
            str(counts["T"]),
            str(counts["I"]),
        )
    console.print(table)


EVAL_COLUMNS: Columns = (
    ("inst", "instance", "s"),
    ("recall", "recall", ".3f"),
    ("prec", "precision", ".3f"),
    ("miss", "miss_rate", ".3f"),
    ("detect s", "detect_latency_s", ".1f"),
    ("clear s", "clear_latency_s", ".1f"),
    ("onsets", "detect_events", "d"),
    ("missed", "detect_missed", "d"),
    ("n", "samples", "d"),
)


def print_evaluation(
    evaluation: Evaluation, console: Console, say: Callable[[str], None] = lambda m: None
) -> None:
    """Each run's class-I scores per interfered instance (and over them); for several runs,
    run by run and together, each run named (``say``) below."""
    for doc in evaluation.runs:
        rows = [{"instance": iid, **r} for iid, r in doc["instances"].items()]
        if len(rows) > 1:
            rows.append({**doc, "instance": "all"})
        title = f"{doc['scenario']}: class I, {doc['states']}-state machine"
        console.print(rows_table(title, EVAL_COLUMNS, rows))
    pooled = evaluation.pooled
    if pooled is None:
        return
    rows = [{"instance": f"run {k}", **m} for k, m in enumerate(pooled["runs"].values(), 1)]
    rows.append({**pooled, "instance": "all"})
    title = f"{pooled['scenario']}: class I, run by run and together"
    console.print(rows_table(title, EVAL_COLUMNS, rows))
    for k, r in enumerate(pooled["runs"], 1):
        say(f"run {k}: {r}")


def print_sweep(
    doc: dict[str, Any], out: Path, console: Console, say: Callable[[str], None] = lambda m: None
) -> None:
    """The mean response time at each value per condition, then (``say``) where the files are
    and IC2's row for the service."""
    spec = doc["spec"]
    table = Table(
        title=f"{escape(spec['name'])}: mean response time (ms) against {spec['setting']}",
        title_justify="left",
    )
    table.add_column(spec["setting"], justify="right")
    conds = list(doc["table"])
    for c in conds:
        table.add_column(escape(c), justify="right")
    for v in spec["values"]:
        table.add_row(f"{v:g}", *(sweep_cell_ms(doc["table"][c], v) for c in conds))
    console.print(table)
    say(f"(range of the repeats) * best per condition; sweep.json and sweep.png in {out}")
    kb = doc["row"]
    item = kb["directions"]
    say(
        f"{escape(kb['why'])}: IC2's row for this service: directions: {item!r}"
        if item is not None
        else f"{escape(kb['why'])}: no direction for IC2's row"
    )


def print_table4(doc: dict[str, Any], console: Console) -> None:
    """Table 4: per policy, the interfered instances' mean response time in the first part of
    each period and after, the cuts against the baseline, when it reconfigured; by send time
    and with failures counted at the timeout where every run has those."""
    first_s = doc["first_s"]
    cols: list[tuple[str, str, str]] = [
        ("policy", "policy", "s"),
        ("runs", "repetitions", "d"),
        (f"first {first_s:g} s ms", "first_rt_s", "ms"),
        ("cut %", "first_cut", "s"),
        ("after ms", "after_rt_s", "ms"),
        ("cut %", "after_cut", "s"),
        ("clean ms", "clean_rt_s", "ms"),
        ("detect s", "detect_latency_s", ".1f"),
        ("clear s", "clear_latency_s", ".1f"),
        ("reconf", "reconfigurations", "g"),
    ]
    if all("sent_rt_s" in row for row in doc["rows"].values()):
        # from the request log, by the time each request was sent (quell.studies.ic2.table4)
        cols += [
            ("sent ms", "sent_rt_s", "ms"),
            ("cut %", "sent_cut", "s"),
            (f"> {first_s:g} s", "sent_over_first_s", "d"),
        ]
    if all("sent_waited_s" in row for row in doc["rows"].values()):
        # every request sent, one without an answer at the workload's timeout
        cols += [
            (f"waited first {first_s:g} s ms", "sent_first_waited_s", "ms"),
            ("cut %", "first_waited_cut", "s"),
            ("waited after ms", "sent_after_waited_s", "ms"),
            ("cut %", "after_waited_cut", "s"),
            ("failed", "sent_failed", "d"),
        ]
    title = f"{doc['scenario']}: mean RT of the interfered instances under interference"
    rows = [{"policy": label, **row} for label, row in doc["rows"].items()]
    for row in rows:
        for part in ("first", "after", "sent", "first_waited", "after_waited"):
            row[f"{part}_cut"] = reduction_text(
                row.get(f"{part}_reduction_pct"), row.get(f"{part}_reduction_pct_se")
            )
    console.print(rows_table(title, cols, rows))


ABLATION_COLUMNS: Columns = (
    ("test", "test", "s"),
    ("cost", "cost", "s"),
    ("method", "method", "s"),
    ("recall", "recall", ".3f"),
    ("prec", "precision", ".3f"),
    ("miss", "miss_rate", ".3f"),
    ("I as NI", "i_as_ni", "d"),
    ("NI as I", "ni_as_i", "d"),
    ("detect s", "detect_latency_s", ".1f"),
    ("clear s", "clear_latency_s", ".1f"),
)


def print_ablation(rows: Sequence[dict[str, Any]], console: Console) -> None:
    title = "cost ablation: class I on runs the trees never saw"
    console.print(rows_table(title, ABLATION_COLUMNS, rows))


SIZE_COLUMNS: Columns = (
    ("depth / leaf", "size", "s"),
    ("cost", "cost", ".4f"),
    ("recall", "recall", ".3f"),
    ("prec", "precision", ".3f"),
)


def print_sizes(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """Each tree size's cost, recall and precision held out; the least cost named."""
    best = min(rows, key=lambda r: r["cost"])
    title = (
        f"tree size, each of {rows[0]['held_out_runs']} runs held out in turn"
        f" (least cost: {best['size']})"
    )
    console.print(rows_table(title, SIZE_COLUMNS, rows))

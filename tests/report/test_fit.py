"""The command line's tables at 80 and 120 columns, from recorded comparisons: every number a
table's cells hold appears whole in what is printed (none cut to ``98…`` or folded across
lines), no line is wider than the terminal, and every table printed is a ``FitTable``. Then
``FitTable``'s layout on hand-made tables: whole when it fits, without its outer border when
that is enough, stacked with the row labels on every part, a figure kept beside its
difference, names wrapped only when nothing else fits."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from quell.cli.sim import print_comparison
from quell.report.compare import compare_table
from quell.report.fit import FitTable, wrap_words
from quell.report.misses import PLACES, MissBreakdown, print_breakdown
from quell.report.repeats import print_repeat_summary
from quell.report.seeds import print_seed_summary
from quell.report.table import attribution_table, print_summary

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "data"
NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
"""A number as the tables print it: ``-34.0``, ``0/5`` (two), ``117,071``, ``4.05e-05`` (two)."""


def _doc(name: str) -> Any:
    return json.loads((DATA / name).read_text())


class Recording(Console):
    """A console of ``width`` columns that keeps every table printed on it."""

    def __init__(self, width: int) -> None:
        super().__init__(width=width, record=True, no_color=True, force_terminal=False)
        self.tables: list[Table] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.tables += [o for o in objects if isinstance(o, Table)]
        super().print(*objects, **kwargs)


def _lab_compare(c: Console) -> None:
    compare_table(_doc("demo-lab-comparison.json"), c)


def _lab_compare_five_policies(c: Console) -> None:
    compare_table(_doc("table6-video-lab-comparison.json"), c)


def _lab_repeats(c: Console) -> None:
    doc = _doc("demo-repeats-lab-comparison.json")
    print_repeat_summary(doc["scenario"], doc["policies"], c)


def _sim_compare(c: Console) -> None:
    print_comparison(_doc("sim-1000-comparison.json"), c)


def _sim_seeds(c: Console) -> None:
    doc = _doc("sim-1000-seeds-comparison.json")
    print_seed_summary(doc["scenario"], doc["seeds"], doc["policies"], c)


def _sim_misses(c: Console) -> None:
    doc = _doc("sim-1000-misses.json")
    by_place = {p: tuple(doc["by_place"][p].values()) for p in PLACES}
    keys = MissBreakdown.__dataclass_fields__
    fields = {k: v for k, v in doc.items() if k in keys and k != "by_place"}
    print_breakdown(doc["scenario"], MissBreakdown(by_place=by_place, **fields), c)


WIDE_RUN = {
    "phases": [
        {
            "name": "interference_from_a_neighbour",
            "start_s": 0,
            "end_s": 86400,
            "steal_pct": 12.3456,
            "instances": {
                f"instance-{k}": {
                    "requests": 123456789,
                    "errors": 1234567,
                    "throughput_rps": 98765.4,
                    "mean_rt_ms": 12345.67,
                    "p95_rt_ms": 23456.78,
                    "cpu_util": 15.998,
                    "util_pct": 99.9,
                }
                for k in range(3)
            },
        }
    ],
    "attribution": {
        "web-frontend-1": {
            "requests": 1234567,
            "p50_seconds": 0.01234,
            "p90_seconds": 0.5678,
            "p99_seconds": 12.345,
            "provider_p50_seconds": 0.001,
            "provider_p90_seconds": 0.25,
            "provider_p99_seconds": 9.876,
            "provider_share": 0.4567,
        }
    },
}
"""A run summary with the widest figures a phase table takes: a day of a busy fleet."""


def _phase_tables(c: Console) -> None:
    print_summary(WIDE_RUN, c)


def _attribution(c: Console) -> None:
    c.print(attribution_table(WIDE_RUN["attribution"]))


TABLES: dict[str, Callable[[Console], None]] = {
    "lab compare": _lab_compare,
    "lab compare, five policies": _lab_compare_five_policies,
    "lab compare --repeats": _lab_repeats,
    "sim compare": _sim_compare,
    "sim compare --seeds": _sim_seeds,
    "sim misses": _sim_misses,
    "run report": _phase_tables,
    "attribution": _attribution,
}


def cells_of(table: Table) -> list[str]:
    return [str(cell) for column in table.columns for cell in column.cells]


def cut_numbers(tables: list[Table], text: str) -> list[str]:
    """The numbers the tables' cells hold more often than the printed text shows them whole."""
    held = Counter(n for t in tables for cell in cells_of(t) for n in NUMBER.findall(cell))
    shown = Counter(NUMBER.findall(text))
    return sorted(n for n, count in held.items() if shown[n] < count)


def printed(render: Callable[[Console], None], width: int) -> tuple[Recording, str]:
    console = Recording(width)
    render(console)
    return console, console.export_text()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", list(TABLES))
def test_no_number_is_cut(name: str, width: int) -> None:
    console, text = printed(TABLES[name], width)
    assert console.tables, "nothing printed"
    assert all(isinstance(t, FitTable) for t in console.tables)
    assert cut_numbers(console.tables, text) == []
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert too_wide == []


@pytest.mark.parametrize("width", [80, 120])
def test_the_figures_the_issue_found_cut(width: int) -> None:
    """``sim compare`` of sim-1000 printed its policies as "pri…", prima's instance-seconds
    as "4220…" and lsf's mean as "246…"; ``lab compare`` of the demo cut its phase names."""
    _, text = printed(_sim_compare, width)
    prima = next(line for line in text.splitlines() if re.match(r"[│┃ ]*prima ", line))
    assert "98.7" in prima and "threshold" in text
    assert "4220220" in text and "246183" in text
    _, text = printed(_lab_compare, width)
    for phase in ("load_up", "load_down", "interference"):
        assert phase in text
    assert "23.5 *" in text


def test_a_plain_table_at_80_columns_cuts_what_this_check_finds() -> None:
    """The check can fail: rich's own Table cuts the sim comparison's numbers at 80."""
    import quell.cli.sim as sim

    console = Recording(80)
    plain = Table(title="sim-1000")
    doc = _doc("sim-1000-comparison.json")
    for header, _, _ in sim.COMPARE_COLUMNS:
        plain.add_column(header, justify="right")
    for row in doc["policies"]:
        plain.add_row(
            *("-" if row.get(k) is None else format(row[k], f) for _, k, f in sim.COMPARE_COLUMNS)
        )
    console.print(plain)
    assert {"4220220", "246183"} <= set(cut_numbers(console.tables, console.export_text()))


# -- the layout ------------------------------------------------------------------------------


def _table(**kwargs: Any) -> FitTable:
    t = FitTable(title="t", **kwargs)
    t.add_column("policy")
    for header in ("base ms", "load_down ms", "vs", "interference ms", "vs"):
        t.add_column(header, justify="right")
    t.add_row("prima", "11.5", "11.4", "-", "12.0", "-")
    t.add_row("target_stab", "11.1", "11.4", "-0.3%", "123456.7 *", "+1028.8%")
    return t


def _lines(table: FitTable, width: int) -> list[str]:
    console = Console(width=width, record=True, no_color=True)
    console.print(table)
    return console.export_text().splitlines()


def _narrowest_with_edge() -> int:
    """The narrowest terminal ``_table()`` prints whole in, its outer border kept."""
    width = 120
    while _lines(_table(), width - 1)[1].startswith("┏"):
        width -= 1
    return width


def test_a_table_that_fits_prints_whole_its_headers_wrapped_only_if_need_be() -> None:
    lines = _lines(_table(), 120)
    assert len(lines) == 1 + 1 + 1 + 1 + 2 + 1  # title, top, header, rule, two rows, bottom
    assert "┃ load_down ms ┃" in lines[2] and "┃ interference ms ┃" in lines[2]
    assert "123456.7 *" in lines[5] and "+1028.8%" in lines[5]
    narrow = _narrowest_with_edge()
    lines = _lines(_table(), narrow)
    assert len(lines) == 1 + 1 + 2 + 1 + 2 + 1  # the headers on two lines, at their spaces
    assert lines[1].startswith("┏") and lines[1].count("┳") == 5
    assert "┃ load_down ┃" in lines[2] and "┃ interference ┃" in lines[2]
    assert lines[3].split("┃")[3].strip() == "ms"  # under load_down
    assert "123456.7 *" in lines[6] and "+1028.8%" in lines[6]


def test_without_its_edge_when_that_is_enough() -> None:
    narrow = _narrowest_with_edge()
    lines = _lines(_table(), narrow - 1)
    assert not any(line.startswith(("┏", "│", "┃")) for line in lines)
    assert "123456.7 *" in "\n".join(lines) and "+1028.8%" in "\n".join(lines)
    assert max(cell_len(line) for line in lines) <= narrow - 1
    assert _lines(_table(), narrow - 5)[1].startswith("┏")  # stacked, each part with its edge


def test_stacked_with_the_row_labels_on_every_part() -> None:
    lines = _lines(_table(), 40)
    tops = [k for k, line in enumerate(lines) if line.startswith("┏")]
    assert len(tops) >= 2
    assert sum("target_stab" in line for line in lines) == len(tops)
    text = "\n".join(lines)
    for number in ("11.5", "11.4", "-0.3%", "123456.7 *", "+1028.8%"):
        assert number in text
    assert max(cell_len(line) for line in lines) <= 40


def _headers(width: int, **kwargs: Any) -> list[list[str]]:
    """Each stacked part's column headers, their lines joined."""
    parts = "\n".join(_lines(_table(**kwargs), width)).split("┏")[1:]
    out = []
    for part in parts:
        heads = [line for line in part.splitlines()[1:] if line.startswith("┃")]
        rows = [line.split("┃")[1:-1] for line in heads]
        out.append([" ".join(w.strip() for w in col).strip() for col in zip(*rows, strict=True)])
    return out


def test_a_difference_stays_beside_its_figure() -> None:
    assert _headers(44, together=(3, 5)) == [
        ["policy", "base ms", "load_down ms", "vs"],
        ["policy", "interference ms", "vs"],
    ]
    assert _headers(40) == [  # unbound, the widths alone decide
        ["policy", "base ms", "load_down ms"],
        ["policy", "vs", "interference ms"],
        ["policy", "vs"],
    ]


def test_names_wrap_only_when_a_label_and_one_column_do_not_fit() -> None:
    t = FitTable()
    t.add_column("where the interval fell")
    t.add_column("misses", justify="right")
    t.add_row("the interval a neighbour arrived in", "117,071")
    lines = _lines(t, 24)
    text = "\n".join(lines)
    assert "117,071" in text
    assert "neighbour" in text  # wrapped at spaces, the words whole
    assert max(cell_len(line) for line in lines) <= 24


def test_wrap_words() -> None:
    assert wrap_words("load_down ms", 9) == "load_down\nms"
    assert wrap_words("E[T] cpu0 ms", 9) == "E[T] cpu0\nms"
    assert wrap_words("interference", 4) == "interference"
    assert wrap_words("a b\nc", 80) == "a b\nc"

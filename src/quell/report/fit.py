"""Tables that fit the terminal without cutting a number.

rich shrinks a table that is wider than the terminal by cutting cells ("98…", "interf…"), a
number as readily as a name. ``FitTable`` is a ``rich.table.Table`` that lays itself out for
the width it is rendered at, in three steps:

1. Every column's *width* is what its longest cell needs (a cell never wraps: ``11.5 / 23.4``
   stays on one line) or its header's longest word, whichever is wider; a header wraps at its
   spaces only (``load_down`` over ``ms``). A left-justified column holds names; the others
   hold numbers.
2. If the columns fit at those widths, the table is printed whole.
3. If not, and dropping its outer border does not make it fit, it is *stacked*: its row
   labels (the leading name columns, ``policy``, ``phase``; else its first column) are kept at
   the left of every part and the other columns go, in order, into as few tables one under the
   other as the width takes, split where the widest part is narrowest. Only where a part still
   does not fit (the labels and one column are wider than the terminal) do its names wrap, at
   their spaces first; a number never does.

Title and caption stay with the first and the last of the stacked tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table

UNBOUNDED = 10**6
"""The width a cell is measured at: what it needs on one line."""


@dataclass(frozen=True)
class _Col:
    column: Column
    width: int
    """Characters of content: the longest cell, or the header's longest word if wider."""
    name: bool
    """A column of names (left-justified), which may fold; otherwise of numbers, which may not."""
    header_width: int
    """What the header needs on one line (a header that is not text: its width)."""


def wrap_words(text: str, width: int) -> str:
    """``text`` with its spaces turned into line breaks where a line would pass ``width`` (a
    word longer than ``width`` keeps its own line, whole)."""
    lines: list[str] = []
    for part in text.split("\n"):
        line = ""
        for word in part.split():
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "\n".join(lines)


class FitTable(Table):
    """A ``rich.table.Table`` that wraps names and stacks its columns to fit the width it is
    printed at, and never cuts a number (module docstring). ``together``: indices of columns
    that stay in one table with the column before them when stacked (a figure and its
    difference from the first row), so long as those fit the width at all."""

    def __init__(self, *headers: Any, together: Iterable[int] = (), **kwargs: Any) -> None:
        super().__init__(*headers, **kwargs)
        self.together = frozenset(together)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.laid_out(self._columns_of(console, options), options.max_width)

    def laid_out(self, cols: Sequence[_Col], width: int) -> list[Table]:
        """The plain tables this one prints as at ``width``: itself whole (without its outer
        border if that makes it fit), or stacked."""
        everything = range(len(cols))
        widths = [c.width for c in cols]
        if not cols or self._needs(widths) <= width:
            spare = width - self._needs(widths)
            return [self._part(everything, cols, title=True, caption=True, spare=spare)]
        if self.box and self.show_edge and self._needs(widths, edge=False) <= width:
            spare = width - self._needs(widths, edge=False)
            return [self._part(everything, cols, True, True, spare=spare, edge=False)]
        keys = 1  # the row labels: the leading names, or the first column if it is none
        while keys < len(cols) - 1 and cols[keys - 1].name and cols[keys].name:
            keys += 1
        groups = self._stacked(cols, keys, width)
        parts = []
        for n, group in enumerate(groups):
            spare = width - self._needs(self._widths(cols, keys, group))
            last = n == len(groups) - 1
            parts.append(self._part([*range(keys), *group], cols, n == 0, last, spare=spare))
        return parts

    def _stacked(self, cols: Sequence[_Col], keys: int, width: int) -> list[list[int]]:
        """The columns after the ``keys`` row labels in as few groups as fit ``width`` (each
        beside the labels), split where the widest group is narrowest: no group left with one
        column while the first is full."""
        rest = list(range(keys, len(cols)))
        units: list[list[int]] = []  # runs of columns that stay together, where they fit
        for k in rest:
            joined = [*units[-1], k] if units and k in self.together else None
            if joined is not None and self._needs(self._widths(cols, keys, joined)) <= width:
                units[-1].append(k)
            else:
                units.append([k])
        count = 0
        used: list[int] = []
        for unit in units:  # first fit: the fewest groups
            if used and self._needs(self._widths(cols, keys, [*used, *unit])) <= width:
                used += unit
            else:
                count, used = count + 1, list(unit)
        if count <= 1:
            return [rest]
        cuts = {unit[0] for unit in units}  # where a group may start
        best: dict[tuple[int, int], tuple[int, list[list[int]]]] = {}

        def split(start: int, groups: int) -> tuple[int, list[list[int]]]:
            """The split of ``rest[start:]`` into ``groups`` groups with the narrowest widest."""
            if (start, groups) in best:
                return best[(start, groups)]
            if groups == 1:
                tail = rest[start:]
                result = (self._needs(self._widths(cols, keys, tail)), [tail])
            else:
                result = (UNBOUNDED, [])
                for end in range(start + 1, len(rest) - groups + 2):
                    if rest[end] not in cuts:
                        continue
                    head = rest[start:end]
                    first = self._needs(self._widths(cols, keys, head))
                    widest, others = split(end, groups - 1)
                    if max(first, widest) < result[0]:
                        result = (max(first, widest), [head, *others])
            best[(start, groups)] = result
            return result

        return split(0, count)[1]

    # -- measuring ---------------------------------------------------------------------------
    def _columns_of(self, console: Console, options: ConsoleOptions) -> list[_Col]:
        wide = options.update(width=UNBOUNDED, no_wrap=True)
        out = []
        for column in self.columns:
            cells = [Measurement.get(console, wide, c).maximum for c in column.cells]
            if isinstance(column.header, str):
                words = [len(w) for w in column.header.split()]
                whole = max((len(line) for line in column.header.split("\n")), default=0)
            else:
                whole = Measurement.get(console, wide, column.header).maximum
                words = [whole]
            width = max([*cells, *words, column.min_width or 0, 1])
            name = column.justify in ("left", "default")
            out.append(_Col(column, width, name, max(whole, width)))
        return out

    def _padding_of(self, index: int, count: int, pad_edge: bool) -> int:
        _, right, _, left = self.padding
        if not pad_edge:
            left = 0 if index == 0 else left
            right = 0 if index == count - 1 else right
        return left + right

    def _needs(self, widths: Sequence[int], edge: bool = True) -> int:
        """Characters a table of columns this wide takes, padding and borders included
        (``edge``: with its outer border and the padding inside it, as the table says)."""
        n = len(widths)
        edge = edge and self.show_edge
        border = (2 if self.box and edge else 0) + (n - 1 if self.box else 0)
        pads = sum(self._padding_of(i, n, self.pad_edge and edge) for i in range(n))
        return sum(widths) + pads + border

    @staticmethod
    def _widths(cols: Sequence[_Col], keys: int, group: Iterable[int]) -> list[int]:
        return [cols[i].width for i in [*range(keys), *group]]

    # -- building ----------------------------------------------------------------------------
    def _part(
        self,
        idx: Iterable[int],
        cols: Sequence[_Col],
        title: bool,
        caption: bool,
        spare: int = 0,
        edge: bool = True,
    ) -> Table:
        """A plain table of the columns ``idx`` with ``spare`` characters of the width left:
        given to headers that then take fewer lines (the smallest first), or where the columns
        are too wide by as much (below 0) taken from the name columns, whose cells then wrap;
        ``edge=False``: without the outer border and the padding inside it."""
        part = Table(
            title=self.title if title else None,
            caption=self.caption if caption else None,
            box=self.box,
            safe_box=self.safe_box,
            padding=self.padding,
            collapse_padding=self.collapse_padding,
            pad_edge=self.pad_edge and edge,
            expand=False,
            show_header=self.show_header,
            show_footer=self.show_footer,
            show_edge=self.show_edge and edge,
            show_lines=self.show_lines,
            leading=self.leading,
            style=self.style,
            row_styles=self.row_styles,
            header_style=self.header_style,
            footer_style=self.footer_style,
            border_style=self.border_style,
            title_style=self.title_style,
            caption_style=self.caption_style,
            title_justify=self.title_justify,
            caption_justify=self.caption_justify,
            highlight=self.highlight,
        )
        chosen = list(idx)
        widths = {i: cols[i].width for i in chosen}
        names = [i for i in chosen if cols[i].name]
        while spare < 0 and any(widths[i] > 1 for i in names):
            widths[max(names, key=lambda i: widths[i])] -= 1
            spare += 1
        for i in sorted(chosen, key=lambda i: cols[i].header_width - cols[i].width):
            grow = cols[i].header_width - widths[i]
            if 0 < grow <= spare:
                widths[i] += grow
                spare -= grow
        for i in chosen:
            c = cols[i]
            col = c.column
            width = widths[i]
            header = col.header
            if isinstance(header, str) and not c.name:
                header = wrap_words(header, width)
            part.add_column(
                header,
                footer=col.footer,
                header_style=col.header_style,
                footer_style=col.footer_style,
                style=col.style,
                justify=col.justify,
                vertical=col.vertical,
                overflow="fold" if c.name else col.overflow,
                width=width,
                no_wrap=not c.name,
                highlight=col.highlight,
            )
        cells = [list(self.columns[i].cells) for i in chosen]
        for r, row in enumerate(self.rows):
            part.add_row(*(column[r] for column in cells), style=row.style)
            if row.end_section:
                part.add_section()
        return part

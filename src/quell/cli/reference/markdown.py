"""The Markdown the reference pages are written in: docstrings as one line, table cells,
tables and GitHub's heading anchors."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any


def paragraphs(doc: str | None) -> list[str]:
    """A docstring's paragraphs, each as one line, its ``code`` as Markdown's `code`."""
    if not doc:
        return []
    parts = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return [re.sub(r"``(.+?)``", r"`\1`", " ".join(p.split())) for p in parts if p.strip()]


def line(doc: str | None) -> str:
    """A docstring as one line."""
    return " ".join(paragraphs(doc))


def cell(text: str) -> str:
    """``text`` inside a table cell: a ``|`` would end the cell."""
    return text.replace("|", r"\|")


def code(text: str) -> str:
    """``text`` as inline code, with enough backticks around it for those inside."""
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def literal(value: Any) -> str:
    """A value as it is written in a YAML or JSON file, as inline code."""
    return code(json.dumps(value, ensure_ascii=False))


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")

"""The base of every file format quell reads (scenarios, workload and service sections,
profile specs) and the one way their validation errors become ``Problem``s."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from quell.core.files import load_json
from quell.errors import InputError, Problem


class StrictModel(BaseModel):
    """Unknown keys are refused, types are not coerced ("1" is not 1), values are frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _printable(text: str) -> str:
    """no control characters (one line of printable text)"""
    if any(unicodedata.category(c) == "Cc" for c in text):
        raise ValueError("must not hold control characters (a newline, a tab, an escape)")
    return text


Name = Annotated[str, Field(min_length=1, max_length=80), AfterValidator(_printable)]
"""A name shown on the terminal and in reports: one line of printable text, so a name from a
file cannot move the cursor, clear the screen or retitle the window."""


def location(loc: tuple[int | str, ...], skip: frozenset[str] = frozenset()) -> str:
    """A pydantic error location as a dotted key path: ``hosts[1].link_mbit``. Parts in
    ``skip`` (the tags a discriminated union adds) are left out."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in skip:
            out += ("." if out else "") + str(part)
    return out


def validation_problems(
    err: ValidationError, prefix: str = "", skip: frozenset[str] = frozenset()
) -> list[Problem]:
    """Every error of ``err`` as a ``Problem`` at its key path (below ``prefix``), in words:
    an unknown key, a missing one, or pydantic's own message."""
    problems = []
    for e in err.errors():
        where = location(tuple(e["loc"]), skip)
        if prefix:
            where = f"{prefix}.{where}" if where and not where.startswith("[") else prefix + where
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        problems.append(Problem(where, msg))
    return problems


M = TypeVar("M", bound=BaseModel)


def load_versioned(path: Path, what: str, fmt: str, readable: Sequence[int], model: type[M]) -> M:
    """The JSON file at ``path`` (``quell.core.files.load_json``'s bounds) as ``model``, when its
    ``format`` is ``fmt`` and its ``version`` one of ``readable``. A missing, unreadable,
    corrupt or foreign file, another version, or a document ``model`` refuses raises
    ``InputError`` naming every problem."""
    source = str(path)
    raw: Any = load_json(path, what)
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise InputError(source, [Problem("format", f"not a quell {what} (expected {fmt!r})")])
    if raw.get("version") not in readable:
        message = (
            f"{what} version {raw.get('version')!r}; this quell reads"
            f" {', '.join(map(str, readable))}"
        )
        raise InputError(source, [Problem("version", message)])
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise InputError(source, validation_problems(err)) from None

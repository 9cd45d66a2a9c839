"""``quell reference``: write docs/reference's generated pages from the code (the scenario and
live configuration schemas, the command line, the exported metrics), or check that the pages
there are what the code would write. ``make reference`` runs it; the test suite checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

OutOpt = Annotated[
    Path, typer.Option("--out", help="The folder the pages are written to (or checked in).")
]
CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Write nothing; exit 1 naming each page that differs from what the code gives.",
    ),
]


def reference_command(
    ctx: typer.Context, check: CheckOpt = False, out: OutOpt = Path("docs/reference")
) -> None:
    """Write the generated reference pages (scenario.md, live-config.md, cli.md, metrics.md)."""
    from quell.cli.console import error, say
    from quell.cli.reference.pages import pages

    written = pages(ctx.find_root().command)
    if check:
        stale = [
            name
            for name, text in written.items()
            if not (out / name).is_file() or (out / name).read_text() != text
        ]
        for name in stale:
            error(f"{out / name} differs from the code: run make reference")
        if stale:
            raise typer.Exit(1)
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, text in written.items():
        (out / name).write_text(text)
        say(f"wrote {out / name}")

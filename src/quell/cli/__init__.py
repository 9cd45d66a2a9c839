"""The ``quell`` command line: one module per command group, the console in ``console``.

Bad input exits 2 with a message naming the problem, never a traceback; results go to stdout
(a JSON document as the last line with ``--json``), progress and diagnostics to stderr. Nothing
outside this package imports it."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Sequence

import typer

from quell.cli.agent import agent_command
from quell.cli.attribute import attribute_app
from quell.cli.console import error, say
from quell.cli.ic2 import ic2_app
from quell.cli.lab import lab_app
from quell.cli.live import live_app
from quell.cli.model import model_app
from quell.cli.prima import prima_app
from quell.cli.reference import reference_command
from quell.cli.replay import replay_command
from quell.cli.scenario import scenario_app
from quell.cli.sim import sim_app
from quell.cli.startup import own_process
from quell.cli.study import study_app
from quell.errors import QuellError

app = typer.Typer(
    help="See, explain and beat performance interference from co-located tenants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring's lines reflow to the terminal's width
)
app.add_typer(lab_app, name="lab", no_args_is_help=True)
app.add_typer(scenario_app, name="scenario", no_args_is_help=True)
app.add_typer(sim_app, name="sim", no_args_is_help=True)
app.add_typer(prima_app, name="prima", no_args_is_help=True)
app.add_typer(model_app, name="model", no_args_is_help=True)
app.add_typer(ic2_app, name="ic2", no_args_is_help=True)
app.command("agent")(agent_command)
app.add_typer(live_app, name="live", no_args_is_help=True)
app.add_typer(study_app, name="study", no_args_is_help=True)
app.add_typer(attribute_app, name="attribute", no_args_is_help=True)
app.command("replay")(replay_command)
app.command("reference", hidden=True)(reference_command)


ROLE_EXTRA: dict[str, str] = {
    "lab": "lab",
    "sim": "sim",
    "live": "controller",
    "prima": "research",
    "ic2": "research",
    "model": "research",
    "study": "research",
    "attribute": "research",
}
"""Command group → the extra of its role, named first when it provides a missing module."""


def command_words(args: Sequence[str]) -> list[str]:
    """The command and subcommand names at the start of ``args`` (``["sim", "run"]``)."""
    from typer.main import get_command

    command: object = get_command(app)
    words: list[str] = []
    for arg in args:
        sub = getattr(command, "commands", {})  # a group's; typer's click is its own copy
        if arg not in sub:
            break
        command = sub[arg]
        words.append(arg)
    return words


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line on ``argv`` (default: the process's own arguments) and exit with
    its code: 0, 2 for bad input (``QuellError.exit_code``), 130 when interrupted."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if argv is None:
            app()
        else:
            app(args=list(argv), prog_name="quell")
    except QuellError as exc:
        error(str(exc))
        raise SystemExit(exc.exit_code) from None
    except ModuleNotFoundError as exc:  # an extra this install left out (quell.core.extras)
        from quell.core.extras import missing_extra

        words = command_words(sys.argv[1:] if argv is None else argv)
        role = ROLE_EXTRA.get(words[0]) if words else None
        prereq = missing_extra(exc, " ".join(["quell", *words]), role)
        if prereq is None:
            raise
        error(str(prereq))
        raise SystemExit(prereq.exit_code) from None
    except KeyboardInterrupt:
        say("interrupted")
        raise SystemExit(130) from None


def entry() -> None:
    """``quell`` as a process of its own (the ``quell`` script, ``python -m quell``): ``main``,
    with what holds for the whole process (``quell.cli.startup.own_process``). A program that
    calls ``main`` itself keeps its own settings."""
    own_process()
    try:
        main()
    finally:
        # The process ends here and its objects (modules, pydantic schemas, numba's compiler
        # state) with it. Out of the cyclic collector's sight, they spare the interpreter's exit
        # the full collections over them: about 0.25 s once numba is loaded.
        gc.freeze()

"""The typer app as reference sections: every command and group not hidden, in the order
``--help`` lists them, with its usage, help, arguments and options (``--help`` itself left
out: every command has it)."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any

import typer

from quell.cli.reference.markdown import anchor, code, paragraphs, table


def walk(
    command: Any, ctx: typer.Context, path: tuple[str, ...]
) -> Iterator[tuple[Any, typer.Context, tuple[str, ...]]]:
    """``command`` and, for a group, every command under it, depth first in ``--help``'s order."""
    yield command, ctx, path
    if not hasattr(command, "list_commands"):
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        yield from walk(sub, typer.Context(sub, info_name=name, parent=ctx), (*path, name))


def default_text(param: Any) -> str:
    """A parameter's default as ``--help`` shows it; ``required`` when it must be given."""
    if param.required:
        return "required"
    if isinstance(param.show_default, str):
        return str(param.show_default)
    value = param.default
    if not param.show_default or value is None or callable(value):
        return ""
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return str((param.opts if value else param.secondary_opts)[0])
        return "on" if value else ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value.value if isinstance(value, Enum) else value)


def bounds_text(param: Any) -> str:
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    parts = ([f"≥ {low}"] if low is not None else []) + ([f"≤ {high}"] if high is not None else [])
    return "; ".join(parts)


def name_of(param: Any) -> str:
    if param.param_type_name == "argument":
        return code(str(param.metavar or param.name) + ("..." if param.nargs != 1 else ""))
    return " / ".join(code(o) for o in (*param.opts, *param.secondary_opts))


def render(root: Any, prog: str = "quell") -> list[str]:
    """Every command under ``root`` (a typer app's command, ``typer.main.get_command``): a
    heading per command, its usage, help and parameter tables."""
    out: list[str] = []
    for command, ctx, path in walk(root, typer.Context(root, info_name=prog), (prog,)):
        title = " ".join(path)
        out += [f"## {code(title)}", ""]
        usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
        out += ["```", usage, "```", ""]
        for p in paragraphs(command.help):
            out += [p, ""]
        if hasattr(command, "list_commands"):
            subs = [
                (name, sub)
                for name in command.list_commands(ctx)
                if (sub := command.get_command(ctx, name)) is not None and not sub.hidden
            ]
            listed = []
            for name, sub in subs:
                full = f"{title} {name}"
                brief = paragraphs(sub.help)
                listed.append((f"[{code(full)}](#{anchor(code(full))})", brief[0] if brief else ""))
            out += [*table(("command", "what it does"), listed), ""]
        params = [p for p in command.get_params(ctx) if not p.hidden and "--help" not in p.opts]
        for kind, heading in (("argument", "argument"), ("option", "option")):
            rows = [
                (
                    name_of(p),
                    code(p.display_type_rich(ctx)),
                    code(d) if (d := default_text(p)) and d != "required" else d,
                    bounds_text(p),
                    " ".join(paragraphs(p.help)),
                )
                for p in params
                if p.param_type_name == kind
            ]
            if rows:
                out += [*table((heading, "type", "default", "bounds", "help"), rows), ""]
    return out

"""A file format's pydantic models as reference sections: one per model, in the order the
files nest them, each key with its dotted path, type, default, bounds and meaning.

A key's meaning is its field's ``description`` or, as the code writes it, the string literal
right after the field (read from the source with ``ast``); a validator's docstring is a bound
of the keys it checks."""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from quell.cli.reference.markdown import anchor, code, line, literal, table

PRIMITIVES: Mapping[Any, str] = {int: "int", float: "float", str: "str", bool: "bool"}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    bounds: str
    meaning: str


@dataclass
class Section:
    """One model: where it appears (``where``, as dotted paths), its docstring, its keys."""

    title: str
    model: type[BaseModel]
    where: list[str]
    doc: str
    rows: list[Row] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    """What its model validators check, from their docstrings."""

    @property
    def anchor(self) -> str:
        return anchor(self.title)


@dataclass
class Described:
    """A type as the reference writes it, its bounds, and the models nested in it, each with
    the path below the key it is found at and, in a tagged union, its tag."""

    text: str
    bounds: list[str] = field(default_factory=list)
    nested: list[tuple[type[BaseModel], str, str]] = field(default_factory=list)


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right after it), inherited ones included."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, after in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = after.value.value
    return docs


YAML_WORDS = {"`None`": "`null`", "`True`": "`true`", "`False`": "`false`"}
"""Python's constants as a YAML file writes them, where a docstring names them as code."""


def yaml_words(text: str) -> str:
    for python, yaml in YAML_WORDS.items():
        text = text.replace(python, yaml)
    return text


def constraints(meta: Iterable[Any], sized: str) -> list[str]:
    """Bounds in words from pydantic's and annotated-types' metadata; ``sized`` names what a
    length counts ("characters", "items")."""
    out: list[str] = []
    low = high = None
    for m in meta:
        if isinstance(m, FieldInfo):
            out += constraints(m.metadata, sized)
        elif isinstance(m, at.Gt):
            out.append(f"> {m.gt}")
        elif isinstance(m, at.Ge):
            out.append(f"≥ {m.ge}")
        elif isinstance(m, at.Lt):
            out.append(f"< {m.lt}")
        elif isinstance(m, at.Le):
            out.append(f"≤ {m.le}")
        elif isinstance(m, at.MultipleOf):
            out.append(f"a multiple of {m.multiple_of}")
        elif isinstance(m, at.MinLen):
            low = m.min_length
        elif isinstance(m, at.MaxLen):
            high = m.max_length
        elif (pattern := getattr(m, "pattern", None)) is not None:
            out.append(f"matches {code(str(pattern))}")
        elif (doc := getattr(getattr(m, "func", None), "__doc__", None)) is not None:
            out.append(line(doc))
    if low is not None and high is not None:
        out.append(f"{low} to {high} {sized}")
    elif low is not None:
        out.append(f"at least {low} {sized[:-1] if low == 1 else sized}")
    elif high is not None:
        out.append(f"at most {high} {sized}")
    return out


def tag_of(model: type[BaseModel], discriminator: str) -> str:
    (value,) = get_args(model.model_fields[discriminator].annotation)
    return f"{discriminator}: {value}"


class Walker:
    """Sections for the models reachable from the roots it is given. ``links``: models
    documented on another page, by the link to their section there."""

    def __init__(self, links: Mapping[type[BaseModel], str] | None = None) -> None:
        self.links = dict(links or {})
        self.sections: dict[type[BaseModel], Section] = {}
        self.notes: dict[tuple[type[BaseModel], str], str] = {}
        """More meaning for one key, after its own (a model's field name → text)."""
        self.within = ""
        """The file the models being added belong to, where one page documents several."""

    def link(self, model: type[BaseModel]) -> str:
        if model in self.links:
            return f"[{model.__name__}]({self.links[model]})"
        return f"[{model.__name__}](#{anchor(model.__name__)})"

    def add(
        self, model: type[BaseModel], path: str, title: str | None = None, tag: str = ""
    ) -> Section:
        """``model`` at ``path`` (``""``: the file's top level), its nested models after it."""
        where = code(path) if path else "the top level"
        where += (f" with {code(tag)}" if tag else "") + (
            f" of {self.within}" if self.within else ""
        )
        known = self.sections.get(model)
        if known is not None:
            known.where.append(where)
            return known
        section = Section(title or model.__name__, model, [where], yaml_words(line(model.__doc__)))
        self.sections[model] = section
        section.checks = [
            line(v.func.__doc__)
            for v in model.__pydantic_decorators__.model_validators.values()
            if v.func.__doc__
        ]
        docs = field_docs(model)
        checked: dict[str, list[str]] = {}
        for v in model.__pydantic_decorators__.field_validators.values():
            for name in v.info.fields:
                if v.func.__doc__:
                    checked.setdefault(name, []).append(line(v.func.__doc__))
        nested: list[tuple[type[BaseModel], str, str]] = []
        for name, info in model.model_fields.items():
            key = f"{path}.{name}" if path else name
            d = self.describe(info.annotation, key, info.metadata, info.discriminator)
            meaning = yaml_words(info.description or line(docs.get(name)))
            if not meaning and tag and name == tag.split(":")[0]:
                meaning = f"Selects this form of {code(path)}."
            if (model, name) in self.notes:
                meaning = f"{meaning} {self.notes[model, name]}".strip()
            section.rows.append(
                Row(
                    code(key),
                    d.text,
                    default_of(info),
                    "; ".join(d.bounds + checked.get(name, [])),
                    meaning,
                )
            )
            nested += d.nested
        for child, child_path, child_tag in nested:
            if child not in self.links:
                self.add(child, child_path, tag=child_tag)
        return section

    def describe(
        self, tp: Any, key: str, meta: Iterable[Any] = (), discriminator: Any = None
    ) -> Described:
        meta = list(meta)
        while get_origin(tp) is Annotated:
            tp, *more = get_args(tp)
            meta += more
            discriminator = discriminator or next(
                (m.discriminator for m in more if isinstance(m, FieldInfo) and m.discriminator),
                None,
            )
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            return self._union(tp, key, meta, discriminator)
        if origin is list:
            (item,) = get_args(tp)
            inner = self.describe(item, f"{key}[]")
            bounds = constraints(meta, "items") + [f"each: {b}" for b in inner.bounds]
            return Described(f"list of {inner.text}", bounds, inner.nested)
        if origin is dict:
            k, v = get_args(tp)
            kd, vd = self.describe(k, key), self.describe(v, f"{key}.<key>")
            bounds = [f"keys: {b}" for b in kd.bounds] + [f"values: {b}" for b in vd.bounds]
            return Described(f"map of {kd.text} to {vd.text}", bounds, vd.nested)
        if origin is Literal:
            return Described(" or ".join(literal(v) for v in get_args(tp)), constraints(meta, ""))
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return Described(self.link(tp), constraints(meta, "items"), [(tp, key, "")])
        name = PRIMITIVES.get(tp, getattr(tp, "__name__", str(tp)))
        return Described(name, constraints(meta, "characters" if tp is str else "items"))

    def _union(self, tp: Any, key: str, meta: list[Any], discriminator: Any) -> Described:
        args = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(args) < len(get_args(tp))
        if len(args) == 1:
            d = self.describe(args[0], key, meta)
        elif discriminator is not None:
            forms = [(a, tag_of(a, str(discriminator))) for a in args]
            d = Described(
                "one of " + ", ".join(f"{self.link(a)} ({code(t)})" for a, t in forms),
                constraints(meta, "items"),
                [(a, key, t) for a, t in forms],
            )
        else:
            parts = [self.describe(a, key) for a in args]
            d = Described(
                ", ".join(p.text for p in parts[:-1]) + f" or {parts[-1].text}",
                constraints(meta, "items") + [b for p in parts for b in p.bounds],
                [n for p in parts for n in p.nested],
            )
        if nullable:
            d.text += " or `null`"
        return d


def default_of(info: FieldInfo) -> str:
    """A field's default as it is written in the file; ``required`` when it has none."""
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return literal(value.model_dump(mode="json", exclude_defaults=True))
    return literal(value)


def render(sections: Iterable[Section]) -> list[str]:
    """Each section: its heading, where it appears, its docstring, its table, its checks."""
    out: list[str] = []
    for s in sections:
        out += [
            f"## {s.title}",
            "",
            "At " + ", ".join(s.where) + "." + (" " + s.doc if s.doc else ""),
            "",
        ]
        if s.rows:
            out += table(
                ("key", "type", "default", "bounds", "meaning"),
                ((r.key, r.type, r.default, r.bounds, r.meaning) for r in s.rows),
            )
        else:
            out.append("No keys: any key is refused.")
        if s.checks:
            out += ["", *(f"Checked: {c}" for c in s.checks)]
        out.append("")
    return out

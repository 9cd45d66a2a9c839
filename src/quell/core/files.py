"""Reading the files quell is configured by: scenarios, profile specs, model bundles, traces.

One way in for all of them, so every such file meets the same bounds before anything parses
it: a regular file (not a directory, FIFO, device or socket, which could block, never end or
act on being opened), at most ``MAX_FILE_BYTES`` (checked before reading), strict UTF-8 (the
first bad byte named by its offset), and for YAML safe loading with bounds on nesting and on
the size aliases expand to (a "billion laughs" file is refused before it is built). Every
refusal is an ``InputError`` naming the file and the problem."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode

from quell.errors import InputError, Problem

MAX_FILE_BYTES: Final = 10 * 1024 * 1024
"""The largest file read (10 MiB); the biggest scenario in ``scenarios/`` is 0.3 MB."""
MAX_DEPTH: Final = 64
"""The deepest nesting of lists and mappings read; a scenario nests six deep."""
MAX_NODES: Final = 1_000_000
"""The most values (scalars, lists and mappings) a YAML document may hold once its aliases are
expanded: a bound on what aliases can make of a small file."""

_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse(path: Path, message: str, location: str = "") -> InputError:
    return InputError(str(path), [Problem(location, message)])


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file; ``None`` when it is."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them. ``what`` names
    the kind of file in messages ("cannot read model bundle: ..."). A special file is refused
    before it is opened (opening some devices acts on them) and again after (it may have been
    swapped in between); the size is checked before reading."""
    if "\0" in str(path):
        raise _refuse(path, f"cannot read {what}: the path contains a NUL byte")
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is not None:
            raise _refuse(path, f"cannot read {what}: it is {kind}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            kind = _not_regular(st.st_mode)
            if kind is not None:
                raise _refuse(path, f"cannot read {what}: it is {kind}, not a regular file")
            if st.st_size > max_bytes:
                raise _refuse(path, _too_large(what, st.st_size, max_bytes))
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise _refuse(path, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # it grew after the check
        raise _refuse(path, _too_large(what, len(data), max_bytes))
    return data


def _too_large(what: str, size_bytes: int, max_bytes: int) -> str:
    more = "" if size_bytes <= max_bytes + 1 else f" ({size_bytes} bytes)"
    return f"{what} too large{more}: at most {max_bytes} bytes are read"


def read_text(path: Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """``read_bytes`` decoded as strict UTF-8; the first byte that does not decode is named by
    its offset and line."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _refuse(
            path,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})",
            f"line {line}",
        ) from None


def load_json(path: Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON document in ``path`` (``read_text``'s bounds), no deeper than ``MAX_DEPTH``,
    no key twice in one object."""
    return parse_json(read_text(path, what, max_bytes), str(path))


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` as JSON to ``path`` atomically, through a temporary file beside it,
    so a reader never sees half a file; folders made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(path)


def load_yaml(path: Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The YAML document in ``path`` (``read_text``'s bounds), loaded safely (plain data only:
    no ``!!python`` tags), no deeper than ``MAX_DEPTH``, at most ``MAX_NODES`` values with its
    aliases expanded, no key twice in one mapping. A file without a document is refused."""
    return parse_yaml(read_text(path, what, max_bytes), str(path))


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def parse_json(text: str, source: str) -> Any:
    """``text`` as JSON, with ``load_json``'s bounds; problems name ``source``."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKeyError as exc:
        problem = Problem("", f"key {exc.key!r} appears twice in one object")
        raise InputError(source, [problem]) from None
    except json.JSONDecodeError as exc:
        problem = Problem(f"line {exc.lineno}", f"not valid JSON: {exc.msg}")
        raise InputError(source, [problem]) from None
    except ValueError as exc:  # an integer too long to convert
        raise InputError(source, [Problem("", f"not valid JSON: {_plain(exc)}")]) from None
    except RecursionError:
        raise InputError(source, [Problem("", _too_deep())]) from None
    if _json_depth(data) > MAX_DEPTH:
        raise InputError(source, [Problem("", _too_deep())])
    return data


def _plain(exc: Exception) -> str:
    """``exc``'s message without the advice Python adds for programmers (an integer's digit
    limit: "use sys.set_int_max_str_digits()")."""
    return str(exc).split("; use sys.")[0]


def _too_deep() -> str:
    return f"nested more than {MAX_DEPTH} levels deep"


def _json_depth(data: Any) -> int:
    deepest = 0
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)
    return deepest


_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it (5x faster), else PyYAML's own."""


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """The safe loader whose value constructors, when they refuse a value (an integer of
    thousands of digits, a date with month 13, ``!!int abc``), say where it is."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {_plain(exc)}", node.start_mark
            ) from None


def parse_yaml(text: str, source: str) -> Any:
    """``text`` as one YAML document, with ``load_yaml``'s bounds; problems name ``source``."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise InputError(
                source, [Problem("", "no YAML document (the file is empty or only comments)")]
            )
        problems = _node_problems(node)
        if problems:
            raise InputError(source, problems)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise InputError(source, [_yaml_problem(exc, text)]) from None
    except RecursionError:  # PyYAML's own composer, without libyaml, recurses per level
        raise InputError(source, [Problem("", _too_deep())]) from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError, text: str) -> Problem:
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return Problem(f"line {line}", f"not valid YAML: character U+{char:04X} ({exc.reason})")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}" if mark is not None else ""
    if isinstance(exc, yaml.MarkedYAMLError):
        what = ", ".join(x for x in (exc.context, exc.problem) if x)
        column = f" (column {mark.column + 1})" if mark is not None else ""
        return Problem(where, f"not valid YAML: {what}{column}")
    return Problem(where, f"not valid YAML: {exc}")


def _line(node: Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _node_problems(root: Node) -> list[Problem]:
    """Nesting, expanded size and duplicate keys of a composed document, found without
    expanding it: an alias is the node it names, so each node's size is counted once and
    reused wherever an alias repeats it. A node that contains itself is refused."""
    size: dict[int, int] = {}  # values in the node once its aliases are expanded
    depth: dict[int, int] = {}  # lists and mappings nested in it, itself included
    path: set[int] = set()  # the lists and mappings being walked, from the root down
    problems: list[Problem] = []
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        kids = _children(node)
        if children_done:
            path.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            nested = max((depth[id(k)] for k in kids), default=0)
            depth[key] = nested + 1 if isinstance(node, CollectionNode) else 0
            if size[key] > MAX_NODES:
                message = f"more than {MAX_NODES} values once its aliases are expanded"
                return [Problem(_line(node), message)]
            if depth[key] > MAX_DEPTH:
                return [Problem(_line(node), _too_deep())]
        elif key in path:
            return [Problem(_line(node), "an alias refers to a node that contains it")]
        elif key not in size:
            if isinstance(node, MappingNode):
                problems.extend(_duplicate_keys(node))
            if isinstance(node, CollectionNode):
                path.add(key)
                if len(path) > MAX_DEPTH:
                    return [Problem(_line(node), _too_deep())]
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
    return problems


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _duplicate_keys(node: MappingNode) -> list[Problem]:
    seen: set[tuple[str, str]] = set()
    problems = []
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if (key.tag, key.value) in seen:
            problems.append(Problem(_line(key), f"key {key.value!r} appears twice"))
        seen.add((key.tag, key.value))
    return problems

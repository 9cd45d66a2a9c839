"""Seeded fuzzing of the command line with the repo's own scenarios and model bundles.

Every mutant of ``scenarios/*.yaml`` and ``scenarios/prima/*.yaml`` (and of a bundle, where a
mutation touches ``params.model``) goes through ``quell scenario check`` in this process: it
must exit 0 or 2, never with a traceback, and a refusal starts with ``error:`` (or is the
command line's usage message). Mutants of the encoding, size and alias-bomb families must be
refused, naming the file, by ``scenario check``, ``sim run`` and ``lab run`` alike, before
anything starts: the simulator's and the lab's runners are replaced by ones that fail the test
if called, and no run directory may appear.

Mutant ``k`` is made from ``SEED + k`` alone (``random.Random``, never global state) and the
repo's files, so a failure names the mutant and its seed, and ``mutant(k)`` rebuilds it:
``pytest tests/cli/test_fuzz.py -k 'mutant-0123-'`` replays one."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shutil
import signal
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import quell.experiment.lab
import quell.experiment.sim
from quell.core.files import MAX_FILE_BYTES
from quell.errors import InputError
from quell.studies.prima.profile import load_profile_spec
from tests.cli.inprocess import Outcome, run_quell

SEED = 20_240_607
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SOURCES = sorted(SCENARIOS.glob("*.yaml")) + sorted((SCENARIOS / "prima").glob("*.yaml"))
SMALL = [p for p in SOURCES if p.stat().st_size <= 20_000]
"""Mutants of these only, but for the encoding and size families (refused before parsing): a
valid mutant of fleet-10k takes over a second to check."""

COUNT = {
    "byte-flip": 60,
    "truncate": 60,
    "type-swap": 60,
    "delete-key": 40,  # a third of them still valid: the policies they name are built
    "duplicate-key": 70,
    "hostile-id-or-path": 60,
    "model": 40,  # each builds the policies named before the one it spoils
    "encoding": 45,
    "size": 12,
    "alias-bomb": 36,
}
"""Mutants of each family, some 20 s of checking on this machine when it is quiet."""
REFUSED_FAMILIES = frozenset({"encoding", "size", "alias-bomb"})
"""Families whose every mutant scenario check, sim run and lab run must refuse."""

HOSTILE = (
    "../../etc/passwd",
    "../../../../../../../../etc/shadow",
    "/etc/passwd",
    "$(reboot)",
    "; reboot",
    "`reboot`",
    "a|b",
    "x && rm -rf /",
    "$HOME",
    "~root",
    "*",
    "..",
    "-rf",
    "--help",
    "a\nb",
    "a\x00b",
    "[red]x[/red]",
    "%s%n%x",
    "\u202egnp.exe",
    "é" * 200,
    "a" * 5000,
    "file:///etc/passwd",
    "\\\\server\\share",
    "",
    " ",
)
"""Traversal, shell metacharacters, markup and oddities, for ids, names and paths."""
ID_OR_PATH_KEYS = frozenset(
    {"id", "host", "name", "label", "phase", "initial_phase", "path", "model", "workload"}
    | {"scenario", "interference", "start", "stop", "hosts", "instances", "description"}
)
SWAPS: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    3.5,
    1e308,
    float("nan"),
    10**30,
    "x",
    "",
    "1",
    [],
    [1, "a"],
    {},
    {"a": 1},
    [[[]]],
)
"""What a type swap puts in place of a value (one of another type)."""
KEY_LINE = re.compile(rb"^\s*(- )?[A-Za-z_][A-Za-z0-9_-]*:")
BAD_UTF8 = (0xC0, 0xC1, *range(0xF5, 0x100))
"""Bytes that never occur in UTF-8."""


@dataclass
class Mutant:
    """One input: the scenario's bytes (or a special path), where it came from, and how."""

    k: int
    family: str
    source: Path
    data: bytes | None = None
    """The mutated scenario; ``None`` when ``path`` names a file the test does not write."""
    path: str | None = None
    """Given as is instead of a written file (a device, a directory, a FIFO)."""
    bundle: bytes | None = None
    """A mutated model bundle, written beside the scenario as ``mutant-K.json``."""
    sparse_bytes: int = 0
    """Extend the written scenario to this size with a hole (a size mutant)."""
    must_refuse: bool = False
    how: list[str] = field(default_factory=list)

    @property
    def seed(self) -> int:
        return SEED + self.k

    @property
    def label(self) -> str:
        return (
            f"mutant {self.k} ({self.family} of {self.source.relative_to(ROOT)}, seed {self.seed})"
        )


# -- structure of a loaded document --------------------------------------------------------------
def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path in ``doc``, parents before children."""
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    get(doc, path[:-1])[path[-1]] = value


def dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def load(data: bytes) -> Any:
    return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def model_paths(doc: Any) -> list[tuple[Any, ...]]:
    """Where a PRIMA or LSF policy of ``doc`` names its model bundle."""
    if not isinstance(doc, dict):
        return []
    specs = [("policy",)] + [("compare", k) for k in range(len(doc.get("compare") or []))]
    return [
        (*at, "params", "model")
        for at in specs
        if isinstance(p := (get(doc, at) if at[0] in doc else None), dict)
        and isinstance(p.get("params"), dict)
        and "model" in p["params"]
    ]


# -- the random families -------------------------------------------------------------------------
def byte_flip(m: Mutant, rng: random.Random) -> None:
    data = bytearray(m.source.read_bytes())
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        data[at] ^= rng.randint(1, 255)
        m.how.append(f"byte {at} ^= ...")
    m.data = bytes(data)


def truncate(m: Mutant, rng: random.Random) -> None:
    data = m.source.read_bytes()
    at = rng.randrange(len(data))
    m.data, m.how = data[:at], [f"cut at byte {at}"]


def type_swap(m: Mutant, rng: random.Random) -> None:
    doc = load(m.source.read_bytes())
    at = rng.choice(list(paths(doc)))
    old = get(doc, at)
    value = rng.choice([v for v in SWAPS if type(v) is not type(old)])
    put(doc, at, copy.deepcopy(value))
    m.data, m.how = dump(doc), [f"{at} = {value!r}"]


def delete_key(m: Mutant, rng: random.Random) -> None:
    doc = load(m.source.read_bytes())
    at = rng.choice([p for p in paths(doc) if isinstance(p[-1], str)])
    del get(doc, at[:-1])[at[-1]]
    m.data, m.how = dump(doc), [f"del {at}"]


def duplicate_key(m: Mutant, rng: random.Random) -> None:
    lines = m.source.read_bytes().splitlines(keepends=True)
    at = rng.choice([k for k, line in enumerate(lines) if KEY_LINE.match(line)])
    line = lines[at]
    if line.lstrip().startswith(b"- "):  # a list item's first key: repeat it as the next key
        line = line.replace(b"- ", b"  ", 1)
    lines.insert(at + 1, line)
    m.data, m.how = b"".join(lines), [f"line {at + 1} repeated"]


def hostile_id_or_path(m: Mutant, rng: random.Random) -> None:
    doc = load(m.source.read_bytes())
    strings = [
        p
        for p in paths(doc)
        if isinstance(get(doc, p), str)
        and any(isinstance(x, str) and x in ID_OR_PATH_KEYS for x in p[-2:])
    ]
    at = rng.choice(strings)
    value = rng.choice(HOSTILE)
    put(doc, at, value)
    m.data, m.how = dump(doc), [f"{at} = {value[:40]!r}"]


def model(m: Mutant, rng: random.Random) -> None:
    """A policy's ``params.model``: a hostile path, or a mutated copy of its bundle."""
    doc = load(m.source.read_bytes())
    named = model_paths(doc)  # mostly the first: a later one is built after the others
    at = named[0] if rng.random() < 0.7 else rng.choice(named)
    if rng.random() < 0.4:
        value = rng.choice(MODEL_PATHS)
        m.how = [f"{at} = {value!r}"]
    else:
        bundle = (m.source.parent / get(doc, at)).read_bytes()
        mutate = rng.choice(list(BUNDLE_MUTATIONS))
        m.bundle = BUNDLE_MUTATIONS[mutate](bundle, rng)
        value = f"mutant-{m.k:04d}.json"
        m.how = [f"{at} = {value!r}: {mutate} of {get(doc, at)}"]
    put(doc, at, value)
    m.data = dump(doc)


MODEL_PATHS = (
    "../../etc/passwd",
    "/etc/passwd",
    "/dev/zero",
    "/dev/null",
    "/proc/self/mem",
    ".",
    "fifo.json",
    "a\x00b.json",
    "nope.json",
    "$(reboot).json",
    "a;b|c`d`.json",
    "../prima/models/file-100k-lab.json",
    "../prima-sim-bundle.json",
)
"""Relative to the scenario's directory; some are real bundles reached by a detour."""


def _json_swap(data: bytes, rng: random.Random) -> bytes:
    doc = json.loads(data)
    at = rng.choice(list(paths(doc)))
    put(doc, at, copy.deepcopy(rng.choice([v for v in SWAPS if type(v) is not type(get(doc, at))])))
    return json.dumps(doc).encode()


def _json_delete(data: bytes, rng: random.Random) -> bytes:
    doc = json.loads(data)
    at = rng.choice([p for p in paths(doc) if isinstance(p[-1], str)])
    del get(doc, at[:-1])[at[-1]]
    return json.dumps(doc).encode()


def _flip(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return bytes(out)


BUNDLE_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "byte-flip": _flip,
    "truncate": lambda d, rng: d[: rng.randrange(len(d))],
    "type-swap": _json_swap,
    "delete-key": _json_delete,
    "not-utf8": lambda d, rng: d.replace(b'"', bytes([rng.choice(BAD_UTF8)]) + b'"', 1),
    "binary": lambda d, rng: rng.randbytes(rng.randint(1, 4096)),
    "empty": lambda d, rng: b"",
    "deep": lambda d, rng: (lambda n: b"[" * n + b"]" * n)(rng.randint(65, 100_000)),
    "duplicate-key": lambda d, rng: d.replace(b"{", b'{"format": 1, ', 1),
    "scenario": lambda d, rng: (SCENARIOS / "sim-mm1.yaml").read_bytes(),
}


# -- the families that must be refused -----------------------------------------------------------
def encoding(m: Mutant, rng: random.Random) -> None:
    data = m.source.read_bytes()
    how = rng.choice(["bad-bytes", "utf-16", "latin-1", "cut-char"])
    m.data = None
    if how == "utf-16":
        m.data = data.decode().encode("utf-16")
    elif how == "latin-1":  # invalid only where the file has a character Latin-1 keeps
        m.data = data.decode().encode("latin-1", errors="replace")
    elif how == "cut-char" and any(b >= 0xC0 for b in data):  # a lead byte, then a newline
        at = next(k for k, b in enumerate(data) if b >= 0xC0)
        m.data = data[: at + 1] + b"\n" + data[at + 1 :]
    if m.data is None or _is_utf8(m.data):
        how, out = "bad-bytes", bytearray(data)
        for _ in range(rng.randint(1, 3)):
            out.insert(rng.randrange(len(out) + 1), rng.choice(BAD_UTF8))
        m.data = bytes(out)
    m.how = [how]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def size(m: Mutant, rng: random.Random) -> None:
    data = m.source.read_bytes()
    if rng.random() < 0.25:  # written out: a long comment
        m.data = data + b"\n# " + b"x" * (MAX_FILE_BYTES - len(data) + rng.randint(0, 1000))
        m.how = ["padded with a comment"]
    else:  # a hole: refused by its size, never read
        m.data, m.sparse_bytes = data, MAX_FILE_BYTES + 1 + rng.randrange(1 << 34)
        m.how = [f"sparse, {m.sparse_bytes} bytes"]


def alias_bomb(m: Mutant, rng: random.Random) -> None:
    width = rng.randint(2, 12)
    levels = math.ceil(math.log(2e6) / math.log(width)) + rng.randint(0, 4)
    mapping = rng.random() < 0.5
    first = (
        "{" + ", ".join(f"k{j}: lol" for j in range(width)) + "}"
        if mapping
        else "[" + ", ".join(["lol"] * width) + "]"
    )
    lines = [f"  - &b0 {first}"]
    for level in range(1, levels):
        refs = [f"*b{level - 1}"] * width
        body = ", ".join(f"k{j}: {r}" for j, r in enumerate(refs)) if mapping else ", ".join(refs)
        lines.append(f"  - &b{level} {'{' + body + '}' if mapping else '[' + body + ']'}")
    bomb = "x_bomb:\n" + "\n".join(lines) + "\n"
    doc_lines = m.source.read_bytes().splitlines(keepends=True)
    top = [k for k, line in enumerate(doc_lines) if re.match(rb"^[a-z_]+:", line)]
    at = rng.choice(top)  # before a top-level key, then one that uses the bomb at the end
    use = f"x_use: *b{levels - 1}\n"
    m.data = (
        b"".join(doc_lines[:at]) + bomb.encode() + b"".join(doc_lines[at:]) + b"\n" + use.encode()
    )
    m.how = [f"{width}^{levels} {'mapping' if mapping else 'list'} bomb before line {at + 1}"]


FAMILIES: dict[str, Callable[[Mutant, random.Random], None]] = {
    "byte-flip": byte_flip,
    "truncate": truncate,
    "type-swap": type_swap,
    "delete-key": delete_key,
    "duplicate-key": duplicate_key,
    "hostile-id-or-path": hostile_id_or_path,
    "model": model,
    "encoding": encoding,
    "size": size,
    "alias-bomb": alias_bomb,
}


# -- fixed hostile inputs ------------------------------------------------------------------------
def _deep_block(levels: int) -> bytes:
    return b"".join(b"  " * k + b"k:\n" for k in range(levels)) + b"  " * levels + b"v: 1\n"


FIXED: dict[str, Callable[[bytes, random.Random], bytes | str]] = {
    "empty": lambda d, rng: b"",
    "only-comments": lambda d, rng: b"# nothing here\n\n# at all\n",
    "binary": lambda d, rng: rng.randbytes(4096),
    "nul-bytes": lambda d, rng: d.replace(b"\n", b"\x00\n", 3),
    "utf-8-bom": lambda d, rng: b"\xef\xbb\xbf" + d,
    "python-object-apply": lambda d, rng: d + b"x: !!python/object/apply:os.system ['reboot']\n",
    "python-name": lambda d, rng: b"name: !!python/name:os.system\n" + d,
    "python-module": lambda d, rng: d + b"x: !!python/module:os\n",
    "recursive-alias": lambda d, rng: d + b"x: &a [1, *a]\n",
    "recursive-merge": lambda d, rng: d + b"x: &m {a: 1, <<: *m}\n",
    "deep-flow": lambda d, rng: d + b"x: " + b"[" * 70 + b"]" * 70 + b"\n",
    "very-deep-flow": lambda d, rng: d + b"x: " + b"{a: " * 50_000 + b"}" * 50_000 + b"\n",
    "deep-block": lambda d, rng: d + b"x:\n" + _deep_block(70),
    "long-integer": lambda d, rng: re.sub(rb"(?m)^seed: \d+", b"seed: " + b"7" * 5000, d),
    "bad-date": lambda d, rng: re.sub(rb"(?m)^seed: \d+", b"seed: 2024-02-31", d),
    "bad-int-tag": lambda d, rng: re.sub(rb"(?m)^seed: \d+", b"seed: !!int seven", d),
    "binary-tag": lambda d, rng: re.sub(rb"(?m)^name: .*", b"name: !!binary AAAA", d),
    "set-tag": lambda d, rng: d + b"x: !!set {a, b}\n",
    "two-documents": lambda d, rng: d + b"---\nname: second\n",
    "a-list": lambda d, rng: b"- " + d.replace(b"\n", b"\n  "),
    "a-string": lambda d, rng: b"just text\n",
    "tabs": lambda d, rng: d.replace(b"  ", b"\t"),
    "unicode-escapes": lambda d, rng: re.sub(
        rb"(?m)^name: .*", lambda _: rb'name: "\udcff\u0000\x1b[2J"', d
    ),
    "directory": lambda d, rng: "scenarios",
    "fifo": lambda d, rng: "scenarios/fifo.json",
    "dev-zero": lambda d, rng: "/dev/zero",
    "dev-null": lambda d, rng: "/dev/null",
    "proc-file": lambda d, rng: "/proc/self/status",
    "traversal": lambda d, rng: "scenarios/prima/../../../../../../../../etc/passwd",
    "missing": lambda d, rng: "scenarios/nope/../../nope.yaml",
}
"""Each once, on ``interference-smoke.yaml``; a ``str`` is a path given as is (from the tree)."""
REFUSE_FIXED = {"empty", "only-comments", "binary", "directory", "fifo", "dev-zero", "dev-null"}


# -- the plan ------------------------------------------------------------------------------------
def _plan() -> list[tuple[str, Path]]:
    """(family, source) of mutant k, in order; cheap, so pytest can name each mutant."""
    with_model = [p for p in SMALL if model_paths(load(p.read_bytes()))]
    plan: list[tuple[str, Path]] = []
    for family in FAMILIES:
        pool = (
            SOURCES
            if family in ("encoding", "size")
            else with_model
            if family == "model"
            else SMALL
        )
        plan += [(family, pool[j % len(pool)]) for j in range(COUNT[family])]
    plan += [(f"fixed-{name}", SCENARIOS / "interference-smoke.yaml") for name in FIXED]
    return plan


PLAN = _plan()


def mutant(k: int) -> Mutant:
    """Mutant ``k``, rebuilt from its seed and the repo's files alone."""
    family, source = PLAN[k]
    m = Mutant(k, family, source)
    rng = random.Random(m.seed)
    if family.startswith("fixed-"):
        name = family.removeprefix("fixed-")
        made = FIXED[name](source.read_bytes(), rng)
        if isinstance(made, str):
            m.path = made
        else:
            m.data = made
        m.must_refuse = name in REFUSE_FIXED
    else:
        FAMILIES[family](m, rng)
        m.must_refuse = family in REFUSED_FAMILIES
    return m


# -- running them --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``scenarios/`` (mutants are written beside their source, so relative model
    paths resolve) with a FIFO no one writes to."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(SCENARIOS, root / "scenarios")
    for here in ("scenarios", "scenarios/prima"):
        os.mkfifo(root / here / "fifo.json")
    return root


def stand_in_runners(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Put stand-ins for the simulator's and the lab's runners in place that record a call
    (and fail); returns the calls."""
    calls: list[str] = []

    def never(name: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called")

        return run

    monkeypatch.setattr(quell.experiment.lab, "run_lab", never("run_lab"))
    monkeypatch.setattr(quell.experiment.sim, "run_sim", never("run_sim"))
    return calls


def _write(m: Mutant, tree: Path) -> str:
    if m.path is not None:
        return m.path if m.path.startswith("/") else str(tree / m.path)
    here = tree / m.source.relative_to(ROOT).parent
    if m.bundle is not None:
        (here / f"mutant-{m.k:04d}.json").write_bytes(m.bundle)
    path = here / f"mutant-{m.k:04d}.yaml"
    assert m.data is not None
    path.write_bytes(m.data)
    if m.sparse_bytes:
        os.truncate(path, m.sparse_bytes)
    return str(path)


ANSWER_S = 20
"""Longer than any command here takes: one that has not answered by then hangs (on a FIFO)."""


class Hung(Exception):  # noqa: N818 -- not an OSError, which the code under test may catch
    """The command has not answered within ``ANSWER_S``."""


def _hung(signum: int, frame: object) -> None:
    raise Hung(f"no answer within {ANSWER_S} s")


def _run(m: Mutant, *args: str) -> Outcome:
    before = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(ANSWER_S)
    try:
        return run_quell(*args)
    except Exception as exc:  # the point of the test: name the mutant that got through
        pytest.fail(
            f"{m.label}: quell {' '.join(args[:2])} raised {type(exc).__name__}: {exc}\n"
            f"mutation: {m.how}\n{traceback.format_exc()}",
            pytrace=False,
        )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def _check(m: Mutant, outcome: Outcome, command: str, path: str) -> None:
    where = f"{m.label}, quell {command} ({m.how})"
    assert outcome.code in (0, 2), f"{where}: exit {outcome.code}\n{outcome.stderr}"
    assert "Traceback" not in outcome.stdout + outcome.stderr, where
    if outcome.code == 0:
        assert not m.must_refuse, f"{where}: accepted"
        assert command != "scenario check" or outcome.stdout.startswith("ok: "), where
        return
    usage = "Usage:" in outcome.stderr and "Error" in outcome.stderr
    assert outcome.stderr.startswith("error: ") or usage, f"{where}: {outcome.stderr[:300]}"
    if m.must_refuse and not usage and m.bundle is None:
        assert outcome.stderr.startswith(f"error: {path}: "), f"{where}: {outcome.stderr[:300]}"


PROFILE_SPECS = frozenset(p for p in SOURCES if load(p.read_bytes()).keys() >= {"util_levels_pct"})
"""Sources that are profile specs (``quell prima profile`` runs cells, so they are read with
``load_profile_spec`` itself, besides ``scenario check``)."""


def _check_profile_spec(m: Mutant, path: str) -> None:
    try:
        load_profile_spec(Path(path))
    except InputError as exc:
        assert exc.exit_code == 2 and exc.problems, m.label
    except Exception as exc:  # as in _run
        pytest.fail(f"{m.label}: load_profile_spec raised {exc!r}\n{traceback.format_exc()}")


@pytest.mark.parametrize(
    "k", range(len(PLAN)), ids=[f"mutant-{k:04d}-{f}-{s.stem}" for k, (f, s) in enumerate(PLAN)]
)
def test_mutant(k: int, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = mutant(k)
    path = _write(m, tree)
    checked = _run(m, "scenario", "check", path)
    _check(m, checked, "scenario check", path)
    if m.source in PROFILE_SPECS and m.path is None:
        _check_profile_spec(m, path)
    runs = tree / f"runs-{k:04d}"
    if m.family in REFUSED_FAMILIES:
        runners = stand_in_runners(monkeypatch)
        for command in ("sim", "lab"):
            outcome = _run(m, command, "run", path, "--runs-dir", str(runs))
            _check(m, outcome, f"{command} run", path)
            assert outcome.code == 2, f"{m.label}: {command} run accepted it"
        assert runners == [], f"{m.label}: {runners} called"
        assert not runs.exists(), f"{m.label}: a run directory was created"
    elif m.family == "hostile-id-or-path" and checked.code == 0:
        # Ids and names become paths and process arguments: the simulator runs it for real,
        # and its one run directory stays a plain name inside --runs-dir.
        before = {p for p in tree.rglob("*") if p.is_dir()}
        _check(m, _run(m, "sim", "run", path, "--runs-dir", str(runs)), "sim run", path)
        made = {p for p in tree.rglob("*") if p.is_dir()} - before
        assert all(p == runs or runs in p.parents for p in made), f"{m.label}: {made}"
        made_here = list(runs.iterdir()) if runs.exists() else []
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in made_here), m.label


def test_the_plan_is_large_and_covers_every_family() -> None:
    assert len(PLAN) >= 500
    families = {f for f, _ in PLAN}
    assert set(FAMILIES) <= families and {f"fixed-{n}" for n in FIXED} <= families
    assert {s for _, s in PLAN} == set(SOURCES)
    assert len(PROFILE_SPECS) >= 4


def test_mutants_are_rebuilt_alike_from_their_seed() -> None:
    for k in range(0, len(PLAN), 7):
        a, b = mutant(k), mutant(k)
        assert (a.data, a.path, a.bundle, a.sparse_bytes, a.how) == (
            b.data,
            b.path,
            b.bundle,
            b.sparse_bytes,
            b.how,
        )

"""The one way quell reads its config files: each bound refuses with a message naming the file
and the problem, before anything is parsed or built."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from quell.core.files import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    load_json,
    load_yaml,
    read_bytes,
    read_text,
)
from quell.errors import InputError


def refusal(call: object, *args: object) -> str:
    """The one problem of the ``InputError`` that ``call(*args)`` raises, as printed."""
    with pytest.raises(InputError) as info:
        call(*args)  # type: ignore[operator]
    assert info.value.exit_code == 2
    assert len(info.value.problems) == 1, info.value.problems
    return str(info.value.problems[0])


def write(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def test_reads_a_regular_file(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "name: café\nhosts: [{id: h1}]\n")
    assert load_yaml(path) == {"name": "café", "hosts": [{"id": "h1"}]}
    assert read_text(path) == "name: café\nhosts: [{id: h1}]\n"


def test_missing_file_names_the_kind_of_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(InputError) as info:
        load_json(path, "model bundle")
    assert info.value.source == str(path)
    assert str(info.value.problems[0]) == "cannot read model bundle: No such file or directory"


def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # no writer: reading would block for ever
    sock = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        for path, kind in (
            (tmp_path, "a directory"),
            (fifo, "a FIFO"),
            (Path("/dev/zero"), "a character device"),  # would never end
            (sock, "a socket"),
        ):
            assert refusal(read_bytes, path) == (
                f"cannot read file: it is {kind}, not a regular file"
            )
    finally:
        server.close()


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    target = write(tmp_path / "real.yaml", "a: 1\n")
    (tmp_path / "link.yaml").symlink_to(target)
    assert load_yaml(tmp_path / "link.yaml") == {"a": 1}
    (tmp_path / "dev.yaml").symlink_to("/dev/zero")
    assert "a character device" in refusal(read_bytes, tmp_path / "dev.yaml")


def test_a_nul_byte_in_the_path_is_refused() -> None:
    assert refusal(read_bytes, Path("models/a\0b.json")) == (
        "cannot read file: the path contains a NUL byte"
    )


def test_size_is_checked_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(1 << 40)  # a sparse terabyte: reading it would not end in this test's time
    start = time.perf_counter()
    message = refusal(load_yaml, path, "scenario")
    assert time.perf_counter() - start < 1.0
    assert (
        message == f"scenario too large ({1 << 40} bytes): at most {MAX_FILE_BYTES} bytes are read"
    )


def test_size_bound_is_inclusive(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"x" * 100)
    assert len(read_bytes(path, max_bytes=100)) == 100
    assert refusal(read_bytes, path, "file", 99) == "file too large: at most 99 bytes are read"


def test_non_utf8_names_the_offset_of_the_first_bad_byte(tmp_path: Path) -> None:
    path = write(tmp_path / "latin1.yaml", "name: x\n# café\nseed: 1\n".encode("latin-1"))
    assert refusal(load_yaml, path) == (
        "line 2: not UTF-8 text: byte 0xe9 at offset 13 (invalid continuation byte)"
    )
    cut = write(tmp_path / "cut.yaml", "name: é".encode()[:-1])
    assert refusal(read_text, cut) == (
        "line 1: not UTF-8 text: byte 0xc3 at offset 6 (unexpected end of data)"
    )
    utf16 = write(tmp_path / "utf16.yaml", "name: x\n".encode("utf-16"))
    assert "byte 0xff at offset 0" in refusal(load_yaml, utf16)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_a_file_without_a_document_is_refused(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "empty.yaml", text)
    assert refusal(load_yaml, path) == "no YAML document (the file is empty or only comments)"


def test_python_tags_are_not_constructed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = write(
        tmp_path / "tag.yaml", f"name: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    message = refusal(load_yaml, path)
    assert message.startswith("line 1: not valid YAML: could not determine a constructor")
    assert "python/object/apply:os.system" in message
    assert not marker.exists()


def billion_laughs(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, levels):
        refs = ", ".join([f"*a{k - 1}"] * 10)
        lines.append(f"a{k}: &a{k} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = write(tmp_path / "bomb.yaml", billion_laughs(10))  # 10^10 values expanded
    start = time.perf_counter()
    message = refusal(load_yaml, path)
    assert time.perf_counter() - start < 1.0
    assert message == f"line 6: more than {MAX_NODES} values once its aliases are expanded"


def test_aliases_within_the_bound_are_read(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.yaml", billion_laughs(3) + "b: {<<: {x: 1}, y: 2}\n")
    data = load_yaml(path)
    assert len(data["a2"]) == 10 and data["a2"][0][0] == ["lol"] * 10
    assert data["b"] == {"x": 1, "y": 2}


def test_an_alias_to_its_own_container_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "loop.yaml", "a: &a [1, *a]\n")
    assert refusal(load_yaml, path) == "line 1: an alias refers to a node that contains it"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "line 1: "),
        ("".join(" " * k + f"k{k}:\n" for k in range(MAX_DEPTH + 1)) + " " * 99 + "v: 1\n", ""),
        ("a: " + "[" * 5000 + "]" * 5000, "line 1: not valid YAML"),  # libyaml's own bound
    ],
    ids=["flow", "block", "very-deep"],
)
def test_deep_nesting_is_refused(tmp_path: Path, text: str, line: str) -> None:
    message = refusal(load_yaml, write(tmp_path / "deep.yaml", text))
    assert message.startswith(line)
    assert "nested more than 64 levels deep" in message or "maximum nesting depth" in message


def test_nesting_through_aliases_counts(tmp_path: Path) -> None:
    half = MAX_DEPTH // 2 + 1
    text = "a: &x " + "[" * half + "]" * half + "\nb: " + "[" * half + "*x" + "]" * half + "\n"
    # no list is written more than 34 deep, but b holds 66 once *x is expanded
    message = refusal(load_yaml, write(tmp_path / "d.yaml", text))
    assert message.endswith(": nested more than 64 levels deep")
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"  # and the mapping: 64
    assert load_yaml(write(tmp_path / "ok.yaml", ok)) is not None


def test_every_duplicate_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.yaml", "name: a\nseed: 1\nname: b\nhosts:\n  - {id: h1, id: h2}\n")
    with pytest.raises(InputError) as info:
        load_yaml(path)
    assert [str(p) for p in info.value.problems] == [
        "line 3: key 'name' appears twice",
        "line 5: key 'id' appears twice",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1" * 5000, "line 1: not valid YAML: cannot read this value: Exceeds the limit (4300 "),
        ("2001-13-45", "line 1: not valid YAML: cannot read this value: month must be in 1..12"),
        ("!!int abc", "line 1: not valid YAML: cannot read this value: invalid literal for int()"),
        ('"a\\x00"\nb: "\x01"', "line 2: not valid YAML: character U+0001"),
        ("[1, 2", "line 2: not valid YAML: while parsing a flow sequence, did not find"),
    ],
    ids=["long-int", "bad-date", "bad-int-tag", "control-char", "unclosed"],
)
def test_values_yaml_cannot_build_are_named(tmp_path: Path, value: str, message: str) -> None:
    got = refusal(load_yaml, write(tmp_path / "v.yaml", f"a: {value}\n"))
    assert got.startswith(message), got
    assert "set_int_max_str_digits" not in got


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "key 'a' appears twice in one object"),
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested more than 64 levels deep"),
        ("1" * 5000, "not valid JSON: Exceeds the limit (4300 digits) for integer string"),
        ('{"a": 1,\n', "line 2: not valid JSON: Expecting property name enclosed in double"),
        ("", "line 1: not valid JSON: Expecting value"),
    ],
    ids=["duplicate", "very-deep", "deep", "long-int", "cut", "empty"],
)
def test_json_bounds(tmp_path: Path, text: str, message: str) -> None:
    assert refusal(load_json, write(tmp_path / "b.json", text), "model bundle").startswith(message)

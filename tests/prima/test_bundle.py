"""Model bundles: a saved bundle loads to the same models; bad files are named, not tracebacks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from quell.errors import InputError
from quell.models.bundle import load_bundle
from tests.prima import bundles as sb


def _problems(path: Path, workload: str | None = None) -> str:
    with pytest.raises(InputError) as info:
        load_bundle(path, workload)
    assert info.value.exit_code == 2
    return str(info.value)


def test_round_trip_gives_the_same_predictions(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json")
    b = load_bundle(path, "synthetic")
    assert b.meta.workload == "synthetic"
    q = b.rtm.predict(np.array([33.0]), np.array([2.5]))
    assert q.value[0] == pytest.approx(sb.rt(33.0, 2.5))
    assert b.probe_table.predict(50.0)[()] == pytest.approx(sb.R_ISO0 + sb.R_ISO_SLOPE * 50)


def test_missing_bundle(tmp_path: Path) -> None:
    assert "cannot read model bundle: No such file or directory" in _problems(
        tmp_path / "nope.json"
    )


def test_corrupt_bundle(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json")
    path.write_text(path.read_text()[:200])
    assert "not valid JSON" in _problems(path)


def test_not_a_bundle(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"name": "a scenario"}))
    assert "not a quell model bundle" in _problems(path)


def test_newer_version(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json")
    d = json.loads(path.read_text())
    d["version"] = 7
    path.write_text(json.dumps(d))
    assert "bundle version 7; this quell reads 1, 2" in _problems(path)


def test_bundle_from_another_workload(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json", workload="file-100k")
    assert "built for workload 'file-100k', not 'video'" in _problems(path, "video")


def test_every_broken_field_is_reported(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json")
    d = json.loads(path.read_text())
    d["rtm_points"][3][2] = -1.0
    d["im_points"] = d["im_points"][:1]
    del d["meta"]["instance_type"]
    d["probe_table"]["util_pct"][1] = 0.0
    path.write_text(json.dumps(d))
    msg = _problems(path)
    for fragment in (
        "rtm_points[3][2]",
        "im_points",
        "meta.instance_type: required key is missing",
        "util_pct must increase",
    ):
        assert fragment in msg
    assert "4 problem(s)" in msg


def test_out_of_range_queries_are_clamped_and_flagged(tmp_path: Path) -> None:
    b = load_bundle(sb.write_linear_bundle(tmp_path / "m.json"))
    q = b.rtm.predict(np.array([50.0, 150.0]), np.array([1.0, 1.0]))
    assert q.clamped.tolist() == [False, True]
    assert np.isfinite(q.value).all()
    assert b.im.predict(np.array([500.0])).clamped[0]
    assert b.probe_table.out_of_range(np.array([5.0, 50.0])).tolist() == [True, False]


def test_version_1_bundles_still_load_and_level_bundles_round_trip(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "v1.json")
    d = json.loads(path.read_text())
    d["version"] = 1
    path.write_text(json.dumps(d))
    assert load_bundle(path).im.level_util_pct_.size == 1
    level = tmp_path / "levels.json"
    sb.level_bundle().save(level)
    b = load_bundle(level)
    assert b.im.predict(np.array([95.0]), np.array([30.0])).value[0] == pytest.approx(
        sb.level_sf(30.0, 95.0)
    )


def test_a_bundle_mixing_im_point_forms_is_refused(tmp_path: Path) -> None:
    path = sb.write_linear_bundle(tmp_path / "m.json")
    d = json.loads(path.read_text())
    d["im_points"][0] = [*d["im_points"][0], 10.0, 10.0]
    path.write_text(json.dumps(d))
    assert "mix (U_total, SF) and (U_total, SF, U, level)" in _problems(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("dir", "cannot read model bundle: it is a directory, not a regular file"),
        ("fifo", "cannot read model bundle: it is a FIFO, not a regular file"),
        (b'{"format": "quell.prima.bundle", "meta": "caf\xe9"}', "not UTF-8 text: byte 0xe9"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text: byte 0x89 at offset 0"),
        (b"", "line 1: not valid JSON: Expecting value"),
        (b'{"format": 1, "format": 2}', "key 'format' appears twice in one object"),
        (b"[" * 10_000 + b"]" * 10_000, "nested more than 64 levels deep"),
    ],
    ids=["directory", "fifo", "latin-1", "binary", "empty", "duplicate-key", "deep"],
)
def test_a_file_that_is_no_bundle_is_named(
    tmp_path: Path, content: bytes | str, problem: str
) -> None:
    path = tmp_path / "m.json"
    if content == "dir":
        path.mkdir()
    elif content == "fifo":
        os.mkfifo(path)  # no writer: reading it would block
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)
    message = _problems(path)
    assert message.startswith(f"{path}: 1 problem(s)")
    assert problem in message


def test_a_bundle_path_with_a_nul_byte_is_named() -> None:
    assert "the path contains a NUL byte" in _problems(Path("models/a\0b.json"))

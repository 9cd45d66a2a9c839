"""The scenario corpus: every invalid file names its one problem; the valid base loads."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from quell.errors import InputError
from quell.scenario import load_scenario, parse_scenario

HERE = Path(__file__).parent
BASE = HERE / "valid" / "base.yaml"
INVALID = sorted((HERE / "invalid").glob("*.yaml"))
MULTI = sorted((HERE / "multi").glob("*.yaml"))
EXPECT = "# expect: "


def _expected(path: Path) -> list[str]:
    """The ``# expect:`` fragments on the file's leading comment lines."""
    out = []
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():  # not_utf8.yaml too
        if not line.startswith(EXPECT):
            break
        out.append(line.removeprefix(EXPECT))
    return out


def _load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_scenario(path)
    return info.value


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 20
    assert len(MULTI) >= 2


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_file_names_its_problem(path: Path) -> None:
    (fragment,) = _expected(path)
    err = _load_error(path)
    assert fragment in str(err)
    assert err.source == str(path)
    assert len(err.problems) == 1, err.problems  # one thing wrong, one problem reported
    assert str(err).startswith(f"{path}: 1 problem(s)\n  - ")
    assert err.exit_code == 2


@pytest.mark.parametrize("path", MULTI, ids=lambda p: p.stem)
def test_several_problems_are_reported_at_once(path: Path) -> None:
    fragments = _expected(path)
    assert len(fragments) >= 4
    err = _load_error(path)
    for fragment in fragments:
        assert fragment in str(err)
    assert len(err.problems) == len(fragments)
    assert f"{len(fragments)} problem(s)" in str(err)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    err = _load_error(tmp_path / "nope.yaml")
    assert "cannot read file: No such file or directory" in str(err)


def test_base_loads() -> None:
    s = load_scenario(BASE)
    assert s.name == "base"
    assert s.duration_s == 30.0
    assert [h.id for h in s.hosts] == ["h1", "h2"]
    assert [(i.id, i.host, i.server) for i in s.instances] == [
        ("web1", "h1", "lighttpd"),
        ("web2", "h2", "nginx"),
    ]
    assert [a.id for a in s.antagonists] == ["hog"]
    assert s.phases() == [("baseline", 0.0, 10.0), ("noisy", 10.0, 20.0), ("recovery", 20.0, 30.0)]


def _base_data() -> dict[str, Any]:
    data = yaml.safe_load(BASE.read_text())
    assert isinstance(data, dict)
    return copy.deepcopy(data)


def test_phases_follow_event_times_not_file_order() -> None:
    data = _base_data()
    data["initial_phase"] = "warmup"
    data["events"] = [
        {"at_s": 20, "phase": "recovery", "stop": ["hog"]},
        {"at_s": 5, "start": ["hog"]},  # no phase: does not split the run
        {"at_s": 12.5, "phase": "noisy"},
    ]
    assert parse_scenario(data).phases() == [
        ("warmup", 0.0, 12.5),
        ("noisy", 12.5, 20.0),
        ("recovery", 20.0, 30.0),
    ]


def test_event_at_zero_renames_the_initial_phase() -> None:
    data = _base_data()
    data["events"] = [{"at_s": 0, "phase": "noisy", "start": ["hog"]}]
    assert parse_scenario(data).phases() == [("noisy", 0.0, 30.0)]


def test_no_events_is_one_phase() -> None:
    data = _base_data()
    del data["events"]
    assert parse_scenario(data).phases() == [("baseline", 0.0, 30.0)]

"""Checks made before a lab run starts anything (no root or packages needed to run these)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from quell.errors import InputError, PrerequisiteError
from quell.lab import testbed
from quell.lab.preflight import preflight, scenario_problems
from quell.lab.tag import RunTag
from quell.scenario import parse_scenario
from quell.scenario.schedule import build_schedule
from quell.signals.cgroup import CgroupLayout


def scenario(**over: object) -> dict:
    s: dict = {
        "name": "pf",
        "duration_s": 10,
        "hosts": [{"id": "h1", "cpus": [0]}],
        "instances": [{"id": "a", "host": "h1", "server": "nginx"}],
        "files": [{"path": "/x", "size_bytes": 10}],
        "workload": {
            "arrival": {"process": "poisson", "rate_rps": 5},
            "requests": [{"path": "/x"}],
        },
        "antagonists": [{"id": "n", "kind": "iperf3", "host": "h1"}],
    }
    s.update(over)
    return s


def everything(name: str) -> str | None:
    return f"/usr/bin/{name}"


def test_missing_binaries_are_named_with_their_keys() -> None:
    def which(name: str) -> str | None:
        return None if name in ("nginx", "iperf3", "haproxy") else f"/usr/bin/{name}"

    problems = [str(p) for p in scenario_problems(parse_scenario(scenario()), {0, 1}, which)]
    assert "haproxy is not installed (run `make install`)" in problems
    assert "instances[0].server: nginx is not installed" in problems
    assert "antagonists[0].kind: iperf3 is not installed" in problems


def test_cpus_that_do_not_exist_are_named_with_their_keys() -> None:
    s = scenario(hosts=[{"id": "h1", "cpus": [0, 7]}])
    s["instances"][0]["cpus"] = [5]
    s["workload"]["cpus"] = [9]
    s["load_balancer"] = {"cpus": [1, 4]}
    problems = [str(p) for p in scenario_problems(parse_scenario(s), {0, 1}, everything)]
    assert problems == [
        "hosts[0].cpus: CPU 7 does not exist here (available: 0,1)",
        "instances[0].cpus: CPU 5 does not exist here (available: 0,1)",
        "workload.cpus: CPU 9 does not exist here (available: 0,1)",
        "load_balancer.cpus: CPU 4 does not exist here (available: 0,1)",
    ]


def test_preflight_reports_every_problem_at_once(tmp_path: Path) -> None:
    s = scenario(hosts=[{"id": "h1", "cpus": [99]}])
    with pytest.raises(InputError) as err:
        preflight(parse_scenario(s), tmp_path, "pf.yaml", euid=0, which=lambda n: None)
    assert err.value.exit_code == 2
    assert len(err.value.problems) >= 5  # 5 base binaries, nginx, iperf3, the CPU


def test_preflight_refuses_without_root_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError) as err:
        preflight(parse_scenario(scenario()), tmp_path, "pf.yaml", euid=1000, which=everything)
    assert "root" in str(err.value) and "network namespaces" in str(err.value)
    assert err.value.exit_code == 2


def test_the_schedule_preflight_checks_is_the_one_the_run_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = parse_scenario(scenario())
    checked = preflight(s, tmp_path, "pf.yaml", euid=0, which=everything)
    assert checked is not None
    built = build_schedule(s, tmp_path)
    assert np.array_equal(checked.times_s, built.times_s) and checked.paths == built.paths

    def build_again(*args: object) -> None:
        raise AssertionError("the schedule was built a second time")

    monkeypatch.setattr(testbed, "build_schedule", build_again)
    layout = CgroupLayout("v2", tmp_path, tmp_path, tmp_path, tmp_path, tmp_path)
    tag = RunTag.new()
    bed = testbed.Testbed(s, tmp_path, tmp_path / "run", layout, tag, tmp_path, checked)
    bed.work.mkdir()
    bed.write_schedule()
    written = np.load(bed.work / "schedule.npz")
    assert np.array_equal(written["times_s"], checked.times_s)
    assert np.array_equal(written["path_index"], checked.path_index)


def test_closed_loop_users_have_no_schedule_to_replay(tmp_path: Path) -> None:
    s = scenario()
    s["workload"]["arrival"] = {"process": "closed", "users": 20, "think_time_s": 0.5}
    assert preflight(parse_scenario(s), tmp_path, "pf.yaml", euid=0, which=everything) is None


def test_a_missing_trace_file_is_caught_before_start(tmp_path: Path) -> None:
    s = scenario()
    s["workload"]["arrival"] = {"process": "trace", "path": "nope.txt"}
    with pytest.raises(InputError, match="cannot read trace"):
        preflight(parse_scenario(s), tmp_path, "pf.yaml", euid=0, which=everything)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"0.5\n1.0\n1.5 \xb5s\n", "line 3: not UTF-8 text: byte 0xb5 at offset 12"),
        (None, "cannot read trace: it is a FIFO, not a regular file"),
    ],
    ids=["latin-1", "fifo"],
)
def test_a_trace_that_cannot_be_read_is_caught_before_start(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    trace = tmp_path / "arrivals.txt"
    if content is None:
        os.mkfifo(trace)  # no writer: reading it would block
    else:
        trace.write_bytes(content)
    s = scenario()
    s["workload"]["arrival"] = {"process": "trace", "path": "arrivals.txt"}
    with pytest.raises(InputError) as info:
        preflight(parse_scenario(s), tmp_path, "pf.yaml", euid=0, which=everything)
    assert info.value.source == str(trace)
    assert problem in str(info.value)


def test_a_file_under_a_video_directory_is_refused_with_a_video_workload() -> None:
    s = scenario(files=[{"path": "/v3/c0", "size_bytes": 10}, {"path": "/x", "size_bytes": 10}])
    s["workload"] = {"arrival": {"process": "poisson", "rate_rps": 1}, "sessions": {"videos": 5}}
    problems = [str(p) for p in scenario_problems(parse_scenario(s), {0, 1}, everything)]
    assert problems == [
        "files[0].path: '/v3/c0' is under /v<number>/, where the lab serves the video chunks"
    ]


def test_closed_loop_users_pass_and_too_many_kept_alive_ones_are_refused(tmp_path: Path) -> None:
    s = scenario()
    s["workload"]["arrival"] = {"process": "closed", "users": 200, "think_time_s": 0.5}
    preflight(parse_scenario(s), tmp_path, "pf.yaml", euid=0, which=everything)  # no refusal
    s["workload"]["arrival"]["users"] = 20_001
    problems = [str(p) for p in scenario_problems(parse_scenario(s), {0, 1}, everything)]
    assert problems == [
        "workload.arrival.users: the lab runs at most 20000 users on kept-alive connections"
    ]
    s["workload"]["arrival"]["keepalive"] = False  # one connection at a time, none kept
    assert scenario_problems(parse_scenario(s), {0, 1}, everything) == []


def test_apache_needs_apache2_and_php_fpm_and_fits_the_lab_s_bounds() -> None:
    s = scenario(
        instances=[
            {"id": "a", "host": "h1", "server": "apache", "apache": {"php_max_children": 600}}
        ],
        pages=[{"path": "/p.php", "working_set_bytes": 1_500_000_000, "touches": 10}],
        antagonists=[],
    )

    def which(name: str) -> str | None:
        return None if name == "php-fpm8.2" else f"/usr/bin/{name}"

    problems = [str(p) for p in scenario_problems(parse_scenario(s), {0, 1}, which)]
    assert problems == [
        "instances[0].server: php-fpm8.2 is not installed",
        "instances[0].apache.php_max_children: 600 is over the lab's 512",
        "pages[0].working_set_bytes: 1500000000 is over the lab's 1073741824",
    ]
    s["instances"][0]["apache"] = {}
    s["pages"][0]["working_set_bytes"] = 1 << 20
    assert scenario_problems(parse_scenario(s), {0, 1}, everything) == []


def test_every_antagonist_kind_has_its_binary_checked() -> None:
    """A kind the schema takes but the preflight does not know would fail inside a run."""
    from typing import get_args

    from quell.lab.preflight import ANTAGONIST_BINARY
    from quell.scenario.model import Antagonist

    union = get_args(Antagonist)[0]
    kinds = {get_args(m.model_fields["kind"].annotation)[0] for m in get_args(union)}
    assert kinds == set(ANTAGONIST_BINARY)

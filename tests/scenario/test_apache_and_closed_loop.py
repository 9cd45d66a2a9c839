"""The scenario sections IC2 needs: apache instances with php-fpm settings, PHP pages, and
closed-loop users, which have no request schedule fixed in advance."""

from __future__ import annotations

from typing import Any

import pytest

from quell.errors import InputError
from quell.scenario import parse_scenario
from quell.scenario.model import ApacheSettings
from quell.scenario.schedule import build_schedule
from tests.sim.build import scenario_data


def _data(**over: Any) -> dict[str, Any]:
    data = scenario_data(
        instances=[{"id": "i0", "host": "h0", "server": "apache", "apache": {}}],
        pages=[{"path": "/work.php", "working_set_bytes": 8_000_000, "touches": 20_000}],
    )
    data["workload"]["requests"] = [{"path": "/work.php", "weight": 3}, {"path": "/f"}]
    data.update(over)
    return data


def test_apache_defaults_are_a_configuration_apache_keeps() -> None:
    a = ApacheSettings()
    assert a.max_request_workers % a.threads_per_child == 0
    assert a.max_request_workers <= a.server_limit * a.threads_per_child
    s = parse_scenario(_data())
    assert s.instances[0].apache == a
    assert s.pages[0].response_bytes == 1000


def test_a_page_is_scheduled_with_its_response_size() -> None:
    s = parse_scenario(_data())
    sched = build_schedule(s)
    assert set(sched.paths) == {"/work.php", "/f"}
    assert dict(zip(sched.paths, sched.sizes_bytes, strict=True)) == {
        "/work.php": 1000,
        "/f": 100_000,
    }


def test_closed_loop_users_load_but_have_no_schedule() -> None:
    data = _data()
    data["workload"]["arrival"] = {"process": "closed", "users": 40, "think_time_s": 0.5}
    s = parse_scenario(data)
    assert s.workload.arrival.process == "closed"
    with pytest.raises(InputError, match="closed-loop users have no request schedule"):
        build_schedule(s)


@pytest.mark.parametrize(
    ("apache", "fragment"),
    [
        ({"threads_per_child": 8, "max_request_workers": 12}, "multiple of threads_per_child"),
        ({"server_limit": 2, "max_request_workers": 32}, "at most server_limit"),
        ({"keepalive_timeout_s": 0}, "greater than 0"),
    ],
)
def test_apache_settings_apache_would_lower_are_refused(
    apache: dict[str, Any], fragment: str
) -> None:
    data = _data(instances=[{"id": "i0", "host": "h0", "server": "apache", "apache": apache}])
    with pytest.raises(InputError, match=fragment):
        parse_scenario(data)

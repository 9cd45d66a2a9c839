"""The Environment contract (``quell.core.contract``) over the lab, on real components.

``check_before_start`` needs no bring-up, ``check_close`` one of its own, and the lab is exempt
from the two checks that run it twice and compare (``check_same_seed``,
``check_glance_keeps_observe``); then the shared checks run one after the other on one lab brought up
once for all of them (two hosts, two instances: the serving one Apache with php-fpm, whose
settings ``ReconfigureServer`` changes, the other lighttpd; a probe, boot_s 0, half-second
steps), never two labs at once. On the shared lab, too: an addition HAProxy refuses leaves nothing
half-started. Nothing of any of them may survive."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quell.actuate.haproxy import HAProxyRuntime
from quell.core.action import (
    Action,
    AddInstance,
    ReconfigureServer,
    RemoveInstance,
    SetCpuCap,
    SetMaxConn,
    SetWeight,
)
from quell.core.contract import OWN_CHECKS, SHARED_CHECKS, EnvironmentFixture, OwnCheck, SharedCheck
from quell.core.observation import SERVER_SETTING_KEYS, THROTTLED_KEY
from quell.errors import ActionError, ComponentError
from quell.lab.balancer import BACKEND
from quell.lab.environment import LabEnvironment
from quell.scenario import parse_scenario
from quell.signals.cgroup import detect_layout
from tests.lab.leftovers import leftovers

pytestmark = pytest.mark.lab

SUPPORTS: frozenset[type[Action]] = frozenset(
    {SetWeight, SetMaxConn, AddInstance, RemoveInstance, SetCpuCap, ReconfigureServer}
)
APACHE = {
    "mpm": "event",
    "threads_per_child": 4,
    "server_limit": 4,
    "max_request_workers": 8,
    "keepalive_timeout_s": 5,
    "php_max_children": 2,
}
NOT_REPEATABLE = "the lab runs real processes on a shared machine: no two runs time alike"


def scenario() -> dict[str, Any]:
    return {
        "name": "contract",
        "duration_s": 120,
        "hosts": [{"id": "h1", "link_mbit": 100}, {"id": "h2", "link_mbit": 100}],
        "instances": [
            {"id": "a", "host": "h1", "server": "apache", "apache": APACHE},
            {"id": "b", "host": "h2"},
        ],
        "files": [{"path": "/x.bin", "size_bytes": 5000}],
        "workload": {
            "arrival": {"process": "deterministic", "rate_rps": 20},
            "requests": [{"path": "/x.bin"}],
            "timeout_s": 2,
        },
        "probe": {"period_s": 1, "size_bytes": 10_000},
        "scaling": {"hosts": ["h2"], "boot_s": 0},
    }


class Made:
    """Every lab environment the checks made, to look for what they left behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.envs: list[LabEnvironment] = []

    def __call__(self) -> LabEnvironment:
        k = len(self.envs)
        env = LabEnvironment(
            parse_scenario(scenario()), self.root, self.root / f"run{k}", detect_layout()
        )
        self.envs.append(env)
        return env


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    made = Made(tmp_path_factory.mktemp("contract"))
    yield made
    for env in made.envs:
        env.close()
    left = {env.tag.value: leftovers(env.tag.value) for env in made.envs}
    assert all(not any(v.values()) for v in left.values()), left


@pytest.fixture(scope="module")
def fixture(made: Made) -> EnvironmentFixture[LabEnvironment]:
    return EnvironmentFixture(
        create=made,
        start=LabEnvironment.start,
        serving="a",
        host="h2",
        supports=SUPPORTS,
        boot_s=0.0,
        step_s=0.5,
        wait_s=4.0,  # a drain ends by the workload's timeout_s
        not_repeatable=NOT_REPEATABLE,
        reconfigure=("a", {"max_request_workers": 4}),  # online: HAProxy's maxconn
        reconfigure_graceful={
            "max_request_workers": 4,
            "keepalive_timeout_s": 3,
            "php_max_children": 3,
        },
    )


@pytest.fixture(scope="module")
def shared(fixture: EnvironmentFixture[LabEnvironment]) -> Iterator[LabEnvironment]:
    env = fixture.started()
    yield env
    env.close()


@pytest.mark.parametrize("check", OWN_CHECKS, ids=lambda c: c.__name__)
def test_the_lab_passes_each_check_of_its_own_environments(
    check: OwnCheck, fixture: EnvironmentFixture[LabEnvironment]
) -> None:
    why = check(fixture)
    if check.__name__ in ("check_same_seed", "check_glance_keeps_observe"):
        assert why == NOT_REPEATABLE
    else:
        assert why is None


@pytest.mark.parametrize("check", SHARED_CHECKS, ids=lambda c: c.__name__)
def test_the_lab_passes_each_shared_check(
    check: SharedCheck, fixture: EnvironmentFixture[LabEnvironment], shared: LabEnvironment
) -> None:
    why = check(fixture, shared)
    if check.__name__ == "check_unsupported_action":
        assert why == "supports every Action kind"
    else:
        assert why is None


class Refusing(HAProxyRuntime):
    """HAProxy's runtime API, refusing ``refused`` ("add" a server, or make one "ready")."""

    def __init__(self, socket_path: Path, refused: str) -> None:
        super().__init__(socket_path)
        self.refused = refused

    def add_server(self, backend: str, server: str, *args: Any, **kw: Any) -> None:
        if self.refused == "add":
            raise ComponentError("haproxy", f"add server {backend}/{server}: refused")
        super().add_server(backend, server, *args, **kw)

    def set_state(self, backend: str, server: str, state: Any) -> None:
        if self.refused == state:
            raise ComponentError("haproxy", f"set server {backend}/{server} state {state}: refused")
        super().set_state(backend, server, state)


@pytest.mark.parametrize("refused", ["add", "ready"])
def test_an_addition_haproxy_refuses_leaves_nothing_half_started(
    refused: str, shared: LabEnvironment
) -> None:
    real = shared.testbed.runtime
    assert real is not None
    iid = f"ck_no_{refused}"
    shared.testbed.runtime = Refusing(real.socket_path, refused)
    try:
        with pytest.raises(ActionError) as caught:
            shared.apply([AddInstance(iid, "h2")])
    finally:
        shared.testbed.runtime = real
    assert [a for a, _ in caught.value.failed] == [AddInstance(iid, "h2")]
    assert "refused" in caught.value.failed[0][1]
    inst = shared.instances[iid]
    assert inst.state == "gone"
    assert not any(p.alive() for p in inst.processes)
    assert iid not in {s.server for s in real.show_stat() if s.backend == BACKEND}
    assert iid not in json.loads(shared.testbed.targets_file.read_text())
    shared.clock.sleep_until(shared.clock.now() + 0.5)
    assert iid not in shared.observe().instances
    with pytest.raises(ActionError, match="does not exist"):
        shared.apply([SetWeight(iid, 10)])


def test_every_instance_shows_its_throttling_and_apache_its_settings(
    shared: LabEnvironment,
) -> None:
    shared.clock.sleep_until(shared.clock.now() + 0.5)
    snap = shared.observe()
    for iid in ("a", "b"):
        assert snap.instances[iid].extra[THROTTLED_KEY] >= 0.0
    assert {k: snap.instances["a"].extra[v] for k, v in SERVER_SETTING_KEYS.items()} == {
        "max_request_workers": 8.0,
        "keepalive_timeout_s": 5.0,
        "php_max_children": 2.0,
    }
    assert not set(SERVER_SETTING_KEYS.values()) & set(snap.instances["b"].extra)

"""The contract's ``ReconfigureServer`` check with a graceful round (``reconfigure_graceful``),
on a simulator taught to keep server settings one way or the other: settings that show in the
next snapshot pass and are put back; a graceful change that does not show is named, as is an
online one; whole numbers go back as such."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest

from quell.core.action import Action, ReconfigureServer
from quell.core.contract import EnvironmentFixture, check_reconfigure_server
from quell.core.observation import SERVER_SETTING_KEYS, Snapshot
from quell.errors import ActionError, ContractError, InputError, Problem
from quell.sim import SimEnvironment
from tests.sim.test_contract_sim import SUPPORTS, scenario, sim_fixture

START = {"max_request_workers": 32.0, "keepalive_timeout_s": 5.0, "php_max_children": 16.0}


class Tunable(SimEnvironment):
    """Keeps each instance's settings and shows them in ``extra``; refuses unknown settings
    and whole numbers sent as floats (as the lab's Apache does); ``graceful`` or ``online``
    False drops those changes on the floor (a flaw)."""

    def __init__(self, graceful: bool = True, online: bool = True) -> None:
        super().__init__(scenario())
        self.graceful, self.online = graceful, online
        self.settings = {iid: dict(START) for iid in self.instance_ids_}
        self.sent: list[Mapping[str, object]] = []

    def observe(self) -> Snapshot:
        snap = super().observe()
        shown = {
            iid: dataclasses.replace(
                o,
                extra={
                    **o.extra,
                    **{SERVER_SETTING_KEYS[k]: v for k, v in self.settings[iid].items()},
                },
            )
            for iid, o in snap.instances.items()
        }
        return dataclasses.replace(snap, instances=shown)

    def apply(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if not isinstance(a, ReconfigureServer):
                continue
            self.sent.append(dict(a.settings))
            bad = [
                Problem(k, "unknown or not a whole number")
                for k, v in a.settings.items()
                if k not in START or (k != "keepalive_timeout_s" and not isinstance(v, int))
            ]
            if bad:
                why = str(InputError("ReconfigureServer", bad))
                raise ActionError(self.name, failed=[(a, why)], applied=[])
            if self.graceful if a.graceful else self.online:
                self.settings[a.instance_id] |= {k: float(v) for k, v in a.settings.items()}
        super().apply([a for a in actions if not isinstance(a, ReconfigureServer)])


def fixture(graceful: bool = True, online: bool = True) -> EnvironmentFixture[SimEnvironment]:
    return sim_fixture(
        lambda: Tunable(graceful, online),
        supports=SUPPORTS | {ReconfigureServer},
        reconfigure=("i0", {"max_request_workers": 8}),
        reconfigure_graceful={"max_request_workers": 16, "keepalive_timeout_s": 2.5},
    )


def run(fx: EnvironmentFixture[SimEnvironment]) -> tuple[str | None, Tunable]:
    env = fx.started()
    try:
        assert isinstance(env, Tunable)
        return check_reconfigure_server(fx, env), env
    finally:
        env.close()


def test_settings_that_show_pass_and_are_put_back_as_whole_numbers() -> None:
    why, env = run(fixture())
    assert why is None
    assert env.settings["i0"] == START
    assert env.sent == [
        {"max_request_workers": 16, "keepalive_timeout_s": 2.5},  # graceful
        {"max_request_workers": 32, "keepalive_timeout_s": 5.0},  # set back gracefully
        {"max_request_workers": 8},  # online
        {"ck_unknown": 1},  # refused
        {"max_request_workers": 32},  # set back online
    ]


GRACEFUL = "settings={'max_request_workers': 16, 'keepalive_timeout_s': 2.5}, graceful=True)"
ONLINE = "settings={'max_request_workers': 8}, graceful=False)"


@pytest.mark.parametrize(
    ("graceful", "online", "named"),
    [
        (False, True, f"{GRACEFUL}: next snapshot shows {{'max_request_workers': 32.0, "),
        (True, False, f"{ONLINE}: next snapshot shows {{'max_request_workers': 32.0}}"),
    ],
)
def test_a_change_that_does_not_show_is_named(graceful: bool, online: bool, named: str) -> None:
    with pytest.raises(ContractError) as caught:
        run(fixture(graceful, online))
    assert named in str(caught.value)

"""A policy's own balancer algorithm (``policy.balancer``): its run in a comparison and alone
uses it; without it, the policy's usual one (lc and target: leastconn) or the scenario's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quell.errors import InputError
from quell.scenario.load import load_scenario
from quell.scenario.model import PolicySpec
from quell.scenario.policy import scenario_for_policy, with_policy_balancer

TABLE8 = Path(__file__).resolve().parents[2] / "scenarios" / "prima-sim-table8.yaml"


def test_a_policy_can_name_its_balancer() -> None:
    t8 = load_scenario(TABLE8)
    rr = t8.load_balancer.model_copy(update={"algorithm": "roundrobin"})
    plain = PolicySpec(name="prima", params=t8.policy.params)
    s = t8.model_copy(update={"policy": plain, "load_balancer": rr})
    prima_lc = PolicySpec(name="prima", params=s.policy.params, balancer="leastconn")
    assert scenario_for_policy(s, prima_lc).load_balancer.algorithm == "leastconn"
    # without one: the scenario's for prima, leastconn for target; an explicit one wins
    assert scenario_for_policy(s, s.policy).load_balancer.algorithm == "roundrobin"
    assert scenario_for_policy(s, PolicySpec(name="target")).load_balancer.algorithm == (
        "leastconn"
    )
    target_rr = PolicySpec(name="target", balancer="roundrobin")
    assert scenario_for_policy(s, target_rr).load_balancer.algorithm == "roundrobin"
    # a single run takes its policy's balancer too, and leaves the rest of the scenario alone
    alone = with_policy_balancer(s.model_copy(update={"policy": prima_lc}))
    assert alone.load_balancer.algorithm == "leastconn"
    assert alone.hosts == s.hosts and alone.policy == prima_lc
    assert with_policy_balancer(s) is s


def test_an_unknown_balancer_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(TABLE8.read_text())
    doc["policy"]["balancer"] = "random"
    doc["policy"]["params"]["model"] = str(TABLE8.parent / doc["policy"]["params"]["model"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_scenario(bad)
    assert any("balancer" in p.location for p in err.value.problems)

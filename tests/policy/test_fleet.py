"""Fleet: what serves, what boots, what drains, which hosts are free, which weights hold."""

from __future__ import annotations

import re
from typing import Any

import pytest

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.policy.fleet import Fleet
from tests.policy.snapshots import context, snap

ID = re.compile(r"^[a-z][a-z0-9_]{0,11}$")


def fleet(**kw: Any) -> Fleet:
    return Fleet.from_context(context(**kw))


def test_starts_with_the_scenario_instances() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"}, hosts=("h2", "h3", "h4"))
    assert f.active == ("i1", "i2")
    assert f.pending_add == {} and f.removing == () and f.count == 2
    assert f.host_of("i2") == "h2"
    assert f.free_host() == "h3"  # h2 is taken by i2: one instance per host


def test_added_instance_is_pending_until_it_first_appears() -> None:
    f = fleet()
    f.update(snap(10, i1={}))
    add = f.add()
    assert add == AddInstance("n1", "h2", 0)
    assert f.pending_add == {"n1": "h2"} and f.active == ("i1",) and f.count == 2
    f.update(snap(20, i1={}))  # still booting
    assert f.pending_add == {"n1": "h2"}
    f.update(snap(40, i1={}, n1={}))
    assert f.pending_add == {} and f.active == ("i1", "n1") and f.count == 2


def test_hosts_in_order_of_preference_and_freed_when_the_instance_is_gone() -> None:
    f = fleet(hosts=("h2", "h3"))
    f.update(snap(10, i1={}))
    assert [f.add().host, f.add().host] == ["h2", "h3"]
    assert not f.can_add() and f.free_host() is None
    f.update(snap(20, i1={}, n1={}, n2={}))
    f.remove("n1")
    assert f.free_host() is None  # n1 drains on h2
    f.update(snap(30, i1={}, n1={}, n2={}))
    assert f.removing == ("n1",) and f.free_host() is None
    f.update(snap(40, i1={}, n2={}))
    assert f.removing == () and f.free_host() == "h2" and f.can_add()
    assert f.add() == AddInstance("n3", "h2", 0)  # n1 is never reused


def test_draining_instance_is_reported_but_not_capacity() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"})
    f.update(snap(10, i1={}, i2={}))
    assert f.remove("i2", drain=True) == RemoveInstance("i2", True)
    f.update(snap(20, i1={}, i2={"requests": 3}))
    assert f.active == ("i1",) and f.removing == ("i2",) and f.count == 1


def test_remove_refuses_below_min_instances_and_unknown_ids() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"}, min_instances=2)
    assert not f.can_remove()
    with pytest.raises(ValueError, match="min 2"):
        f.remove("i1")
    with pytest.raises(ValueError, match="not an active instance"):
        f.remove("zz")
    f.update(snap(10, i1={}, i2={}))
    f.add()
    with pytest.raises(ValueError, match="not an active instance"):
        f.remove("n1")  # pending: not serving yet


def test_max_instances_counts_pending() -> None:
    f = fleet(hosts=("h2", "h3", "h4"), max_instances=2)
    assert f.can_add()
    f.add()
    assert f.count == 2 and not f.can_add()
    with pytest.raises(ValueError, match="cannot add"):
        f.add()


def test_without_scaling_the_fleet_neither_grows_nor_shrinks() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"}, hosts=None)
    assert not f.can_add() and not f.can_remove()


def test_new_ids_skip_existing_ones_and_match_the_identifier_pattern() -> None:
    f = fleet(initial={"n1": "h1", "n2": "h9"}, hosts=("h2", "h3", "h4"))
    ids = [f.add().instance_id for _ in range(3)]
    assert ids == ["n3", "n4", "n5"]
    assert all(ID.match(i) for i in ids)


def test_vanished_and_unannounced_instances() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"}, hosts=("h2",))
    f.update(snap(10, i1={}, i2={}))
    assert f.free_host() is None
    f.update(snap(20, i1={}, x9={}))  # i2 crashed; x9 appeared from elsewhere
    assert f.active == ("i1", "x9") and f.free_host() == "h2" and f.host_of("x9") is None
    assert f.add().instance_id == "n1"


def test_reweight_sends_only_what_changes_the_split() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"})
    f.update(snap(10, i1={"weight": 100}, i2={"weight": 100}))
    assert f.reweight({"i1": 256, "i2": 256}) == ()  # 100:100 already splits equally
    assert f.reweight({"i1": 256, "i2": 85}) == (SetWeight("i1", 256), SetWeight("i2", 85))
    assert f.reweight({"i1": 256, "i2": 85}) == ()  # remembered without a new snapshot
    f.update(snap(20, i1={"weight": 256}, i2={"weight": 100}))  # someone else changed i2
    assert f.reweight({"i1": 256, "i2": 85}) == (SetWeight("i2", 85),)


def test_reweight_sets_unknown_weights() -> None:
    f = fleet(initial={"i1": "h1", "i2": "h2"})
    f.update(snap(10, i1={}, i2={}))  # the environment reports no weights
    assert f.reweight({"i1": 256, "i2": 256}) == (SetWeight("i1", 256), SetWeight("i2", 256))
    assert f.reweight({"i1": 256, "i2": 256}) == ()
    assert f.weights == {"i1": 256, "i2": 256}


def test_added_weight_is_remembered() -> None:
    f = fleet()
    f.update(snap(10, i1={"weight": 256}))
    f.add(weight=256)
    f.update(snap(40, i1={"weight": 256}, n1={}))
    assert f.reweight({"i1": 256, "n1": 256}) == ()
    assert f.describe() == {"active": ["i1", "n1"], "pending_add": {}, "removing": []}

from __future__ import annotations

from quell.signals import CounterDelta


def test_first_call_is_none_then_delta() -> None:
    d = CounterDelta()
    assert d.update("s1", 100) is None
    assert d.update("s1", 130) == 30
    assert d.update("s1", 130) == 0
    assert d.update("s1", 131.5) == 1.5


def test_keys_are_independent() -> None:
    d = CounterDelta()
    assert d.update(("s1", "stot"), 10) is None
    assert d.update(("s2", "stot"), 500) is None
    assert d.update(("s1", "stot"), 15) == 5
    assert d.update(("s2", "stot"), 501) == 1
    assert len(d) == 2


def test_generation_change_is_none_and_rebases() -> None:
    d = CounterDelta()
    assert d.update("haproxy", 1000, generation=4242) is None
    assert d.update("haproxy", 1200, generation=4242) == 200
    # a reload: new pid, counters restart; even a larger value is not a valid delta
    assert d.update("haproxy", 5000, generation=5151) is None
    assert d.update("haproxy", 5010, generation=5151) == 10


def test_reset_is_none_and_rebases() -> None:
    d = CounterDelta()
    d.update("c", 50)
    assert d.update("c", 3) is None
    assert d.update("c", 10) == 7


def test_forget() -> None:
    d = CounterDelta()
    d.update("c", 1)
    d.forget("c")
    d.forget("never-seen")
    assert d.update("c", 5) is None

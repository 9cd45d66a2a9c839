"""UtilWindow: exact means over each instance's last reported intervals."""

from __future__ import annotations

import pytest

from quell.policy.window import UtilWindow


def test_mean_of_the_last_size_values_per_instance() -> None:
    w = UtilWindow(3)
    assert w.update({"a": 10.0}) == {"a": 10.0}
    assert w.update({"a": 20.0, "b": 50.0}) == {"a": 15.0, "b": 50.0}
    assert w.update({"a": 30.0, "b": 70.0}) == {"a": 20.0, "b": 60.0}
    out = w.update({"a": 60.0, "b": 90.0})  # a: 20, 30, 60 (10 left the window)
    assert out["a"] == pytest.approx(110.0 / 3) and out["b"] == pytest.approx(70.0)


def test_an_instance_missing_from_an_update_starts_afresh() -> None:
    w = UtilWindow(3)
    w.update({"a": 10.0, "b": 10.0})
    w.update({"b": 20.0})
    assert set(w.history_) == {"b"}
    assert w.update({"a": 40.0, "b": 30.0}) == {"a": 40.0, "b": 20.0}


def test_size_one_is_the_interval_itself() -> None:
    w = UtilWindow(1)
    w.update({"a": 10.0})
    assert w.update({"a": 35.0}) == {"a": 35.0}

"""PRIMA's defaults and ``preset: paper``: the paper's values come back field for field, a field
a scenario gives wins over either, and a preset that does not exist is refused by name."""

from __future__ import annotations

import pytest

from quell.errors import InputError
from quell.policy.context import parse_params
from quell.policy.prima.params import PAPER, PrimaParams


def test_the_paper_preset_gives_back_every_value_the_defaults_moved() -> None:
    defaults = PrimaParams(model="m.json")
    paper = PrimaParams(model="m.json", preset="paper")
    for name, value in PAPER.items():
        assert getattr(paper, name) == value, name
        assert getattr(defaults, name) != value, name  # each entry is a default that moved
    same = set(PrimaParams.model_fields) - set(PAPER) - {"preset"}
    assert all(getattr(paper, n) == getattr(defaults, n) for n in same)


def test_a_field_given_wins_over_the_preset_and_a_bad_preset_is_named() -> None:
    p = PrimaParams(model="m.json", preset="paper", sf_window=5, fast_interval_s=2.0)
    assert (p.sf_window, p.fast_interval_s, p.min_room_pct) == (5, 2.0, 0.0)
    with pytest.raises(InputError) as err:
        parse_params(PrimaParams, {"model": "m.json", "preset": "tuned", "sf_windw": 1}, "prima")
    names = {p.location for p in err.value.problems}
    assert names == {"policy.params.preset", "policy.params.sf_windw"}

"""No policy parameter that nothing uses: every parameter of every policy is set, to something
other than its default, by a shipped scenario (its ``policy``, a ``compare`` entry, or an IC2
training spec's ``ic2`` section). One that none sets is removed and its default kept in the
code as a constant, with the measurement behind it in a comment; one that a scenario sets says
in its docstring what was measured with it."""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from quell.policy import POLICIES, policy_class
from quell.policy.prima.params import PAPER

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))
MODELS: dict[str, type[BaseModel]] = {
    name: policy_class(name).params_model
    for name in POLICIES
    if policy_class(name).params_model.model_fields
}
"""Each policy with parameters, by name."""
WITHOUT_PARAMETERS = {"static", "rr", "lc", "lr"}
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def set_values() -> dict[str, dict[str, list[Any]]]:
    """Policy name → parameter → the values shipped scenarios give it."""
    found: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for path in SCENARIOS:
        doc = yaml.load(path.read_text(), Loader=LOADER)
        specs = [doc.get("policy"), *(doc.get("compare") or [])]
        for spec in specs:
            if isinstance(spec, dict):
                for key, value in (spec.get("params") or {}).items():
                    found[spec["name"]][key].append(value)
        if isinstance(doc.get("ic2"), dict):  # a training spec: the policy its phases run
            for key, value in doc["ic2"].items():
                found["ic2"][key].append(value)
    return found


def test_every_policy_with_parameters_is_listed_here() -> None:
    assert set(POLICIES) == set(MODELS) | WITHOUT_PARAMETERS


def test_every_parameter_is_set_by_a_shipped_scenario() -> None:
    assert len(SCENARIOS) > 50
    found = set_values()
    unused = []
    for name, model in MODELS.items():
        for key, field in model.model_fields.items():
            default = field.default
            given = found.get(name, {}).get(key, [])
            if name == "prima" and key in PAPER and "paper" in found[name].get("preset", []):
                given = [*given, PAPER[key]]  # preset: paper sets it to the paper's value
            if not any(v != default or default is PydanticUndefined for v in given):
                unused.append(f"{name}.{key}")
    assert unused == [], (
        "set by no shipped scenario to anything but its default: remove each and keep its "
        "default as a constant, or set it where a measurement adopted it"
    )


def test_every_key_a_scenario_sets_is_a_parameter() -> None:
    # the scenarios themselves are checked by `quell scenario check`; this keeps the listing
    # above honest (a key this test did not see as a parameter would count as nothing's use)
    found = set_values()
    assert set(found) <= set(MODELS)
    for name, keys in found.items():
        assert set(keys) <= set(MODELS[name].model_fields), name

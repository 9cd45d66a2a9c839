"""The scenario's ``attribution`` option is checked with the rest of the scenario: a missing,
foreign or unfitting model bundle and a scenario without an instrumented instance are refused
with exit 2, every problem at once, each naming its key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from quell.scenario import load_scenario
from quell.scenario.attribution import attribution_model_path
from tests.cli.inprocess import assert_refused, run_quell

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "attribution" / "lighttpd-hog.yaml"
MODEL = ROOT / "scenarios" / "attribution" / "model.json"


def scenario(tmp_path: Path, model: str, instrument: bool = True, path: str = "/php") -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["attribution"] = {"model": model}
    doc["instances"][0]["instrument"] = instrument
    doc["files"][1]["path"] = doc["workload"]["requests"][1]["path"] = path
    out = tmp_path / "s.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def test_the_example_loads_and_names_its_model_beside_it() -> None:
    s = load_scenario(EXAMPLE)
    assert attribution_model_path(s, EXAMPLE.parent) == MODEL
    assert run_quell("scenario", "check", EXAMPLE).code == 0


def test_without_the_option_nothing_is_read(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    del doc["attribution"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    assert load_scenario(tmp_path / "s.yaml").attribution is None


def test_a_missing_model_and_no_instrumented_instance_are_both_named(tmp_path: Path) -> None:
    path = scenario(tmp_path, "nope.json", instrument=False)
    for command in (("scenario", "check"), ("lab", "run")):
        assert_refused(
            run_quell(*command, path),
            "2 problem(s)",
            "attribution: needs at least one instance with instrument: true",
            f"attribution.model: {tmp_path / 'nope.json'}",
        )


def test_a_foreign_bundle_is_refused(tmp_path: Path) -> None:
    foreign = ROOT / "scenarios" / "prima" / "models" / "video-lab.json"
    assert_refused(
        run_quell("scenario", "check", scenario(tmp_path, str(foreign))),
        "attribution.model",
        "not a quell attribution model",
    )


def test_a_bundle_of_another_version_is_refused(tmp_path: Path) -> None:
    doc = json.loads(MODEL.read_text())
    doc["version"] = 9
    (tmp_path / "v9.json").write_text(json.dumps(doc))
    assert_refused(
        run_quell("scenario", "check", scenario(tmp_path, "v9.json")),
        "attribution.model",
        "version 9",
    )


def test_a_model_reading_psi_and_an_unknown_class_are_both_named(tmp_path: Path) -> None:
    doc = json.loads(MODEL.read_text())
    doc["features"][-1] = "psi_cpu_some_seconds"  # as many columns: a readable bundle
    (tmp_path / "psi.json").write_text(json.dumps(doc))
    assert_refused(
        run_quell("scenario", "check", scenario(tmp_path, "psi.json", path="/big.bin")),
        "2 problem(s)",
        "reads psi_cpu_some_seconds, which a lab run does not record",
        "workload.requests[1].path: class '/big.bin' is not one the attribution model was "
        "trained on (/php, /static)",
    )


def test_a_model_reading_the_ebpf_split_needs_ebpf_true(tmp_path: Path) -> None:
    doc = json.loads(MODEL.read_text())
    doc["features"][-1] = "runq_wait_other_cgroup_seconds"  # as many columns: a readable bundle
    (tmp_path / "ebpf.json").write_text(json.dumps(doc))
    path = scenario(tmp_path, "ebpf.json")
    assert_refused(
        run_quell("scenario", "check", path),
        "reads runq_wait_other_cgroup_seconds, which a lab run does not record",
        "the eBPF part only with ebpf: true",
    )
    with_ebpf = yaml.safe_load(path.read_text())
    with_ebpf["attribution"]["ebpf"] = True
    path.write_text(yaml.safe_dump(with_ebpf))
    assert load_scenario(path).attribution.ebpf  # type: ignore[union-attr]
    assert run_quell("scenario", "check", path).code == 0

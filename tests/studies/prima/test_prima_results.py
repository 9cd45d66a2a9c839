"""The PRIMA results page: figures come from the measured files, formatted as given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from quell.cli import app
from quell.errors import InputError
from quell.studies.prima.results import data_files, lab_section, render, validation_section
from tests.cli.inprocess import assert_refused, run_quell


def test_validation_section_reports_both_directions_of_the_im() -> None:
    v = {
        "points": 1,
        "rtm_mape_pct": 8.878,
        "im_sf_mape_pct": 33.16,
        "im_total_mape_pct": 4.93,
        "im_sf_points": 1,
        "clamped_points": 0,
        "rows": [
            {
                "util_pct": 18.74,
                "sf": 0.147,
                "rt_s": 0.01402,
                "rt_pred_s": 0.01291,
                "rt_error_pct": 7.9,
                "total_util_pct": 40.02,
                "sf_pred": 0.191,
                "total_pred_pct": 38.61,
            }
        ],
    }
    text = "\n".join(validation_section(v, "data/video-lab.validation.json"))
    assert text.startswith("## Model validation (cf. Table II): video-lab\n")
    assert "RTM mean absolute error **8.9 %**" in text
    assert "**33.2 %** over the 1 points" in text and "**4.9 %** read the other way" in text
    assert "| 18.7 | 0.15 | 14.02 | 12.91 | 7.9 | 40.0 | 0.19 | 38.6 |" in text
    assert "scatter" not in text  # a file from before the noise floor was recorded
    v |= {"rtm_noise_pct": 2.345, "im_sf_noise_pct": 11.25, "im_sf_noise_points": 1}
    text = "\n".join(validation_section(v, "data/video-lab.validation.json"))
    assert "mean error of about **2.3 %** in RT and **11.2 %** in SF" in text


# -- the page from a directory of result files (quell prima results --data) ------------------
def _lab(scenario: str, rt_ms: dict[str, dict[str, float]]) -> dict[str, object]:
    """A ``lab compare --json`` document: policy → instance → settled mean RT in one phase."""
    return {
        "scenario": scenario,
        "target_rt_s": 0.013,
        "settle_s": 4.0,
        "policies": {
            name: {
                "run_dir": f"runs/{name}",
                "phases": [
                    {
                        "phase": "noisy_h2",
                        "settled_from_s": 19.0,
                        "end_s": 60.0,
                        "mean_rt_s": {i: v / 1e3 for i, v in per.items()},
                        "worst_mean_rt_s": max(per.values()) / 1e3,
                        "meets_target": max(per.values()) <= 13.0,
                    }
                ],
                "scaling_actions": 0,
                "errors": 0,
                # round robin's run recorded the machine's steal; PRIMA's predates it
                **({"max_steal_pct": 0.4218} if name == "rr" else {}),
            }
            for name, per in rt_ms.items()
        },
    }


def test_lab_section_counts_each_instances_requests_and_every_request_where_recorded() -> None:
    """A comparison written since the counts were recorded: PRIMA serves everything on i1, so
    the interfered instance has no mean of its own and the every-request row compares them."""
    c = _lab("prima-table3-vs-lc", {"prima": {"i1": 12.2}, "lc": {"i1": 9.7, "i2": 22.0}})
    extra = {
        "prima": ({"i1": 1233}, 12.2, 27.4),
        "lc": ({"i1": 685, "i2": 548}, 15.2, 42.1),
    }
    for name, (count, mean_ms, p95_ms) in extra.items():
        phase = c["policies"][name]["phases"][0]  # type: ignore[index]
        phase |= {"requests": count, "all_mean_rt_s": mean_ms / 1e3, "all_p95_rt_s": p95_ms / 1e3}
    text = "\n".join(lab_section(c, "data/table3-vs-lc-lab-comparison.json"))
    assert "| prima | i1 12.2 (1233) (from 19 s) |" in text
    assert "| lc | i1 9.7 (685), i2 22.0 (548) (from 19 s) |" in text
    assert "| prima | 12.2 / 27.4 |" in text and "| lc | 15.2 / 42.1 |" in text


def _sim(scenario: str, slo_pct: float) -> dict[str, object]:
    row = {
        "policy": "prima",
        "slo_pct": slo_pct,
        "slo_all_pct": slo_pct - 4.0,
        "settling_pct": 12.5,
        "settling_own_pct": 2.5,
        "mean_rt_ms": 10.86,
        "p95_rt_ms": 21.21,
        "instance_seconds": 222,
        "oracle_instance_seconds": 138,
        "scaling_actions": 14,
    }
    return {"scenario": scenario, "target_rt_s": 0.014, "settle_s": 7.0, "policies": [row]}


def _write(directory: Path, name: str, doc: object) -> Path:
    path = directory / name
    path.write_text(json.dumps(doc))
    return path


def _data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    _write(
        data, "table7-exp-lab-comparison.json", _lab("prima-table7-exp", {"prima": {"i1": 17.62}})
    )
    _write(
        data,
        "table3-5-lab-comparison.json",
        _lab(
            "prima-table3-5", {"prima": {"i1": 11.94, "i2": 10.31}, "rr": {"i1": 9.2, "i2": 13.47}}
        ),
    )
    _write(data, "table10-lab-comparison.json", _lab("prima-table10", {"prima": {"i1": 12.0}}))
    _write(data, "sim-table10-comparison.json", _sim("prima-sim-table10", 99.07))
    _write(data, "sim-table8-comparison.json", _sim("prima-sim-table8", 95.3))
    _write(data, "demo-sim-comparison.json", _sim("prima-demo", 98.39))
    v = {
        "points": 10,
        "rtm_mape_pct": 8.878,
        "im_sf_mape_pct": 33.16,
        "im_total_mape_pct": 4.93,
        "im_sf_points": 9,
        "clamped_points": 0,
        "rows": [],
    }
    _write(data, "file-100k-lab.validation.json", v)
    return data


def test_data_files_finds_each_kind_in_natural_name_order(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    found = data_files(data)
    assert [p.name for p in found.validation] == ["file-100k-lab.validation.json"]
    assert [p.name for p in found.lab] == [
        "table3-5-lab-comparison.json",
        "table7-exp-lab-comparison.json",
        "table10-lab-comparison.json",
    ]
    assert [p.name for p in found.sim] == [
        "demo-sim-comparison.json",
        "sim-table8-comparison.json",
        "sim-table10-comparison.json",
    ]


def test_results_page_from_a_data_directory_shows_every_source_and_its_figures(
    tmp_path: Path,
) -> None:
    data = _data_dir(tmp_path)
    bench = _write(
        tmp_path,
        "prima.json",
        {
            "instances": 10000,
            "prima_decision_ms_median": 21.11,
            "goal_ms": 20.0,
            "ratio_prima_over_rr": 1.9,
        },
    )
    out = tmp_path / "prima.md"
    result = CliRunner().invoke(
        app, ["prima", "results", "--data", str(data), "--bench", str(bench), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for p in sorted(data.iterdir()):
        assert f"Source: `{p}`" in text
    assert "RTM mean absolute error **8.9 %**" in text
    # Table III: round robin leaves i2 above R_th = 13 ms, PRIMA keeps both under it.
    assert "| prima | 11.9 | 0 | 0 | - |" in text and "| rr | **13.5** | 0 | 0 | 0.42 |" in text
    assert "| prima | i1 11.9, i2 10.3 (from 19 s) |" in text
    assert "| rr | i1 9.2, i2 13.5 (from 19 s) |" in text
    # settled and all-interval SLO, the share left out, and instance-seconds over the oracle's
    assert "| prima | 99.07 | 95.07 | 12.5 | 2.5 | 10.86 | 21.21 | 222 | 138 | 1.61 | 14 |" in text
    assert "| prima | 95.30 |" in text and "| prima | 98.39 |" in text
    assert "10000 instances: median 21.11 ms per decision (goal ≤ 20.0 ms), 1.9×" in text
    order = [text.index(f"Lab: prima-{n}\n") for n in ("table3-5", "table7-exp", "table10")]
    assert order == sorted(order)
    sims = [text.index(f"Simulator: prima-{n}\n") for n in ("demo", "sim-table8", "sim-table10")]
    assert sims == sorted(sims) and order[-1] < sims[0]


def test_results_page_shows_a_comparison_over_seeds_with_paired_differences(
    tmp_path: Path,
) -> None:
    from quell.report.seeds import seed_summary

    def one(prima: tuple[float, float, float], tt: tuple[float, float, float]) -> dict[str, Any]:
        rows = [
            {
                "policy": name,
                "slo_pct": slo,
                "slo_all_pct": slo_all,
                "settling_pct": 10.0,
                "instance_seconds": inst,
                "oracle_instance_seconds": 100.0,
            }
            for name, (slo, slo_all, inst) in (("prima", prima), ("target", tt))
        ]
        return {"policies": rows}

    docs = [
        one((99.0, 98.0, 120.0), (95.0, 93.0, 130.0)),
        one((99.5, 98.5, 110.0), (96.0, 94.0, 130.0)),
    ]
    doc = {
        "scenario": "fleet",
        "target_rt_s": 0.1,
        "settle_s": 90.0,
        "seeds": [1, 2],
        "policies": seed_summary(docs),
    }
    data = tmp_path / "data"
    data.mkdir()
    path = _write(data, "sim-fleet-seeds-comparison.json", doc)
    text = render([], [], [path])
    assert "## Simulator over seeds 1–2: fleet" in text
    # target − prima: SLO −4.0, −3.5 (mean −3.75, se 0.25); all −5.0, −4.5; inst-s +10, +20
    assert (
        "| target | 95.50 ± 0.71 | -3.75 ± 0.25 | 0/2 | 93.50 ± 0.71 | -4.75 ± 0.25 | "
        "- | 10.0 ± 0.0 | 130 ± 0 | +15 ± 5 | 100 ± 0 |" in text
    )


def test_results_page_names_a_file_it_does_not_know(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    _write(data, "notes.json", {})
    with pytest.raises(InputError, match=r"notes\.json: not a result file name"):
        data_files(data)


def test_results_page_refuses_a_sim_comparison_named_as_a_lab_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _write(data, "x-lab-comparison.json", _sim("prima-x", 90.0))
    with pytest.raises(InputError, match="not a `lab compare` comparison"):
        render([], data_files(data).lab, [])


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("validation", "points: required key is missing: is this a `prima validate` result?"),
        ("lab", "policies: not a `lab compare` comparison"),
        ("sim", "policies: not a `sim compare` comparison"),
        ("bench", "instances: required key is missing: is this a bench result"),
    ],
)
def test_results_page_names_a_file_of_another_kind(tmp_path: Path, kind: str, problem: str) -> None:
    bundle = _write(tmp_path, "bundle.json", {"format": "quell.prima.bundle", "version": 2})
    out = tmp_path / "p.md"
    outcome = run_quell("prima", "results", f"--{kind}", bundle, "--out", out)
    assert_refused(outcome, str(bundle), problem)  # not a KeyError's traceback
    assert not out.exists()


def test_results_page_names_a_result_file_without_a_key_it_reads(tmp_path: Path) -> None:
    bench = _write(tmp_path, "prima.json", {"instances": 10000, "goal_ms": 20.0})
    with pytest.raises(InputError) as info:
        render([], [], [], bench)
    assert info.value.source == str(bench)
    assert str(info.value.problems[0]) == (
        "prima_decision_ms_median: required key is missing: is this a bench result "
        "(bench/results/prima.json)?"
    )


MISSES: dict[str, Any] = {
    "scenario": "prima-fleet",
    "run_dir": "runs/x/prima",
    "target_rt_s": 0.125,
    "served": 1000,
    "misses": 40,
    "by_place": {
        "arrival": {"weight_above_0": 12, "weight_0": 0},
        "next": {"weight_above_0": 10, "weight_0": 8},
        "second": {"weight_above_0": 1, "weight_0": 3},
        "on": {"weight_above_0": 0, "weight_0": 1},
        "clear": {"weight_above_0": 5, "weight_0": 0},
    },
    "arrival_served": 20,
    "arrivals_served": 20,
    "arrivals_in_flight": 10,
    "stranded_intervals": 10,
    "stranded_misses": 8,
    "notes": [],
}


def test_results_page_shows_where_the_misses_fall_and_the_ceiling(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = _write(data, "fleet-misses.json", MISSES)
    found = data_files(data)
    assert found.misses == [path] and not found.sim
    text = render([], [], [], None, found.misses)
    assert "## Simulator, where the misses fall: prima-fleet" in text
    assert "| the next interval | 10 | 8 |" in text
    # 10 arrivals holding a request x 8 of 10 stranded intervals missed = 8 unavoidable misses:
    # settled 1 - 8 / (1000 - 20), all 1 - (8 + 12) / 1000
    assert "would still miss about 8 of them" in text
    assert "at most 99.18% settled and 98.00% over all instance-intervals" in text


def test_results_page_names_a_misses_file_without_a_key_it_reads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = _write(data, "fleet-misses.json", {k: v for k, v in MISSES.items() if k != "served"})
    with pytest.raises(InputError) as info:
        render([], [], [], None, data_files(data).misses)
    assert info.value.source == str(path)
    assert str(info.value.problems[0]).startswith("served: required key is missing")

"""``quell study consolidation``: the spec's checks, the sweep written point by point and
resumed, a lab point spoiled by steal measured again, the record's histograms and
curve shapes, and the results page in step with its data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from quell.errors import InputError
from quell.studies.consolidation import lab
from quell.studies.consolidation.point import ConsolidationMeasurement
from quell.studies.consolidation.results import Cell, histograms, render, shape
from quell.studies.consolidation.spec import PlannedPoint, load_study
from quell.studies.consolidation.sweep import lab_measure, run_study, sim_measure
from tests.cli.inprocess import assert_refused, run_quell

SMOKE = """\
name: smoke
caps: [[50, 50], [100, 100]]
const_users: [20]
inc_users: [0, 30]
ctp: [false, true]
seeds: [1, 2, 3]
think_time_seconds: 1.0
ramp_seconds: 1
measure_seconds: 3
sim:
  schedulers: [quantum, fluid]
"""


def spec(tmp_path: Path, text: str = SMOKE) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_every_problem_of_a_spec_is_named_at_once(tmp_path: Path) -> None:
    bad = spec(
        tmp_path,
        "name: 'a b'\ncaps: [[50, 150], [50]]\nconst_users: [1]\ninc_users: []\n"
        "seeds: [1, 2]\nbogus: 1\n",
    )
    with pytest.raises(InputError) as exc:
        load_study(bad)
    where = {p.location for p in exc.value.problems}
    assert where == {"name", "caps[0][1]", "caps[1]", "inc_users", "seeds", "bogus"}
    assert exc.value.source == str(bad)


def test_repeated_values_and_a_quantum_longer_than_the_period_are_refused(
    tmp_path: Path,
) -> None:
    text = SMOKE.replace("const_users: [20]", "const_users: [20, 20]").replace(
        "schedulers: [quantum, fluid]", "schedulers: [quantum]\n  quantum_seconds: 0.5"
    )
    with pytest.raises(InputError) as exc:
        load_study(spec(tmp_path, text))
    assert [str(p) for p in exc.value.problems] == [
        "const_users: 20 appears twice",
        "sim.quantum_seconds: must be at most sim.period_seconds",
    ]


def test_a_competitor_is_its_own_point_in_the_lab_and_refused_by_the_simulator(
    tmp_path: Path,
) -> None:
    path = spec(
        tmp_path,
        SMOKE.replace(
            "ctp: [false, true]", "competitor_cpu_pct: [0, 100]\ncompetitor_idle: [false, true]"
        ),
    )
    study = load_study(path)
    keys = sorted({p.key for p in study.points("lab")})
    assert keys[:3] == [
        "cap100-100_const20_inc0_I1",
        "cap100-100_const20_inc0_I1-idlespin100",
        "cap100-100_const20_inc0_I1-spin100",
    ]
    assert len(keys) == 2 * 2 * 3  # caps, Sys_Inc users, none / spinner / idle spinner
    with pytest.raises(InputError) as exc:
        study.points("sim")
    assert [p.location for p in exc.value.problems] == ["competitor_cpu_pct"]
    assert exc.value.source == str(path)
    with pytest.raises(InputError, match="no third process"):
        sim_measure(study.spec.sim)(study.points("lab")[1], tmp_path / "run")
    twice = SMOKE.replace("ctp: [false, true]", "competitor_cpu_pct: [50, 50]")
    with pytest.raises(InputError, match=r"competitor_cpu_pct: 50\.0 appears twice"):
        load_study(spec(tmp_path, twice))


def test_a_bad_spec_or_env_exits_2_with_a_message(tmp_path: Path) -> None:
    bad = spec(tmp_path, "name: x\n")
    assert_refused(run_quell("study", "consolidation", bad), str(bad), "required key is missing")
    assert_refused(run_quell("study", "consolidation", bad, "--env", "cloud"), "choose lab or sim")


def test_the_sweep_writes_each_point_and_resumes_without_measuring_again(tmp_path: Path) -> None:
    study = load_study(spec(tmp_path))
    measured: list[PlannedPoint] = []
    inner = sim_measure(study.spec.sim)

    def counting(p: PlannedPoint, run_dir: Path) -> ConsolidationMeasurement:
        # Each point's run directory exists, and every earlier point is already on disk.
        assert run_dir.is_dir()
        for earlier in measured:
            assert (earlier.run_dir(tmp_path / "runs") / "measurement.json").exists()
        measured.append(p)
        return inner(p, run_dir)

    points = study.points("sim")
    assert len(points) == 2 * 2 * 2 * 2 * 3  # schedulers, caps, Sys_Inc users, CTP, seeds
    assert [p.point.seed for p in points[:16]] == [1] * 16  # seed-major
    first = run_study(study, "sim", tmp_path / "runs", counting)
    assert len(measured) == len(points)
    again = run_study(study, "sim", tmp_path / "runs", counting)
    assert len(measured) == len(points)
    # NaN (Sys_Inc's response time with no users) is NaN again: compare as JSON text.
    assert [json.dumps(m.to_json()) for _, m in again] == [
        json.dumps(m.to_json()) for _, m in first
    ]
    # A directory of another spec is refused, not mixed in.
    other = load_study(spec(tmp_path, SMOKE.replace("think_time_seconds: 1.0", "")))
    with pytest.raises(InputError, match="another point"):
        run_study(other, "sim", tmp_path / "runs", counting)


def test_the_command_writes_the_record_figures_and_json(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    outcome = run_quell("study", "consolidation", spec(tmp_path), "--runs-dir", runs, "--json")
    assert outcome.code == 0, outcome.stderr
    doc = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert doc["points"] == 48
    assert len(doc["curves"]) == 8
    record = json.loads((runs / "record" / "smoke-sim.json").read_text())
    assert len(record["points"]) == 48
    hist = record["points"][0]["systems"]["const"]["cpu_hist"]
    assert sum(hist["100ms"]) == 30 and sum(hist["2s"]) == 1
    assert all(Path(f).stat().st_size > 1000 for f in doc["figures"])


def test_the_results_command_refuses_what_is_not_a_record_directory(tmp_path: Path) -> None:
    out, figures = tmp_path / "page.md", tmp_path / "img"
    missing = tmp_path / "nope"
    args = ("--out", out, "--figures", figures)
    refused = run_quell("study", "consolidation-results", "--data", missing, *args)
    assert_refused(refused, str(missing), "not a directory")
    bad = tmp_path / "records"
    bad.mkdir()
    (bad / "x.json").write_text(json.dumps({"format": "quell-consolidation-study"}))
    refused = run_quell("study", "consolidation-results", "--data", bad, *args)
    assert_refused(refused, "a record is not of a known form")
    assert not out.exists()


def test_histograms_count_each_sample_and_each_2s_mean() -> None:
    series = [0.0] * 10 + [100.0] * 10 + [52.0] * 20 + [7.0] * 3
    h = histograms(series)
    assert h["100ms"][0] == 10 and h["100ms"][19] == 10 and h["100ms"][10] == 20
    assert h["100ms"][1] == 3
    # 2 s means (0 * 10 + 100 * 10) / 20 = 50, in (45, 50], and 52; the last 3 samples are
    # not 2 s.
    assert h["2s"][9] == 1 and h["2s"][10] == 1
    assert sum(h["2s"]) == 2


def cell(inc: int, rts: list[float]) -> Cell:
    h = {"100ms": [0] * 20, "2s": [0] * 20}
    z = [0.0] * len(rts)
    return Cell(inc, len(rts), rts, rts, z, z, z, z, [0] * len(rts), [0] * len(rts), h, h)


def test_a_curve_is_non_monotonic_only_when_it_falls_from_an_inside_peak_beyond_the_spread() -> (
    None
):
    up_down = [cell(0, [0.01, 0.012]), cell(1, [0.05, 0.06]), cell(2, [0.02, 0.03])]
    s = shape(up_down)
    assert s.non_monotonic and s.peak_at == 1
    assert s.degradation == pytest.approx(0.055 / 0.011)
    noisy = [cell(0, [0.01, 0.012]), cell(1, [0.03, 0.06]), cell(2, [0.02, 0.04])]
    assert not shape(noisy).non_monotonic  # the spreads overlap
    rising = [cell(0, [0.01]), cell(1, [0.02]), cell(2, [0.03])]
    assert not shape(rising).non_monotonic


def test_the_results_page_is_in_step_with_its_data() -> None:
    page = render(Path("docs/results/data/consolidation"))
    assert page == Path("docs/results/consolidation.md").read_text()


def test_a_lab_point_spoiled_by_steal_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lab half stands in: its first measurement of a point had 9 % steal, the second 1 %.
    study = load_study(spec(tmp_path))
    planned = study.points("lab")[0]
    real = sim_measure(study.spec.sim)(planned, tmp_path)
    steals = iter([9.0, 1.0])
    dirs: list[Path] = []

    def measure_point(point: object, run_dir: Path) -> ConsolidationMeasurement:
        dirs.append(run_dir)
        return dataclasses.replace(real, env="lab", steal_pct=next(steals))

    monkeypatch.setattr(lab, "measure_point", measure_point)
    got = lab_measure()(planned, tmp_path / "p")
    assert got.steal_pct == 1.0
    assert dirs == [tmp_path / "p" / "attempt1", tmp_path / "p" / "attempt2"]
    assert got.notes[-1] == "measured 2 time(s): steal over 5 % in 1 (9.0 %)"

"""Model building end to end with a stand-in cell runner whose measurements follow the closed
forms of ``bundles``: the profile must recover them, resume without re-measuring, and respect
the training rule."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from quell.core.observation import Observation, Snapshot
from quell.errors import InputError
from quell.experiment.run import prepare_run_dir
from quell.models.capacity import InterferenceModel
from quell.probe.severity import PROBE_COUNT_KEY, PROBE_KEY
from quell.scenario.model import Iperf3, Scenario
from quell.studies.prima.profile import (
    CellResult,
    Profiler,
    ProfileSpec,
    load_profile_spec,
    measure,
    pool,
)
from quell.studies.prima.validate import summary, validate
from tests.prima import bundles as sb

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "scenarios" / "prima" / "profile-file-lab.yaml"


class ClosedFormRunner:
    """Writes a run whose observations are the closed forms at the cell's U and interference."""

    def __init__(self, out: Path, steal: dict[int, float] | None = None) -> None:
        self.out = out
        self.calls = 0
        self.steal = steal or {}
        """CPU steal ratio of the machine during given calls; those runs' probes and
        responses are 50 % slower, as steal makes them."""

    @staticmethod
    def r_iso(u: float) -> float:
        return (sb.R_ISO0 + sb.R_ISO_SLOPE * u) * (1 + sb.sf_of_total(u))

    def __call__(self, scenario: Scenario, path: Path) -> Path:
        self.calls += 1
        link = scenario.hosts[0].link_mbit or 100.0
        rate = scenario.workload.arrival.rate_rps  # type: ignore[union-attr]
        u = rate * 102400 * 8 / (link * 1e6) * 100
        noise = sum(
            a.bitrate_mbit * a.streams
            for a in scenario.antagonists
            if isinstance(a, Iperf3) and a.bitrate_mbit and scenario.events
        )
        total = u + 100 * noise / link
        # The probe slows with the link's total load; its own service's load is part of
        # R_iso(U), so the SF a probe reports is the slowdown beyond that.
        slow = (1 + sb.sf_of_total(total)) / (1 + sb.sf_of_total(u))
        sf = slow - 1
        rng = np.random.default_rng(self.calls)
        run_dir = self.out / f"run{self.calls}"
        store = prepare_run_dir(run_dir, scenario, None, "sim")
        for k in range(1, int(scenario.duration_s) + 1):
            stolen = 1.5 if self.calls in self.steal else 1.0
            probe = self.r_iso(u) * slow * (1 + rng.normal(0, 0.01)) * stolen
            o = Observation(
                time_s=float(k),
                instance_id="i1",
                interval_s=1.0,
                requests=10,
                mean_rt_seconds=sb.rt(u, sf) * stolen,
                util_pct=u,
                steal_ratio=self.steal.get(self.calls),
                extra={"probe_rt_seconds": probe, "link_util_pct": total},
            )
            store.add_snapshot(Snapshot(float(k), "sim", {"i1": o}))
        store.commit()
        store.close()
        return run_dir


def grid_cells(spec: ProfileSpec) -> int:
    """Cells of the spec's U × interference grid whose offered total stays within
    ``max_total_util_pct`` of the profile's 100 Mbit/s link."""
    return sum(
        u + i <= spec.max_total_util_pct
        for u in spec.util_levels_pct
        for i in spec.interference_mbit
    )


def test_profile_recovers_the_models_and_resumes(tmp_path: Path) -> None:
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 1})
    runner = ClosedFormRunner(tmp_path / "runs")
    bundle = Profiler(spec, base, tmp_path / "p", runner).run()
    n_training = len(spec.util_levels_pct)  # 12 samples at 1 % noise meet the rule at once
    cells = grid_cells(spec)
    assert cells >= 24
    assert runner.calls == n_training + cells
    assert bundle.probe_table.converged_.all()
    assert bundle.probe_table.r_iso_s_ == pytest.approx(
        [runner.r_iso(u) for u in spec.util_levels_pct], rel=0.01
    )
    # The measured cells lie on the closed forms, so held-out points are predicted closely.
    q = bundle.rtm.predict(np.array([35.0]), np.array([1.0]))
    assert q.value[0] == pytest.approx(sb.rt(35.0, 1.0), rel=0.02)
    # A second profile over the same directory measures nothing again.
    again = ClosedFormRunner(tmp_path / "runs2")
    Profiler(spec, base, tmp_path / "p", again).run()
    assert again.calls == 0
    lines = (tmp_path / "p" / "cells.jsonl").read_text().splitlines()
    assert len(lines) == n_training + cells
    assert {json.loads(x)["kind"] for x in lines} == {"training", "model"}
    # Validation on the holdout points: errors like Table II, here small by construction.
    cells = Profiler(spec, base, tmp_path / "p", runner).holdout(bundle.probe_table)
    s = summary(validate(bundle, cells))
    assert s["points"] == 10
    assert s["rtm_mape_pct"] < 3.0  # type: ignore[operator]
    # IM's accuracy is a property of the world (is SF a function of U_total alone?); here
    # check that validation compares each point's SF with IM at its measured total load.
    rows = validate(bundle, cells)
    for r in rows:
        assert r.sf_pred == pytest.approx(
            bundle.im.predict(np.array([r.total_util_pct]), np.array([r.util_pct])).value[0]
        )
    assert s["im_sf_points"] == sum(r.sf >= 0.1 for r in rows)
    # In this world the probe's SF depends on U as well as U_total (its slowdown beyond
    # R_iso(U)): one IM curve per utilisation level follows it, the paper's single curve
    # over U_total cannot.
    pts = bundle.data.im_points
    one = InterferenceModel(bundle.data.im_resolution_pct).fit(
        [p[0] for p in pts], [p[1] for p in pts]
    )
    single = np.mean(
        [
            abs(one.predict(np.array([r.total_util_pct])).value[0] - r.sf) / r.sf
            for r in rows
            if r.sf >= 0.1
        ]
    )
    assert s["im_sf_mape_pct"] < 12.0 < 100 * single


def test_a_run_with_cpu_steal_is_measured_again_and_kept_aside(tmp_path: Path) -> None:
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 1})
    # The first training run (U 10 %) has 3 % steal, the first model cell's 0.4 % (under 0.5 %).
    n_training = len(spec.util_levels_pct)
    runner = ClosedFormRunner(tmp_path / "runs", steal={1: 0.03, n_training + 2: 0.004})
    profiler = Profiler(spec, base, tmp_path / "p", runner)
    bundle = profiler.run()
    assert runner.calls == n_training + grid_cells(spec) + 1
    assert profiler.remeasured == 1
    assert profiler.over_steal == []
    # Kept, it would have read R_iso(10 %) 50 % high.
    assert bundle.probe_table.r_iso_s_ == pytest.approx(
        [runner.r_iso(u) for u in spec.util_levels_pct], rel=0.01
    )
    (stolen,) = [json.loads(x) for x in (tmp_path / "p" / "stolen.jsonl").read_text().splitlines()]
    assert (stolen["kind"], stolen["repetition"], stolen["steal_pct"]) == ("training", 0, 3.0)
    assert stolen["run_dir"].endswith("run1")
    kept = [json.loads(x) for x in (tmp_path / "p" / "cells.jsonl").read_text().splitlines()]
    assert kept[0]["run_dir"].endswith("run2")
    assert kept[0]["steal_pct"] is None
    assert [x["steal_pct"] for x in kept if x["steal_pct"] is not None] == [pytest.approx(0.4)]
    # Cells recorded before steal was kept (no steal_pct) still load; nothing is measured again.
    (tmp_path / "p" / "cells.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in x.items() if k != "steal_pct"}) + "\n" for x in kept)
    )
    again = ClosedFormRunner(tmp_path / "runs2")
    Profiler(spec, base, tmp_path / "p", again).run()
    assert again.calls == 0


def test_when_every_attempt_has_steal_the_least_stolen_is_kept_and_named(tmp_path: Path) -> None:
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 1, "max_attempts": 3})
    runner = ClosedFormRunner(tmp_path / "runs", steal={1: 0.05, 2: 0.02, 3: 0.04})
    profiler = Profiler(spec, base, tmp_path / "p", runner)
    profiler.train()
    assert runner.calls == len(spec.util_levels_pct) + 2
    assert profiler.remeasured == 2
    assert profiler.over_steal == ["training/10/0/0"]
    stolen = (tmp_path / "p" / "stolen.jsonl").read_text().splitlines()
    assert [json.loads(x)["steal_pct"] for x in stolen] == pytest.approx([5.0, 2.0, 4.0])
    first = json.loads((tmp_path / "p" / "cells.jsonl").read_text().splitlines()[0])
    assert (first["run_dir"].rsplit("/", 1)[1], first["steal_pct"]) == ("run2", 2.0)


def test_repetitions_pool_into_one_model_point(tmp_path: Path) -> None:
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 2})
    runner = ClosedFormRunner(tmp_path / "runs")
    bundle = Profiler(spec, base, tmp_path / "p", runner).run()
    cells_in_grid = grid_cells(spec)
    assert runner.calls == len(spec.util_levels_pct) + 2 * cells_in_grid
    assert len(bundle.data.rtm_points) == len(bundle.data.im_points) == cells_in_grid
    a = CellResult("model", 10, 0, 0, 10.0, 20.0, [1.0, 2.0], 0.010, 10, "a")
    b = CellResult("model", 10, 0, 1, 12.0, 24.0, [3.0], 0.040, 30, "b")
    p = pool([a, b])
    assert (p.util_pct, p.total_util_pct, p.probe_s, p.requests) == (
        11.0,
        22.0,
        [1.0, 2.0, 3.0],
        40,
    )
    assert p.mean_rt_s == pytest.approx((0.010 * 10 + 0.040 * 30) / 40)
    # Held-out points are pooled the same way: two runs each, one row each.
    before = runner.calls
    cells = Profiler(spec, base, tmp_path / "p", runner).holdout(bundle.probe_table)
    assert runner.calls - before == 2 * len(spec.holdout)
    assert len(cells) == len(spec.holdout)
    assert {p.cell.repetition for p in cells} == {-1}
    assert cells[0].cell.requests == 2 * 10 * int(spec.cell_s)  # 10 a second after warm-up
    # Each point keeps its two runs and their SFs, whose mean is near the pooled SF.
    assert [len(p.reps) for p in cells] == [2] * len(spec.holdout)
    assert [r.repetition for r in cells[0].reps] == [0, 1]
    for p in cells:
        assert sum(p.rep_sf) / 2 == pytest.approx(p.sf, abs=0.01)
    # The model's cells, read back from cells.jsonl, the same way: one point per cell.
    model = Profiler(spec, base, tmp_path / "p", runner).model_points(bundle.probe_table)
    assert len(model) == cells_in_grid
    assert {tuple(r.repetition for r in p.reps) for p in model} == {(0, 1)}
    assert runner.calls == before + 2 * len(spec.holdout)  # nothing measured again
    # Run 1 of every cell and every held-out point was measured before run 2 of any, so a
    # profile stopped part-way has its runs spread over the whole grid.
    log = [json.loads(x) for x in (tmp_path / "p" / "cells.jsonl").read_text().splitlines()]
    for kind, n in (("model", cells_in_grid), ("holdout", len(spec.holdout))):
        assert [x["repetition"] for x in log if x["kind"] == kind] == [0] * n + [1] * n


def test_a_profile_spec_with_problems_lists_them_all(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nworkload: w\ninstance_type: t\nscenario: missing.yaml\n"
        "util_levels_pct: [10]\ninterference_mbit: [0, 10]\ncell_s: -1\n"
    )
    with pytest.raises(InputError) as info:
        load_profile_spec(bad)
    msg = str(info.value)
    assert "util_levels_pct" in msg and "cell_s" in msg


@pytest.mark.parametrize(
    "path",
    sorted(p for p in SPEC.parent.glob("profile-*.yaml") if not p.name.startswith("profile-base")),
    ids=lambda p: p.name,
)
def test_every_shipped_profile_spec_loads_with_its_base_scenario(path: Path) -> None:
    spec, base = load_profile_spec(path)
    assert grid_cells(spec) >= 2 * len(spec.util_levels_pct)
    assert base.instances and base.probe is not None
    for point in spec.holdout:  # held-out points lie inside the measured grid, off its knots
        assert min(spec.util_levels_pct) < point.util_pct < max(spec.util_levels_pct)
        assert (point.util_pct, point.interference_mbit) not in {
            (u, i) for u in spec.util_levels_pct for i in spec.interference_mbit
        }


def test_a_cell_counts_every_probe_download_of_an_interval(tmp_path: Path) -> None:
    # Two downloads averaged in one interval count twice in the cell's probe times, so the
    # cell's mean is over downloads (0.2 and 0.05 s, then 0.05 s: 0.1 s), not intervals.
    _, base = load_profile_spec(SPEC)
    store = prepare_run_dir(tmp_path / "run", base, None, "sim")
    for k, extra in enumerate(
        [
            {PROBE_KEY: 0.3},  # in the warm-up: left out
            {PROBE_KEY: 0.125, PROBE_COUNT_KEY: 2.0, "link_util_pct": 40.0},
            {"link_util_pct": 40.0},
            {PROBE_KEY: 0.05, PROBE_COUNT_KEY: 1.0, "link_util_pct": 40.0},
        ],
        start=1,
    ):
        o = Observation(float(k), "i1", 1.0, requests=1, mean_rt_seconds=0.01, util_pct=20.0)
        store.add_snapshot(Snapshot(float(k), "sim", {"i1": replace(o, extra=extra)}))
    store.commit()
    store.close()
    _, _, probes, _, _, _ = measure(tmp_path / "run", warmup_s=1.0)
    assert probes == [0.125, 0.125, 0.05]
    assert np.mean(probes) == pytest.approx(0.1)


def test_a_profile_spec_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(SPEC.read_bytes() + b"# caf\xe9\n")
    with pytest.raises(InputError) as info:
        load_profile_spec(spec)
    assert info.value.source == str(spec)
    assert "not UTF-8 text: byte 0xe9" in str(info.value)


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ('"base\\0.yaml"', "the path contains a NUL byte"),
        ("/dev/zero", "it is a character device, not a regular file"),
        ("../../../../../../../../etc/passwd", "a scenario must be a mapping of keys to values"),
    ],
    ids=["nul", "device", "traversal"],
)
def test_a_profile_specs_base_scenario_is_read_as_a_scenario(
    tmp_path: Path, base: str, problem: str
) -> None:
    spec = tmp_path / "spec.yaml"
    text = SPEC.read_text()
    line = next(x for x in text.splitlines() if x.startswith("scenario:"))
    spec.write_text(text.replace(line, f"scenario: {base}"))
    with pytest.raises(InputError) as info:
        load_profile_spec(spec)
    assert problem in str(info.value)


def test_a_cell_log_with_lines_that_are_no_cells_is_named(tmp_path: Path) -> None:
    """A profile killed while appending a cell leaves half a line; resuming names it (it was a
    JSONDecodeError) and measures nothing."""
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 1})
    Profiler(spec, base, tmp_path / "p", ClosedFormRunner(tmp_path / "runs")).train()
    log = tmp_path / "p" / "cells.jsonl"
    first, second, *_ = log.read_text().splitlines()
    wrong = json.loads(second) | {"mean_rt_s": "fast"}
    log.write_text(f"{first}\n{json.dumps(wrong)}\n{second[:40]}\n")
    again = ClosedFormRunner(tmp_path / "runs2")
    with pytest.raises(InputError) as info:
        Profiler(spec, base, tmp_path / "p", again)
    assert info.value.source == str(log)
    assert [p.location for p in info.value.problems] == ["line 2", "line 3"]
    assert "mean_rt_s: Input should be a valid number" in str(info.value.problems[0])
    assert "Invalid JSON: EOF while parsing" in str(info.value.problems[1])
    assert again.calls == 0


def test_clean_cells_can_enter_the_models_at_sf_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every cell's probe reads SF 0.03 above i / 100 (i its neighbour's Mbit/s; 0.03 the
    # isolation table's noise, say). With clean_cells_sf: zero the cells without a neighbour
    # (one per utilisation level) enter the RTM and the IM at SF 0, with their measured U,
    # U_total and RT; the others keep 0.03 + i / 100.
    spec, base = load_profile_spec(SPEC)
    spec = spec.model_copy(update={"repetitions": 1})
    monkeypatch.setattr(
        Profiler, "cell_sf", staticmethod(lambda table, r: 0.03 + r.interference_mbit / 100)
    )
    runner = ClosedFormRunner(tmp_path / "runs")
    measured = Profiler(spec, base, tmp_path / "p", runner).run().data
    zero_spec = spec.model_copy(update={"clean_cells_sf": "zero"})
    zero = Profiler(zero_spec, base, tmp_path / "p", runner).run().data  # the same cells
    assert len(zero.rtm_points) == len(measured.rtm_points) == grid_cells(spec)
    assert min(p[1] for p in measured.rtm_points) == pytest.approx(0.03)
    clean = [p for p in zero.rtm_points if p[1] == 0.0]
    assert len(clean) == len(spec.util_levels_pct)
    was = {round(p[0], 6): p for p in measured.rtm_points if p[1] == pytest.approx(0.03)}
    assert sorted(was) == sorted(round(p[0], 6) for p in clean)
    for u, _, rt in clean:
        assert was[round(u, 6)][2] == rt  # the same cell, only its SF changed
    assert sorted(p[1] for p in zero.rtm_points if p[1] > 0) == sorted(
        p[1] for p in measured.rtm_points if p[1] > 0.031
    )
    assert sum(p[1] == 0.0 for p in zero.im_points) == len(spec.util_levels_pct)

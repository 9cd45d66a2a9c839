"""An interval's probe reading keeps every download that completed in it; a probe table's spread
per level, and the SF estimator's confidence gate on it, against hand-computed figures."""

from __future__ import annotations

import numpy as np
import pytest

from quell.probe.severity import (
    PROBE_COUNT_KEY,
    PROBE_KEY,
    probe_extra,
    probe_samples,
)


def test_an_interval_reports_the_mean_and_count_of_its_downloads() -> None:
    assert probe_extra([0.2, 0.05]) == {PROBE_KEY: 0.125, PROBE_COUNT_KEY: 2.0}
    assert probe_extra([]) == {}


def test_probe_samples_weigh_each_interval_by_its_downloads() -> None:
    extras = [
        {PROBE_KEY: 0.125, PROBE_COUNT_KEY: 2.0},
        {"link_util_pct": 40.0},  # no download completed
        {PROBE_KEY: 0.05},  # recorded before the count was kept: one download
    ]
    samples = probe_samples(extras)
    assert samples == [0.125, 0.125, 0.05]
    assert np.mean(samples) == pytest.approx((0.2 + 0.05 + 0.05) / 3)


def test_a_jump_in_the_probe_time_starts_the_window_again() -> None:
    from quell.probe.severity import SeverityEstimator
    from tests.prima import bundles as sb

    r_iso = sb.R_ISO0 + sb.R_ISO_SLOPE * 20.0  # at U 20 %
    u = np.array([20.0])

    def feed(est: SeverityEstimator, sfs: list[float]) -> list[float]:
        out = []
        for sf in sfs:
            est.add(["i1"], np.array([r_iso * (1.0 + sf)]), u)
            out.append(float(est.get(["i1"])[0]))
        return out

    sfs = [0.1, 0.2, 1.2, 3.0, 2.0, 0.0]
    jumped = feed(SeverityEstimator(sb.probe_table(), 3, jump=1.0), sfs)
    # 0.1; mean 0.15; 1 + 1.2 = 2.2 is not above (1 + 0.15) x 2 = 2.3: mean 0.5; 1 + 3.0 = 4.0
    # is above (1 + 0.5) x 2 = 3.0: the window starts again at 3.0; then 2.5; a fall goes
    # through the window: (3 + 2 + 0) / 3
    assert jumped == pytest.approx([0.1, 0.15, 0.5, 3.0, 2.5, 5.0 / 3.0])
    plain = feed(SeverityEstimator(sb.probe_table(), 3), sfs)
    assert plain == pytest.approx([0.1, 0.15, 0.5, 4.4 / 3.0, 6.2 / 3.0, 5.0 / 3.0])


def test_a_table_s_spread_is_each_level_s_sample_deviation_over_its_mean() -> None:
    from quell.probe.table import ProbeTable, TrainingLevel

    low = (0.9, 1.0, 1.1, 1.0)  # sd 0.08165 (ddof 1) over mean 1.0
    high = (1.0, 2.0, 3.0)  # sd 1 over mean 2
    table = ProbeTable().fit(
        [TrainingLevel(40.0, high), TrainingLevel(10.0, low), TrainingLevel(70.0, (5.0,))]
    )
    spread = table.spread_levels()
    assert spread[:2] == pytest.approx([np.std(low, ddof=1) / 1.0, 0.5], rel=1e-12)
    assert spread[2] == 0.0  # one sample: no spread known


def test_with_a_confidence_only_an_estimate_above_z_standard_errors_counts() -> None:
    from quell.probe.severity import SeverityEstimator
    from quell.probe.table import ProbeTable, TrainingLevel

    # Two levels whose samples scatter by 8.9 % of their mean (sd 0.0894 over mean 1.0).
    level = (0.9, 1.1, 0.9, 1.1, 1.0, 1.0)
    sd = float(np.std(level, ddof=1))
    table = ProbeTable().fit([TrainingLevel(10.0, level), TrainingLevel(50.0, level)])
    u = np.array([30.0])

    def feed(est: SeverityEstimator, sfs: list[float]) -> list[float]:
        out = []
        for sf in sfs:
            est.add(["i1"], np.array([1.0 + sf]), u)
            out.append(float(est.get(["i1"])[0]))
        return out

    gated = SeverityEstimator(table, 4, confidence_z=2.0)
    # standard error of a mean of k samples: sd √k / k; z = 2: 2 sd, then 2 sd / √2, ...
    got = feed(gated, [0.10, 0.10, 0.10, 0.10, 0.12, 0.12, 0.12])
    thresholds = [2 * sd / np.sqrt(k) for k in (1, 2, 3, 4, 4, 4, 4)]
    assert thresholds[3] == pytest.approx(sd)  # four samples: one sd, 0.0894
    means = [0.10, 0.10, 0.10, 0.10, 0.105, 0.11, 0.115]
    assert got == pytest.approx(
        [m if m > t else 0.0 for m, t in zip(means, thresholds, strict=True)]
    )
    assert got == pytest.approx([0.0, 0.0, 0.0, 0.10, 0.105, 0.11, 0.115])
    # what the decision log shows: the last window before the gate, and its threshold
    window, gate = gated.gate(["i1", "i9"])
    assert window[0] == pytest.approx(0.115) and gate[0] == pytest.approx(sd)
    assert np.isnan(window[1]) and np.isnan(gate[1])  # never reported
    gated.add(["i2"], np.array([1.10]), u)
    gated.forget({"i2"})
    window, gate = gated.gate(["i2", "i1"])
    assert window[0] == pytest.approx(0.10) and gate[0] == pytest.approx(2 * sd)
    assert np.isnan(window[1])  # forgotten
    plain = feed(SeverityEstimator(table, 4), [0.10, 0.10, 0.10])
    assert np.isnan(SeverityEstimator(table, 4).gate(["i1"])[1]).all()  # gate off
    assert plain == pytest.approx([0.10, 0.10, 0.10])  # without it every estimate counts
    with pytest.raises(ValueError, match="confidence_z"):
        SeverityEstimator(table, 4, confidence_z=-1.0)

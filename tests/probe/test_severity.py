"""The SF estimator's median of the last samples equals numpy's nanmedian to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from quell.probe.severity import _median_of_samples


@pytest.mark.parametrize("window", [2, 3, 4, 5])
def test_median_of_samples_is_nanmedian_bit_for_bit(window: int) -> None:
    rng = np.random.default_rng(window)
    block = rng.choice([0.0, 0.1, 0.25, 1.0 / 3.0, 2.7], (500, window)) + rng.uniform(
        0, 1e-3, (500, window)
    )
    block[rng.random((500, window)) < 0.5] = 0.0
    seen = rng.integers(1, window + 1, 500)  # rows not yet full keep NaN in their empty slots
    for k, n in enumerate(seen.tolist()):
        block[k, n:] = np.nan
    got = _median_of_samples(block)
    want = np.nanmedian(block, axis=1)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("window", [3, 5])
def test_median_of_full_windows_is_nanmedian_bit_for_bit(window: int) -> None:
    block = np.random.default_rng(window).uniform(0.0, 3.0, (500, window))
    assert _median_of_samples(block).tobytes() == np.nanmedian(block, axis=1).tobytes()

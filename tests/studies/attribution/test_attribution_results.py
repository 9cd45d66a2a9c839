"""Soroban's results page: drawn from results.json alone, and the page in docs/results kept in
step with the data there."""

from __future__ import annotations

from pathlib import Path

from quell.studies.attribution.results import render

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "docs" / "results" / "data" / "attribution"
PAGE = ROOT / "docs" / "results" / "attribution.md"


def test_the_results_page_is_the_one_its_data_gives() -> None:
    assert PAGE.read_text() == render(DATA, "docs/results/data/attribution")

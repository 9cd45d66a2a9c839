"""Fixtures: the hand-built run of ``report_run.py`` in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from report_run import fill_run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    fill_run(path).close()
    return path


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "run", **kwargs: object) -> Path:
        path = tmp_path / name
        fill_run(path, **kwargs).close()  # type: ignore[arg-type]
        return path

    return make

"""set_cpu_cap on fake v1 and v2 trees: the exact text written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quell.actuate import set_cpu_cap
from quell.errors import ComponentError, InputError
from quell.signals import CgroupLayout, read_cpu_cap


def _v1(tmp_path: Path) -> CgroupLayout:
    group = tmp_path / "cpu" / "quell" / "antagonist"
    group.mkdir(parents=True)
    (group / "cpu.cfs_period_us").write_text("100000\n")
    (group / "cpu.cfs_quota_us").write_text("-1\n")
    return CgroupLayout("v1", tmp_path, tmp_path / "cpu", None, None, None)


def _v2(tmp_path: Path) -> CgroupLayout:
    (tmp_path / "quell" / "antagonist").mkdir(parents=True)
    (tmp_path / "quell" / "antagonist" / "cpu.max").write_text("max 100000\n")
    return CgroupLayout("v2", tmp_path, tmp_path, tmp_path, tmp_path, tmp_path)


def test_v1_cap_and_uncap(tmp_path: Path) -> None:
    layout = _v1(tmp_path)
    group = tmp_path / "cpu" / "quell" / "antagonist"
    set_cpu_cap(layout, "quell/antagonist", 0.5)
    assert (group / "cpu.cfs_period_us").read_text() == "100000\n"
    assert (group / "cpu.cfs_quota_us").read_text() == "50000\n"
    set_cpu_cap(layout, "quell/antagonist", 1.25, period_us=10_000)
    assert (group / "cpu.cfs_period_us").read_text() == "10000\n"
    assert (group / "cpu.cfs_quota_us").read_text() == "12500\n"
    set_cpu_cap(layout, "quell/antagonist", None)
    assert (group / "cpu.cfs_quota_us").read_text() == "-1\n"
    assert (group / "cpu.cfs_period_us").read_text() == "100000\n"


def test_v2_cap_and_uncap(tmp_path: Path) -> None:
    layout = _v2(tmp_path)
    cpu_max = tmp_path / "quell" / "antagonist" / "cpu.max"
    set_cpu_cap(layout, "quell/antagonist", 2.0)
    assert cpu_max.read_text() == "200000 100000\n"
    set_cpu_cap(layout, "quell/antagonist", None, period_us=50_000)
    assert cpu_max.read_text() == "max 50000\n"


@pytest.mark.parametrize(
    ("cpus", "period_us", "locations"),
    [
        (0.0, 100_000, ["cpus"]),
        (-1.0, 100_000, ["cpus"]),
        (float("nan"), 100_000, ["cpus"]),
        (0.005, 100_000, ["cpus"]),  # 500 µs quota: below the kernel minimum
        (4.0, 500, ["period_us"]),
        (0.0, 2_000_000, ["period_us", "cpus"]),
    ],
)
def test_invalid_arguments_write_nothing(
    tmp_path: Path, cpus: float, period_us: int, locations: list[str]
) -> None:
    layout = _v2(tmp_path)
    with pytest.raises(InputError) as info:
        set_cpu_cap(layout, "quell/antagonist", cpus, period_us)
    assert [p.location for p in info.value.problems] == locations
    assert (tmp_path / "quell" / "antagonist" / "cpu.max").read_text() == "max 100000\n"


def test_missing_group_is_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="nope"):
        set_cpu_cap(_v1(tmp_path), "nope", 1.0)


@pytest.mark.parametrize("tree", [_v1, _v2])
def test_a_cap_set_reads_back_in_cpus(tmp_path: Path, tree: Callable[[Path], CgroupLayout]) -> None:
    layout = tree(tmp_path)
    for cpus, period_us in ((0.5, 100_000), (1.25, 10_000), (None, 100_000)):
        set_cpu_cap(layout, "quell/antagonist", cpus, period_us)
        assert read_cpu_cap(layout, "quell/antagonist") == cpus


def test_shares_on_v1_and_weight_on_v2(tmp_path: Path) -> None:
    from quell.actuate.cgroup import set_cpu_shares

    v1 = _v1(tmp_path / "a")
    set_cpu_shares(v1, "quell/antagonist", 10240)
    assert (tmp_path / "a" / "cpu" / "quell" / "antagonist" / "cpu.shares").read_text() == "10240\n"
    v2 = _v2(tmp_path / "b")
    set_cpu_shares(v2, "quell/antagonist", 10240)
    assert (tmp_path / "b" / "quell" / "antagonist" / "cpu.weight").read_text() == "1000\n"
    with pytest.raises(InputError):
        set_cpu_shares(v1, "quell/antagonist", 1)
    with pytest.raises(ComponentError):
        set_cpu_shares(v1, "quell/none", 1024)

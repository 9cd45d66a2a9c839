"""cgroup layout detection and readers.

``v1-hybrid`` holds files copied from this machine (cgroup v1 cpu/cpuacct/cpuset plus cgroup2 at
``unified``) for a group ``quell-fixture`` that ran a CPU loop capped at 20 ms per 100 ms.
``v2`` is a hand-built pure cgroup2 tree in the documented format.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from quell.errors import ComponentError, InputError, PrerequisiteError
from quell.signals import (
    CgroupLayout,
    Pressure,
    Throttling,
    detect_layout,
    read_cpu_cap,
    read_cpu_usage_ns,
    read_group_pressure,
    read_throttling,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cgroup"
HYBRID = FIXTURES / "v1-hybrid"
V2 = FIXTURES / "v2"
REAL_MOUNTS = (FIXTURES / "mounts.txt").read_text()  # cgroup lines of /proc/self/mounts here


def test_detect_hybrid_by_probing() -> None:
    assert detect_layout(HYBRID, mounts="") == CgroupLayout(
        version="v1",
        root=HYBRID,
        cpu=HYBRID / "cpu",
        cpuacct=HYBRID / "cpuacct",
        cpuset=HYBRID / "cpuset",
        unified=HYBRID / "unified",
    )


def test_detect_hybrid_from_real_mount_table(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    shutil.copytree(HYBRID, root)
    # the controllers live under unusual names; only the mount table says where
    (root / "cpu").rename(root / "sched")
    (root / "unified").rename(root / "v2")
    mounts = (
        REAL_MOUNTS.replace("/sys/fs/cgroup/cpu ", f"{root}/sched ")
        .replace("/sys/fs/cgroup/unified ", f"{root}/v2 ")
        .replace("/sys/fs/cgroup", str(root))
    )
    layout = detect_layout(root, mounts=mounts)
    assert layout.version == "v1"
    assert layout.cpu == root / "sched"
    assert layout.cpuacct == root / "cpuacct"
    assert layout.unified == root / "v2"


def test_detect_combined_cpu_cpuacct_mount(tmp_path: Path) -> None:
    combined = tmp_path / "cpu,cpuacct"
    combined.mkdir()
    for name in ("cpu.cfs_quota_us", "cpu.shares", "cpuacct.usage"):
        (combined / name).write_text("0\n")
    mounts = f"cgroup {combined} cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0\n"
    for text in (mounts, ""):  # from the mount table, and by probing the conventional name
        layout = detect_layout(tmp_path, mounts=text)
        assert layout.cpu == combined
        assert layout.cpuacct == combined
        assert layout.cpuset is None
        assert layout.unified is None


def test_mount_point_with_escaped_space(tmp_path: Path) -> None:
    cpu = tmp_path / "my cpu"
    cpu.mkdir()
    (cpu / "cpu.shares").write_text("1024\n")
    mounts = f"cgroup {tmp_path}/my\\040cpu cgroup rw,cpu 0 0\n"
    assert detect_layout(tmp_path, mounts=mounts).cpu == cpu


def test_detect_v2() -> None:
    assert detect_layout(V2, mounts="") == CgroupLayout("v2", V2, V2, V2, V2, V2)


def test_no_cpu_controller_is_prerequisite_error(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()  # an empty directory is not a mounted controller
    with pytest.raises(PrerequisiteError):
        detect_layout(tmp_path, mounts="")
    (tmp_path / "cgroup.controllers").write_text("memory io pids\n")
    with pytest.raises(PrerequisiteError, match="cpu controller"):
        detect_layout(tmp_path, mounts="")


def test_detect_this_machine() -> None:
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        pytest.skip(
            "reads the live layout of a cgroup v1 + unified machine (the lab's target); "
            "this machine has no v1 cpu controller"
        )
    layout = detect_layout()
    assert layout.version == "v1"
    assert layout.cpu == Path("/sys/fs/cgroup/cpu")
    assert layout.unified == Path("/sys/fs/cgroup/unified")


def test_hybrid_readers_exact() -> None:
    layout = detect_layout(HYBRID, mounts="")
    assert read_cpu_usage_ns(layout, "quell-fixture") == 196018945  # cpuacct.usage
    assert read_throttling(layout, "quell-fixture") == Throttling(13, 8, 453040126)
    assert read_group_pressure(layout, "quell-fixture", "cpu") == Pressure(0.0, 861531, 0.0, 861452)
    assert read_group_pressure(layout, "/quell-fixture/", "io") == Pressure(0.0, 0, 0.0, 0)


def test_hybrid_usage_falls_back_to_unified_without_cpuacct() -> None:
    layout = detect_layout(HYBRID, mounts="")
    no_acct = CgroupLayout("v1", HYBRID, layout.cpu, None, layout.cpuset, layout.unified)
    # unified/quell-fixture/cpu.stat usage_usec 196018
    assert read_cpu_usage_ns(no_acct, "quell-fixture") == 196018000


def test_v2_readers_exact() -> None:
    layout = detect_layout(V2, mounts="")
    assert read_cpu_usage_ns(layout, "quell/tenant-a") == 1109807 * 1000
    assert read_throttling(layout, "quell/tenant-a") == Throttling(27, 23, 580123 * 1000)
    assert read_group_pressure(layout, "quell/tenant-a", "cpu") == Pressure(
        5.97, 1132692, 4.02, 803311
    )
    assert read_group_pressure(layout, "quell/tenant-a", "io") is None  # no io.pressure file
    assert read_cpu_usage_ns(layout, "") == 900000000 * 1000  # the root group


def test_missing_group_is_component_error() -> None:
    layout = detect_layout(HYBRID, mounts="")
    with pytest.raises(ComponentError, match="no-such-group"):
        read_cpu_usage_ns(layout, "no-such-group")
    with pytest.raises(ComponentError):
        read_throttling(layout, "no-such-group")
    assert read_group_pressure(layout, "no-such-group", "cpu") is None


def test_v2_cpu_stat_without_bandwidth_keys(tmp_path: Path) -> None:
    shutil.copytree(V2, tmp_path / "v2")
    stat = tmp_path / "v2" / "quell" / "tenant-a" / "cpu.stat"
    stat.write_text("usage_usec 5\nuser_usec 5\nsystem_usec 0\n")
    layout = detect_layout(tmp_path / "v2", mounts="")
    with pytest.raises(ComponentError, match="nr_periods"):
        read_throttling(layout, "quell/tenant-a")


def test_group_path_cannot_escape() -> None:
    layout = detect_layout(V2, mounts="")
    with pytest.raises(InputError):
        read_cpu_usage_ns(layout, "../etc")


def test_cpu_caps_in_cpus_and_none_when_uncapped(tmp_path: Path) -> None:
    # quell-fixture was capped at 20 ms per 100 ms; tenant-a has cpu.max "50000 100000"
    assert read_cpu_cap(detect_layout(HYBRID, mounts=""), "quell-fixture") == 0.2
    assert read_cpu_cap(detect_layout(V2, mounts=""), "quell/tenant-a") == 0.5
    for tree, group, cap_file, uncapped, broken in (
        (HYBRID, "quell-fixture", "cpu/quell-fixture/cpu.cfs_quota_us", "-1\n", "lots\n"),
        (V2, "quell/tenant-a", "quell/tenant-a/cpu.max", "max 100000\n", "0 100000\n"),
    ):
        root = tmp_path / tree.name
        shutil.copytree(tree, root)
        layout = detect_layout(root, mounts="")
        (root / cap_file).write_text(uncapped)
        assert read_cpu_cap(layout, group) is None
        (root / cap_file).write_text(broken)
        with pytest.raises(ComponentError, match="not a quota and a period"):
            read_cpu_cap(layout, group)
        with pytest.raises(ComponentError, match="does not exist"):
            read_cpu_cap(layout, "no-such-group")

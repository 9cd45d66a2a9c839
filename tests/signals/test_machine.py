"""The machine a run was measured on, read from procfs and sysfs files recorded on the target
machine (a Firecracker VM: 2 vCPUs of an Intel Xeon, 300 MiB L3, Linux 6.18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.signals.machine import Cache, cache_size_bytes, read_caches, read_machine

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "machine"
PROC, SYS = FIXTURE / "proc", FIXTURE / "sys"


def test_the_recorded_machine_is_read_exactly() -> None:
    m = read_machine(PROC, SYS)
    assert m.cpu_model == "Intel(R) Xeon(R) Processor"
    assert m.logical_cpus == 2
    assert m.memory_bytes == 24_684_092 * 1024
    assert m.kernel_release == "6.18.44-fc-v657"
    assert m.hypervisor is True
    assert m.caches == (
        Cache(1, "Data", 48 << 10, "0"),
        Cache(1, "Instruction", 32 << 10, "0"),
        Cache(2, "Unified", 2048 << 10, "0"),
        Cache(3, "Unified", 307_200 << 10, "0-1"),
    )
    assert m.last_level_cache_bytes == 300 << 20
    d = m.as_dict()
    assert d["last_level_cache_bytes"] == 314_572_800
    assert d["caches"][3] == {
        "level": 3,
        "type": "Unified",
        "size_bytes": 314_572_800,
        "shared_cpu_list": "0-1",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [("48K", 49_152), ("2048K\n", 2_097_152), ("300M", 314_572_800), ("1G", 1 << 30),
     ("512", 512), ("", None), ("4 KB", None), ("-1K", None)],
)  # fmt: skip
def test_cache_sizes_are_read_as_the_kernel_writes_them(text: str, expected: int | None) -> None:
    assert cache_size_bytes(text) == expected


def test_missing_files_leave_their_fields_empty(tmp_path: Path) -> None:
    m = read_machine(tmp_path / "proc", tmp_path / "sys")
    assert (m.cpu_model, m.logical_cpus, m.memory_bytes, m.kernel_release, m.hypervisor) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert m.caches == () and m.last_level_cache_bytes is None


def test_a_cache_whose_files_do_not_parse_is_left_out(tmp_path: Path) -> None:
    base = tmp_path / "devices" / "system" / "cpu" / "cpu0" / "cache"
    for name, (level, kind, size) in {
        "index0": ("1", "Data", "32K"),
        "index1": ("2", "Unified", "lots"),  # size unreadable
        "index2": ("x", "Unified", "1M"),  # level unreadable
    }.items():
        (base / name).mkdir(parents=True)
        (base / name / "level").write_text(level + "\n")
        (base / name / "type").write_text(kind + "\n")
        (base / name / "size").write_text(size + "\n")
    assert read_caches(tmp_path) == (Cache(1, "Data", 32 << 10, ""),)

"""procfs readers against files recorded on the target machine (Linux 6.18, 2 vCPUs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from quell.errors import ComponentError
from quell.signals import (
    CpuTimes,
    NetDevCounters,
    Pressure,
    SchedStat,
    parse_net_dev,
    parse_pressure,
    read_cpu_times,
    read_net_dev,
    read_pressure,
    read_process_schedstat,
    read_processes_schedstat,
    read_schedstat_by_process,
    read_system_pressure,
    wait_since,
)

PROC = Path(__file__).resolve().parent.parent / "fixtures" / "proc"
PID = 11381  # a python3 process with two threads: main (11381) and a spinning worker (11423)


def test_aggregate_cpu_line_exact() -> None:
    t = read_cpu_times(PROC)
    assert t == CpuTimes(
        user=5888, nice=0, system=3089, idle=79117, iowait=363, irq=0, softirq=46, steal=11
    )
    assert t.total == 5888 + 3089 + 79117 + 363 + 46 + 11


def test_per_cpu_lines_exact() -> None:
    assert read_cpu_times(PROC, cpu=0) == CpuTimes(988, 0, 766, 42470, 12, 0, 10, 2)
    assert read_cpu_times(PROC, cpu=1).steal == 9


def test_missing_cpu_line_is_component_error() -> None:
    with pytest.raises(ComponentError, match="cpu7"):
        read_cpu_times(PROC, cpu=7)


def test_system_pressure_exact() -> None:
    assert read_system_pressure("cpu", PROC) == Pressure(0.03, 4073114, 0.0, 0)
    assert read_system_pressure("io", PROC) == Pressure(0.36, 3367603, 0.36, 3205155)
    assert read_system_pressure("memory", PROC) == Pressure(0.0, 0, 0.0, 0)


def test_pressure_without_full_line() -> None:
    # kernels before 5.13 print only "some" for cpu
    p = parse_pressure("some avg10=12.50 avg60=3.00 avg300=1.00 total=987654321\n")
    assert p == Pressure(12.5, 987654321, None, None)


@pytest.mark.parametrize(
    "text",
    ["", "some avg10=x avg60=0 avg300=0 total=1\n", "some avg60=0 total=1\n", "bogus line\n"],
)
def test_malformed_pressure_raises(text: str) -> None:
    with pytest.raises(ComponentError):
        parse_pressure(text)


def test_read_pressure_absent_file_is_none(tmp_path: Path) -> None:
    assert read_pressure(tmp_path / "cpu.pressure") is None
    assert read_system_pressure("cpu", tmp_path) is None


def test_process_schedstat_sums_threads() -> None:
    # task/11381/schedstat: 35422595 157507 59 ; task/11423/schedstat: 299918933 60491 8
    assert read_process_schedstat(PID, PROC) == SchedStat(
        35422595 + 299918933, 157507 + 60491, 59 + 8
    )


def test_schedstat_add() -> None:
    assert SchedStat(1, 2, 3) + SchedStat(10, 20, 30) == SchedStat(11, 22, 33)


def test_vanished_process_raises_in_singular_and_is_skipped_in_plural() -> None:
    with pytest.raises(ComponentError, match="999999"):
        read_process_schedstat(999999, PROC)
    assert read_processes_schedstat([PID, 999999, PID], PROC) == SchedStat(
        2 * (35422595 + 299918933), 2 * (157507 + 60491), 2 * (59 + 8)
    )
    assert read_processes_schedstat([], PROC) == SchedStat(0, 0, 0)


def test_schedstat_by_process_leaves_out_the_vanished() -> None:
    assert read_schedstat_by_process([999999, PID], PROC) == {
        PID: SchedStat(35422595 + 299918933, 157507 + 60491, 59 + 8)
    }


def test_wait_since_follows_processes_coming_and_going() -> None:
    # 1 stays (+5), 2 exits (its last part lost), 3 starts (all 7 of its wait), 4's pid is
    # reused by a new process (its 2, not 2 − 9)
    assert wait_since({1: 10, 2: 4, 4: 9}, {1: 15, 3: 7, 4: 2}) == 5 + 7 + 2
    assert wait_since({1: 10}, {1: 10}) == 0
    assert wait_since({}, {}) == 0


def test_thread_vanishing_mid_read_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    shutil.copytree(PROC / str(PID), root / str(PID))
    # a task directory whose schedstat is gone, as when the thread exits after the listing
    (root / str(PID) / "task" / "11999").mkdir()
    assert read_process_schedstat(PID, root) == SchedStat(335341528, 217998, 67)


def test_self_schedstat_is_live() -> None:
    import os

    stat = read_process_schedstat(os.getpid())
    assert stat.run_ns > 0
    assert stat.timeslices > 0


def test_net_dev_exact() -> None:
    devs = read_net_dev(proc_root=PROC)
    assert list(devs) == ["lo", "ifb0", "ifb1", "eth0"]
    assert devs["eth0"] == NetDevCounters(
        rx_bytes=396803669, rx_packets=9970, tx_bytes=511385, tx_packets=5774
    )
    assert devs["lo"] == NetDevCounters(3193, 29, 3193, 29)
    assert read_net_dev(PID, PROC)["eth0"].rx_bytes == 396803669


def test_net_dev_of_a_pid_reads_its_namespace_file(tmp_path: Path) -> None:
    header = (PROC / "net" / "dev").read_text().splitlines()[:2]
    body = "  v-srv: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0"
    (tmp_path / "42" / "net").mkdir(parents=True)
    (tmp_path / "42" / "net" / "dev").write_text("\n".join([*header, body]) + "\n")
    assert read_net_dev(42, tmp_path) == {"v-srv": NetDevCounters(1000, 10, 2000, 20)}
    with pytest.raises(ComponentError):
        read_net_dev(43, tmp_path)


def test_net_dev_long_name_without_space() -> None:
    text = "veth0123456789a:5 1 0 0 0 0 0 0 7 2 0 0 0 0 0 0\n"
    assert parse_net_dev(text) == {"veth0123456789a": NetDevCounters(5, 1, 7, 2)}


def test_net_dev_malformed() -> None:
    with pytest.raises(ComponentError):
        parse_net_dev("eth0: 1 2 3\n")

"""Per-core CPU time and soft-interrupt counts, against /proc/stat and /proc/softirqs recorded
on the target machine (2 vCPUs, Linux 6.18) two seconds apart while wrk loaded nginx in a
namespace with RPS steering both veth ends' receive work to CPU 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.errors import ComponentError
from quell.signals.procfs import CpuTimes
from quell.signals.softirq import (
    core_usage,
    parse_per_cpu_times,
    parse_softirqs,
    read_core_sample,
)

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "proc" / "multicore"


def test_per_cpu_lines_exact() -> None:
    s = read_core_sample(ROOT / "before", now_s=0.0)
    assert s.cpu == (
        CpuTimes(71512, 0, 11430, 315455, 174, 0, 3872, 110),
        CpuTimes(129629, 0, 18974, 249483, 1180, 0, 3707, 118),
    )


def test_softirqs_exact() -> None:
    s = read_core_sample(ROOT / "after", now_s=2.0)
    assert s.softirqs["NET_RX"] == (2129927, 1828890)
    assert s.softirqs["NET_TX"] == (1006935, 975764)
    assert s.softirqs["BLOCK"] == (0, 208975)
    assert list(s.softirqs)[:3] == ["HI", "TIMER", "NET_TX"]
    assert len(s.softirqs) == 10


def test_core_usage_exact() -> None:
    u = core_usage(read_core_sample(ROOT / "before", 0.0), read_core_sample(ROOT / "after", 2.0))
    # cpu0: +3 user, +14 system, +155 idle, +41 softirq (213 ticks); cpu1: +9, +38, +145, +10
    assert u.busy == pytest.approx((58 / 213, 57 / 202))
    assert u.softirq == pytest.approx((41 / 213, 10 / 202))
    assert u.softirqs_per_s["NET_RX"] == pytest.approx((16255 / 2, 8611 / 2))
    assert u.interval_s == 2.0
    # RPS to CPU 0: most receive work and soft-interrupt time land there
    assert u.softirq[0] > 3 * u.softirq[1]


def test_live_machine_readable() -> None:
    s = read_core_sample()
    assert len(s.cpu) >= 1
    assert len(s.softirqs["NET_RX"]) >= len(s.cpu)


@pytest.mark.parametrize(
    "text",
    ["", "HI: 1 2\n", "   CPU0 CPU1\n  HI: 1\n", "   CPU0\n  NET_RX: x\n", "   CPU0\n  NET_RX 3\n"],
)
def test_malformed_softirqs_raise(text: str) -> None:
    with pytest.raises(ComponentError):
        parse_softirqs(text)


def test_stat_without_cpu_lines_raises() -> None:
    with pytest.raises(ComponentError, match="per-CPU"):
        parse_per_cpu_times("cpu 1 2 3 4 5 6 7 8\nintr 0\n")


def test_samples_out_of_order_raise() -> None:
    a = read_core_sample(ROOT / "before", 5.0)
    with pytest.raises(ComponentError, match="time order"):
        core_usage(a, read_core_sample(ROOT / "after", 5.0))


def test_missing_files_raise(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="cannot read"):
        read_core_sample(tmp_path)

"""Collectors: the I/O edge that reads kernel, cgroup and HAProxy signals."""

from __future__ import annotations

from quell.signals.cgroup import (
    CgroupLayout,
    Throttling,
    detect_layout,
    read_cpu_cap,
    read_cpu_usage_ns,
    read_group_pressure,
    read_throttling,
)
from quell.signals.delta import CounterDelta
from quell.signals.haproxy import ServerStat, parse_show_stat
from quell.signals.procfs import (
    CpuTimes,
    NetDevCounters,
    Pressure,
    SchedStat,
    parse_cpu_times,
    parse_net_dev,
    parse_pressure,
    parse_schedstat,
    read_cpu_times,
    read_net_dev,
    read_pressure,
    read_process_schedstat,
    read_processes_schedstat,
    read_schedstat_by_process,
    read_system_pressure,
    wait_since,
)

__all__ = [
    "CgroupLayout",
    "CounterDelta",
    "CpuTimes",
    "NetDevCounters",
    "Pressure",
    "SchedStat",
    "ServerStat",
    "Throttling",
    "detect_layout",
    "parse_cpu_times",
    "parse_net_dev",
    "parse_pressure",
    "parse_schedstat",
    "parse_show_stat",
    "read_cpu_cap",
    "read_cpu_times",
    "read_cpu_usage_ns",
    "read_group_pressure",
    "read_net_dev",
    "read_pressure",
    "read_process_schedstat",
    "read_processes_schedstat",
    "read_schedstat_by_process",
    "read_system_pressure",
    "read_throttling",
    "wait_since",
]

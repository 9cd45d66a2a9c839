"""The optional eBPF run-queue split: each thread's run-queue wait charged to the cgroup that
held the CPU meanwhile (its own or another), and its preemptions by other cgroups.

``rqwait.bpf.c`` (built by ``make native`` only where clang and bpftool are present) is loaded
through libbpf by :mod:`.loader`; :func:`probe` says whether it can load here; :func:`attached`
is the context manager; :mod:`.records` decodes its maps; :mod:`.cgroups` names the cgroup ids;
:mod:`.rqsplit` measures one process or command with it (``quell attribute rqsplit``).
docs/reference/attribution.md, "The eBPF run-queue split"."""

from quell.instrument.bpf.cgroups import CgroupLayout, cgroup_layout, cgroup_paths
from quell.instrument.bpf.loader import BpfLoadError, Probe, RunQueueSplit, attached, probe
from quell.instrument.bpf.records import CulpritWait, ThreadSplit, decode

__all__ = [
    "BpfLoadError",
    "CgroupLayout",
    "CulpritWait",
    "Probe",
    "RunQueueSplit",
    "ThreadSplit",
    "attached",
    "cgroup_layout",
    "cgroup_paths",
    "decode",
    "probe",
]

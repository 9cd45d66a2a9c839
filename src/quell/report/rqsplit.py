"""A process's run-queue split (``quell.instrument.bpf.rqsplit``) for a person: one row per
thread, longest wait first, with the other cgroup it waited behind most."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from quell.report.fit import FitTable as Table

if TYPE_CHECKING:
    from rich.console import Console

    from quell.instrument.bpf.rqsplit import ProcessSplit


def rqsplit_table(result: ProcessSplit) -> Table:
    table = Table(
        title=f"run-queue wait of process {result.pid} over {result.seconds:.1f} s, by who held"
        " the CPU"
    )
    for col in ("tid", "name", "cgroup", "wait s", "own s", "others s", "preempted by others"):
        table.add_column(col, justify="left" if col in ("name", "cgroup") else "right")
    table.add_column("main other cgroup")
    for t, name in sorted(result.threads, key=lambda tn: -tn[0].wait_ns):
        top = next((c for c in t.culprits if not c.own and c.wait_ns), None)
        table.add_row(
            str(t.tid),
            Text(name or ""),
            Text(t.cgroup_path or str(t.cgroup_id)),
            f"{t.wait_ns / 1e9:.3f}",
            f"{t.own_wait_ns / 1e9:.3f}",
            f"{t.other_wait_ns / 1e9:.3f}",
            str(t.preemptions_by_others),
            Text(
                ""
                if top is None
                else f"{top.cgroup_path or top.cgroup_id} ({top.wait_ns / 1e9:.3f} s)"
            ),
        )
    if not result.threads:
        table.caption = "no thread of the process waited for a CPU"
    return table


def print_rqsplit(result: ProcessSplit, console: Console) -> None:
    console.print(rqsplit_table(result))

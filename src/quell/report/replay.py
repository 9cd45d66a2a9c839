"""A replay (``quell.experiment.replay``) for a person: whether the policy decided as recorded,
where the changed one would first have scaled differently, and every interval with a scaling
action on either side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def action_text(actions: Sequence[Mapping[str, Any]]) -> str:
    """Scaling actions in a few words: ``+n1 on h2``, ``-n1``."""
    parts = []
    for a in actions:
        if a.get("type") == "AddInstance":
            parts.append(f"+{a.get('instance_id')} on {a.get('host')}")
        else:
            parts.append(f"-{a.get('instance_id')}")
    return ", ".join(parts) or "·"


def headline(doc: Mapping[str, Any]) -> str:
    changes = doc["changes"]
    changed = ", ".join(f"{k}={v!r}" for k, v in changes.items()) or "nothing changed"
    same, n, of = doc["same_decisions"], doc["intervals"], doc["recorded_intervals"]
    diverged = doc["diverged_at_s"]
    if diverged is None:
        where = f"it scales as recorded in all {of} intervals"
    else:
        where = (
            f"it first scales differently at {diverged:.1f} s (interval {n} of {of}), "
            "where the replay stops: after it the recorded fleet is not the one it would have had"
        )
    return f"{doc['policy']} ({changed}): {same} of {n} decisions as recorded; {where}"


def print_replay(doc: Mapping[str, Any], console: Console) -> None:
    """The headline, the scaling actions per phase, and the intervals with any."""
    from rich.text import Text  # names and reasons are printed as they are, never as markup

    from quell.report.fit import FitTable

    console.print(headline(doc), markup=False)
    phases = FitTable(
        title="scaling actions per phase, over the intervals replayed", title_justify="left"
    )
    for header in ("phase", "recorded", "replayed"):
        phases.add_column(header, justify="left" if header == "phase" else "right")
    for phase, row in doc["scaling_by_phase"].items():
        phases.add_row(Text(phase), str(row["recorded"]), str(row["replayed"]))
    console.print(phases)
    if not doc["steps"]:
        return
    steps = FitTable(title="intervals with a scaling action", title_justify="left")
    for header in ("time s", "phase", "recorded", "replayed", "replayed reason"):
        steps.add_column(header, justify="right" if header == "time s" else "left")
    for s in doc["steps"]:
        steps.add_row(
            f"{s['time_s']:.1f}",
            Text(s["phase"]),
            Text(action_text(s["recorded"])),
            Text(action_text(s["replayed"])),
            Text(s["replayed_reason"]),
        )
    console.print(steps)

"""IC2's results page (docs/results/ic2.md) from the measured files in a data directory:

* ``sweep-<name>.json``: ``quell ic2 sweep``'s sweep.json (Fig. 2 and 3);
* ``eval-<name>.json``: ``quell ic2 evaluate --json``'s document (detection on a run);
* ``ablation-<name>.json``: ``quell ic2 ablate --json``'s document;
* ``table4-<name>.json``: ``quell ic2 table4 --json``'s document;
* ``training-<name>.json``: a campaign's training.json.

Each file's ``note`` key, if any, is printed under its section: where it was measured and how.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOALS = {"recall": 0.95, "precision": 0.90, "detect_latency_s": 5.0, "clear_latency_s": 10.0}
"""Acceptance for detection on antagonist kinds training never showed (1 s sampling)."""


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _fmt(v: Any, spec: str) -> str:
    if v is None:
        return "—"
    if spec == "ms":
        return f"{1e3 * v:.1f}"
    return format(v, spec)


def _mark(key: str, v: Any) -> str:
    goal = GOALS.get(key)
    if goal is None or v is None:
        return ""
    ok = v <= goal if key.endswith("_s") else v >= goal
    return "" if ok else " ✗"


def sweep_cell_ms(row: dict[str, Any], value: float) -> str:
    """A sweep table's cell: the mean response time at ``value`` in ms, the range of its
    repeats in brackets when it has several, and * at the condition's best value."""
    key = f"{value:g}"
    rt = row["mean_rt_s"].get(key)
    text = _fmt(rt, "ms")
    if rt is not None and row.get("repeats", {}).get(key, 1) > 1:
        lo, hi = row["range_rt_s"][key]
        text += f" ({1e3 * lo:.1f}–{1e3 * hi:.1f})"
    return text + (" *" if row["best_value"] == value else "")


def _sweep(doc: dict[str, Any]) -> list[str]:
    spec = doc["spec"]
    conds = list(doc["table"])
    lines = [
        f"### {doc['name']} ({spec['environment']})",
        "",
        f"Mean response time (ms) against `{spec['setting']}`; {spec['duration_s']:g} s per point,"
        f" measured after {spec['warmup_s']:g} s, {spec['repeats']} repeat(s)"
        + (" (their range in brackets)" if spec["repeats"] > 1 else "")
        + "; * = best.",
        "",
        "| " + spec["setting"] + " | " + " | ".join(conds) + " |",
        "| ---: | " + " | ".join("---:" for _ in conds) + " |",
    ]
    for v in spec["values"]:
        cells = [sweep_cell_ms(doc["table"][c], v) for c in conds]
        lines.append(f"| {v:g} | " + " | ".join(cells) + " |")
    best = ", ".join(f"{c}: {doc['table'][c]['best_value']:g}" for c in conds)
    lines += ["", f"Best value per condition: {best}."]
    kb = doc.get("row")
    if kb is not None:
        item = kb["directions"]
        said = f"`directions: {item}`" if item is not None else "no direction"
        lines[-1] += f" For IC2's row: {said} ({kb['why']})."
    return lines


EVAL_COLS = (
    ("recall", "recall", ".3f"),
    ("precision", "precision", ".3f"),
    ("miss rate", "miss_rate", ".3f"),
    ("detect s", "detect_latency_s", ".1f"),
    ("clear s", "clear_latency_s", ".1f"),
    ("onsets (missed)", None, ""),
    ("intervals", "samples", "d"),
)


def _eval_rows(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        "| run | trained on | " + " | ".join(h for h, _, _ in EVAL_COLS) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in EVAL_COLS) + " |",
    ]
    for name, d in docs:
        cells = []
        for _, key, spec in EVAL_COLS:
            if key is None:
                cells.append(f"{d.get('detect_events')} ({d.get('detect_missed')})")
            else:
                cells.append(_fmt(d.get(key), spec) + _mark(key, d.get(key)))
        trained = d.get("trained_on", {})
        lines.append(
            f"| {name} | {trained.get('environment', '?')}: {trained.get('workload', '?')} | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def _ablation(doc: dict[str, Any]) -> list[str]:
    cols = ("recall", "precision", "miss_rate", "i_as_ni", "ni_as_i", "detect_latency_s")
    lines = [
        "| test | cost | method | " + " | ".join(cols) + " |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in cols) + " |",
    ]
    for r in doc["rows"]:
        cells = [_fmt(r.get(c), "d" if c in ("i_as_ni", "ni_as_i") else ".3f") for c in cols]
        lines.append(f"| {r['test']} | {r['cost']} | {r['method']} | " + " | ".join(cells) + " |")
    return lines


def reduction_text(pct: float | None, se: float | None) -> str | None:
    """A reduction in percent, with its standard error over repetitions when there is one
    (``quell.studies.ic2.table4``); None when there is no reduction."""
    if pct is None:
        return None
    return f"{pct:.1f}" if se is None else f"{pct:.1f} ± {se:.1f}"


def _cut(r: dict[str, Any], key: str) -> str:
    return reduction_text(r.get(key), r.get(f"{key}_se")) or "—"


def _table4(doc: dict[str, Any]) -> list[str]:
    first = doc["first_s"]
    sent = all("sent_rt_s" in r for r in doc["rows"].values())
    reps = any(r.get("repetitions", 1) > 1 for r in doc["rows"].values())
    head = (
        f"| policy |{' runs |' if reps else ''} first {first:g} s ms | cut % | after ms | cut % |"
        " clean ms | detect s | clear s | reconfigurations |"
    )
    rule = f"| --- |{' ---: |' if reps else ''} ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    if sent:  # by the time each request was sent (quell.studies.ic2.table4)
        head += f" by send: all ms | cut % | > {first:g} s |"
        rule += " ---: | ---: | ---: |"
    waited = all("sent_waited_s" in r for r in doc["rows"].values())
    if waited:  # every request sent, one without an answer at its timeout
        head += (
            f" waited, failures at the timeout: first {first:g} s ms | cut % | after ms | cut %"
            " | failed |"
        )
        rule += " ---: | ---: | ---: | ---: | ---: |"
    lines = [head, rule]
    for label, r in doc["rows"].items():
        runs = f" {r.get('repetitions', 1)} |" if reps else ""
        row = (
            f"| {label} |{runs}"
            f" {_fmt(r['first_rt_s'], 'ms')} | {_cut(r, 'first_reduction_pct')}"
            f" | {_fmt(r['after_rt_s'], 'ms')} | {_cut(r, 'after_reduction_pct')}"
            f" | {_fmt(r['clean_rt_s'], 'ms')} | {_fmt(r['detect_latency_s'], '.1f')}"
            f" | {_fmt(r['clear_latency_s'], '.1f')} | {r['reconfigurations']:g} |"
        )
        if sent:
            row += (
                f" {_fmt(r['sent_rt_s'], 'ms')} | {_cut(r, 'sent_reduction_pct')}"
                f" | {r['sent_over_first_s']} |"
            )
        if waited:
            row += (
                f" {_fmt(r['sent_first_waited_s'], 'ms')} | {_cut(r, 'first_waited_reduction_pct')}"
                f" | {_fmt(r['sent_after_waited_s'], 'ms')}"
                f" | {_cut(r, 'after_waited_reduction_pct')} | {r['sent_failed']} |"
            )
        lines.append(row)
    if not waited:
        lines += [
            "",
            "Answered requests only: this table was made before a failed request counted at its"
            " timeout, and a policy under which more users give up looks faster for it.",
        ]
    return lines + _cpu_by_run(doc)


def _cpu_by_run(doc: dict[str, Any]) -> list[str]:
    """The interfered instances' CPU per answered request, run by run, under interference and
    outside it: how hard the neighbour reached the service in each run (none for a table
    recorded before it was measured)."""
    key, clean = "interfered_cpu_s_per_request", "clean_cpu_s_per_request"
    runs = {
        label: r.get("runs") or [r] for label, r in doc["rows"].items()
    }  # one run: the row itself
    if not all(key in x for rs in runs.values() for x in rs):
        return []
    lines = [
        "",
        "CPU per answered request of the interfered instances, run by run (ms), under"
        " interference and outside it:",
        "",
        "| policy | under interference | outside |",
        "| --- | --- | --- |",
    ]
    for label, rs in runs.items():
        under = ", ".join(_fmt(x[key], "ms") for x in rs)
        outside = ", ".join(_fmt(x[clean], "ms") for x in rs)
        lines.append(f"| {label} | {under} | {outside} |")
    return lines


def render(data: Path) -> str:
    """The page, from every file of ``data`` it knows (module docstring)."""
    files = sorted(data.glob("*.json"))
    out = [
        "# IC2 results",
        "",
        f"Generated by `quell ic2 results --data {data}` from the files there; each section"
        " names the command that measured it. Do not edit by hand.",
        "",
    ]

    def notes(doc: dict[str, Any]) -> list[str]:
        return ["", str(doc["note"]), ""] if doc.get("note") else [""]

    sweeps = [f for f in files if f.name.startswith("sweep-")]
    if sweeps:
        out += ["## Configuration sweeps (the paper's Fig. 2 and 3)", ""]
        for f in sweeps:
            doc = _load(f)
            out += _sweep(doc) + notes(doc)
    evals = [f for f in files if f.name.startswith("eval-")]
    if evals:
        goals = "recall ≥ 0.95, precision ≥ 0.90, detection ≤ 5 s, clearing ≤ 10 s"
        out += [
            "## Detection",
            "",
            f"Class I per interval; latencies of the five-state machine (✗: short of {goals}).",
            "",
        ]
        docs = [(f.stem.removeprefix("eval-"), _load(f)) for f in evals]
        out += _eval_rows(docs)
        for name, d in docs:
            if d.get("note"):
                out += ["", f"*{name}*: {d['note']}"]
        out.append("")
    for f in [f for f in files if f.name.startswith("ablation-")]:
        doc = _load(f)
        out += ["## Cost ablation: " + f.stem.removeprefix("ablation-"), ""]
        out += _ablation(doc) + notes(doc)
    for f in [f for f in files if f.name.startswith("table4-")]:
        doc = _load(f)
        out += [f"## Table 4: {f.stem.removeprefix('table4-')} ({doc['scenario']})", ""]
        out += _table4(doc) + notes(doc)
    trainings = [f for f in files if f.name.startswith("training-")]
    if trainings:
        out += ["## Training", ""]
        for f in trainings:
            doc = _load(f)
            out.append(f"**{f.stem.removeprefix('training-')}** ({doc.get('environment')}):")
            out.append("")
            out.append("| phase | collected | trained on | NI | T | I |")
            out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
            for p in doc["phases"]:
                c = p["trained_on"]["class_counts"]
                out.append(
                    f"| {p['phase']} | {p['collected']['samples']} | {p['trained_on']['samples']}"
                    f" | {c['NI']} | {c['T']} | {c['I']} |"
                )
            out += notes(doc)
    return "\n".join(out).rstrip() + "\n"


def write_page(data: Path, out: Path) -> Path:
    """``quell ic2 results``: the page rendered from ``data`` and written to ``out``; a data
    directory that is not one, or a file in it of no known form, is refused."""
    from quell.errors import InputError, Problem

    if not data.is_dir():
        raise InputError(str(data), [Problem("", "not a directory")])
    try:
        page = render(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            str(data), [Problem("", f"a file is not of a known form: {exc}")]
        ) from None
    out.write_text(page)
    return out


__all__ = ["GOALS", "reduction_text", "render", "sweep_cell_ms", "write_page"]

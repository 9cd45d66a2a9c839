"""Soroban's results page (docs/results/attribution.md) from ``results.json`` in a data directory:
the document ``quell attribute analyse`` writes (``quell.studies.attribution.analysis``) from
the campaign's runs kept beside it (``runs/<cell>/``: requests.csv.gz, psi.csv, cell.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_FILE = "results.json"
PERIODIC_FILE = "periodic.json"
"""Fig. 4's document (``quell attribute periodic``), drawn on the page when present."""


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{1e3 * v:.2f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def _share(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.2f} %"


def _scores(title: str, scores: list[dict[str, Any]], goals: dict[str, Any]) -> list[str]:
    lines = [
        f"### {title}",
        "",
        "| model | requests | R² | MAE ms | RMSE ms | 95 % coverage | mean interval width ms |",
    ]
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in scores:
        lines.append(
            f"| {s['model']} | {s['n']} | {s['r2']:.3f} | {_ms(s['mae_seconds'])} |"
            f" {_ms(s['rmse_seconds'])} | {_pct(s['coverage'])} |"
            f" {_ms(s.get('mean_interval_width_seconds'))} |"
        )
    words = {True: "met", False: "**not met**", None: "—"}
    by = {s["model"]: s for s in scores}
    gp, runq = by.get("sparse_gp"), by.get("runq_wait")
    cut = ""
    if gp and runq and runq["mae_seconds"] > 0:
        change = 100 * (1 - gp["mae_seconds"] / runq["mae_seconds"])
        side = "below" if change >= 0 else "above"
        cut = f" (the GP's MAE is {abs(change):.0f} % {side} the run-queue wait's)"
    lines += [
        "",
        f"Targets: R² ≥ 0.8 {words[goals.get('r2')]}; the 95 % interval covering 93–97 % "
        f"{words[goals.get('coverage')]}; MAE ≥ 30 % below the run-queue wait's "
        f"{words[goals.get('mae_vs_runq')]}{cut}.",
        "",
    ]
    return lines


def _calibration(cal: dict[str, Any] | None) -> list[str]:
    """How the GP's interval was calibrated (``sparse_gp``; ``sparse_gp_uncalibrated``: as
    fitted)."""
    if not cal:
        return ["The GP's interval is as fitted (not calibrated).", ""]
    classes = ", ".join(f"{c} ×{v:.2f}" for c, v in cal.get("class_scales", {}).items())
    lines = [
        f"The GP's interval (`sparse_gp`) is calibrated on the training runs alone, "
        f"{cal['method']} ({len(cal['groups'])} groups, {cal['requests']} requests): its "
        f"standard deviation times {cal['scale']:.2f}"
        + (f", per request class {classes}" if classes else "")
        + "; `sparse_gp_uncalibrated` is the same GP with its interval as fitted. Per left-out "
        "group, the uncalibrated interval's coverage and the 95 % quantile of the absolute error "
        "over the GP's sd:",
        "",
        "| group left out | requests | uncalibrated coverage | 95 % quantile of error / sd |",
        "| --- | ---: | ---: | ---: |",
    ]
    for g in cal["groups"]:
        lines.append(f"| {g['group']} | {g['n']} | {_pct(g['coverage'])} | {g['quantile']:.2f} |")
    return [*lines, ""]


def _floor(floor: dict[str, Any] | None) -> list[str]:
    """The provider floor the attribution applies (none before model bundles had one)."""
    if not floor or floor["method"] == "none":
        return ["The provider part is every positive predicted excess (no floor).", ""]
    return [
        f"The provider floor is **{_ms(floor['seconds'])} ms**: the "
        f"{100 * floor['quantile']:g} % quantile of the GP's predicted excess over the "
        f"{floor['requests']} requests of the uncontended training runs "
        f"({', '.join(floor['runs'])}). A request's provider part is its predicted excess held "
        "within [0, its latency] where the prediction is above the floor, and 0 where it is not "
        "(what the model cannot tell from a request no neighbour delayed). The R², MAE and "
        "coverage below score the prediction itself; the tables after them show the provider "
        "part with the floor, and where named without it.",
        "",
    ]


def _periodic(doc: dict[str, Any]) -> list[str]:
    """Fig. 4: the p90 of the provider part and of the latency beside a light background, beside
    it and the periodic scan, and alone; the move from the first to the second, as the seed's."""
    clean, base, scan, meta = doc["clean"], doc["base"], doc["scan"], doc["scan_run"]
    before, after = base["provider_p90_seconds"], scan["provider_p90_seconds"]
    shift = after - before

    def row(what: str, r: dict[str, Any], during: bool = False) -> str:
        key = "_during_scans_seconds" if during else "_seconds"
        n = r["during_scans"] if during else r["requests"]
        label = "—" if during or "label_p90_seconds" not in r else _ms(r["label_p90_seconds"])
        p90, provider = _ms(r["p90" + key]), _ms(r["provider_p90" + key])
        bare = r.get("provider_p90" + key.replace("_seconds", "_no_floor_seconds"))
        return f"| {what} | {n} | {p90} | {provider} | {_ms(bare)} | {label} |"

    lines = [
        "## Fig. 4: a periodic heavy job beside the service",
        "",
        "`quell attribute periodic`, as the seed compares two cases: the service at one worker "
        f"(schedule seed 3, {base['requests']} requests a run) beside a light background (one "
        f"`cpu` tenant busy {meta['tenant_load_pct']} % of the time), and beside the same "
        f"background and a clamav scan of {meta['scan_mb']} MiB started every "
        f"{meta['scan_period_s']:g} s ({doc['scans']} scans of {doc['scan_seconds_mean']:.1f} s "
        "on average), each tenant in a cgroup of its own on the service's CPU. The service alone "
        "is the labels' reference. The model is fitted on this directory's training runs (the "
        "campaign's `train` part), which saw neither clamav nor a tenant below 100 %.",
        "",
        "| run | requests | p90 latency ms | p90 provider part ms | without the floor |"
        " p90 label ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        row("alone", clean),
        row("beside the background", base),
        row("beside the background and the scan", scan),
    ]
    if "p90_during_scans_seconds" in scan:
        lines.append(row("… of them, started while a scan ran", scan, during=True))
    pct = f" ({100 * shift / before:+.0f} %)" if before > 0 else ""
    bare = ""
    b0, b1 = base.get("provider_p90_no_floor_seconds"), scan.get("provider_p90_no_floor_seconds")
    if b0 is not None and b1 is not None:
        bare_pct = f", {100 * (b1 - b0) / b0:+.0f} %" if b0 > 0 else ""
        bare = f" (without the floor from {_ms(b0)} to {_ms(b1)} ms{bare_pct})"
    lines += [
        "",
        f"With the scan, the p90 of the provider part moves from {_ms(before)} to {_ms(after)} ms:"
        f" {_ms(shift)} ms{pct}{bare}. The seed's Fig. 4: from 36 to 47 ms, +11 ms (+31 %), for "
        "lighttpd serving 500 KB files beside sixteen VMs.",
        "",
    ]
    return lines


def _gp(scores: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((s for s in scores if s["model"] == "sparse_gp"), None)


def _without_ebpf(doc: dict[str, Any]) -> list[str]:
    """The same runs fitted and attributed without the eBPF split's features, beside the fit
    with them: what the split adds."""
    fit, other = doc["fit"], doc["without_ebpf"]
    runq = {
        name: next((s for s in held["scores"] if s["model"] == "runq_wait"), None)
        for name, held in fit["held_out"].items()
    }

    def cells(s: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
        if s is None:
            return "— | — | —"
        cut = "—"
        if base and base["mae_seconds"] > 0:
            change = 100 * (1 - s["mae_seconds"] / base["mae_seconds"])
            cut = f"{abs(change):.0f} % {'below' if change >= 0 else 'above'}"
        return f"{s['r2']:.3f} | {cut} | {_pct(s['coverage'])}"

    lines = [
        "## What the eBPF split adds",
        "",
        "The same runs, the GP fitted and scored once with the features of the eBPF run-queue "
        "split (each request's wait behind other cgroups and its preemptions by them) and once "
        "without them (the seed's features alone). MAE is against the run-queue wait's on the "
        "same requests.",
        "",
        "| test set | R² with | MAE with | coverage with | R² without | MAE without |"
        " coverage without |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, held in fit["held_out"].items():
        plain = other["fit"]["held_out"].get(name)
        lines.append(
            f"| {name} | {cells(_gp(held['scores']), runq[name])} |"
            f" {cells(_gp(plain['scores']) if plain else None, runq[name])} |"
        )
    lines += [
        "",
        "| clean run | provider p99 ms with | without | the run's own p99 scatter ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    plain_grid = {g["run"]: g for g in other["grid"]}
    for g in doc["grid"]:
        if g["tenants"] == 0 and g["run"] in plain_grid:
            lines.append(
                f"| {g['run']} | {_ms(g['provider_p99_seconds'])} |"
                f" {_ms(plain_grid[g['run']]['provider_p99_seconds'])} |"
                f" {_ms(g['own_p99_scatter_seconds'])} |"
            )
    plain_customer = {c["run"]: c for c in other["customer"]}
    lines += [
        "",
        "| customer's slowdown | to the service with | without |",
        "| --- | ---: | ---: |",
    ]
    for c in doc["customer"]:
        if c["run"] in plain_customer:
            lines.append(
                f"| {c['what']} | {_pct(c['service_share'])} |"
                f" {_pct(plain_customer[c['run']]['service_share'])} |"
            )
    return [*lines, ""]


def render(data: Path, shown_as: str | None = None) -> str:
    """The page; ``shown_as``: the data directory as the page names it (default ``data``)."""
    doc = json.loads((data / RESULTS_FILE).read_text())
    fit = doc["fit"]
    s = doc["settings"]
    out = [
        "# Soroban results",
        "",
        f"Generated by `quell attribute results --data {shown_as or data.as_posix()}` from "
        f"`{RESULTS_FILE}` there (written by `quell attribute analyse` from the runs in "
        "`runs/`); do not edit by hand. How the runs were made: [docs/papers/soroban.md]"
        "(../papers/soroban.md).",
        "",
        f"Trained on {fit['n_train']} requests of {len(doc['train_runs'])} runs (schedule seed 1;"
        f" {fit['n_test']} of their requests held out at random), features "
        f"{', '.join(fit['features'])}; classes {', '.join(fit['classes'])}; sparse GP with "
        f"{s['n_inducing']} inducing inputs, {s['max_iters']} iterations, seed {s['seed']}; the "
        f"exact GP on {s['exact_points']} requests. Fit times (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in fit["fit_seconds"].items())
        + ".",
        "",
        "## Accuracy",
        "",
    ]
    out += _calibration(fit.get("calibration"))
    out += _floor(fit.get("floor"))
    out += _scores("Requests held out of the training runs", fit["scores"], fit["acceptance"])
    for name, held in fit["held_out"].items():
        out += _scores(name.capitalize(), held["scores"], held["acceptance"])
    out += [
        "## Fig. 3: provider-attributed p99 (ms)",
        "",
        "Rows: stress-ng `cpu` tenants on the service's CPU, each in a cgroup of its own; "
        "columns: the service's worker processes (its own load). Each cell: the p99 of the "
        "per-request provider part; in brackets the p99 of the labels (each request's excess "
        "over the uncontended run of the same load, by percentile matching) and of the latency.",
        "",
    ]
    grid = doc["grid"]
    loads = sorted({g["workers"] for g in grid})
    tenants = sorted({g["tenants"] for g in grid})
    out.append("| tenants | " + " | ".join(f"{w} worker(s)" for w in loads) + " |")
    out.append("| ---: | " + " | ".join("---:" for _ in loads) + " |")
    for t in tenants:
        cells = []
        for w in loads:
            g = next((g for g in grid if g["tenants"] == t and g["workers"] == w), None)
            cells.append(
                "—"
                if g is None
                else f"{_ms(g['provider_p99_seconds'])} ({_ms(g.get('label_p99_seconds'))};"
                f" {_ms(g['p99_seconds'])})"
            )
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    out += ["", "## No false attribution in clean cells", ""]
    out.append(
        "| run | provider p99 ms | without the floor | the run's own p99 scatter ms | within it |"
    )
    out.append("| --- | ---: | ---: | ---: | --- |")
    for g in grid:
        if g["tenants"] == 0:
            ok = "yes" if g["no_false_attribution"] else "**no**"
            out.append(
                f"| {g['run']} | {_ms(g['provider_p99_seconds'])} |"
                f" {_ms(g.get('provider_p99_no_floor_seconds'))} |"
                f" {_ms(g['own_p99_scatter_seconds'])} | {ok} |"
            )
    out += [
        "",
        "The scatter is half the width of the bootstrap 95 % interval of the run's latency p99.",
        "",
        "## Customer-caused latency",
        "",
        "Against the same schedule served by one worker with no tenant, paired by request id:",
        "",
        "| run | what | requests | mean excess ms | of it to the provider ms | to the service |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in doc["customer"]:
        out.append(
            f"| {c['run']} | {c['what']} | {c['requests']} | {_ms(c['mean_excess_seconds'])} |"
            f" {_ms(c['mean_to_provider_seconds'])} | {_pct(c['service_share'])} |"
        )
    out += ["", "Target: ≥ 80 % of a customer-caused excess attributed to the service.", ""]
    if "without_ebpf" in doc:
        out += _without_ebpf(doc)
    if (data / PERIODIC_FILE).is_file():
        out += _periodic(json.loads((data / PERIODIC_FILE).read_text()))
    out += [
        "## Runs",
        "",
        "| run | requests | p50 ms | p99 ms | provider p99 ms | provider share |"
        " requests with a provider part |",
    ]
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in doc["runs"].items():
        out.append(
            f"| {name} | {r['requests']} | {_ms(r['p50_seconds'])} | {_ms(r['p99_seconds'])} |"
            f" {_ms(r['provider_p99_seconds'])} | {_pct(r['provider_share'])} |"
            f" {_share(r.get('provider_requests_share'))} |"
        )
    agreement = fit.get("label_agreement", [])
    if agreement:
        out += [
            "",
            "## Percentile against paired labels (training runs)",
            "",
            "| run | MAE ms | p95 abs. difference ms | correlation |",
            "| --- | ---: | ---: | ---: |",
        ]
        for a in agreement:
            out.append(
                f"| {Path(a['run']).name} | {_ms(a['mae_seconds'])} |"
                f" {_ms(a['p95_abs_difference_seconds'])} | {a['correlation']:.3f} |"
            )
    note = doc.get("note")
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"


def write_page(data: Path, out: Path) -> Path:
    """``quell attribute results``: the page rendered from ``data`` (which must hold
    ``results.json``) and written to ``out``."""
    from quell.errors import InputError, Problem

    if not (data / RESULTS_FILE).is_file():
        raise InputError(str(data), [Problem(RESULTS_FILE, "missing")])
    out.write_text(render(data))
    return out

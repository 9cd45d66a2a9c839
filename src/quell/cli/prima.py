"""``quell prima``: build PRIMA's models by automated tests, validate them, show a bundle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

if TYPE_CHECKING:
    from rich.progress import Progress

    from quell.studies.prima.profile import Profiler, ProfileSpec

MAX_REPETITIONS = 20
"""``quell.studies.prima.profile.MAX_REPETITIONS``, spelled out so ``--help`` loads nothing."""

prima_app = typer.Typer(help="PRIMA: probe training, model building and validation.")

SpecArg = Annotated[Path, typer.Argument(help="Profile spec (YAML).", dir_okay=False)]
OutOpt = Annotated[Path, typer.Option("--out", help="Profile directory (resumable).")]
EnvOpt = Annotated[
    str | None, typer.Option("--env", help="lab or sim (default: the spec's environment).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document as the last line.")]
RepsOpt = Annotated[
    int | None,
    typer.Option(
        "--repetitions",
        min=1,
        max=MAX_REPETITIONS,
        help="Runs pooled per model cell or held-out point, instead of the spec's. On an OUT "
        "that has runs, only the missing ones are measured: a larger number deepens a profile.",
    ),
]


def _env(spec_env: Literal["lab", "sim"], given: str | None) -> Literal["lab", "sim"]:
    from quell.errors import InputError, Problem

    if given is None:
        return spec_env
    if given not in ("lab", "sim"):
        raise InputError("--env", [Problem("--env", f"{given!r}: choose lab or sim")])
    return "lab" if given == "lab" else "sim"


def _with_repetitions(spec: ProfileSpec, repetitions: int | None) -> ProfileSpec:
    if repetitions is None:
        return spec
    return spec.model_copy(update={"repetitions": repetitions})


def _progress() -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from quell.cli.console import err_console

    return Progress(
        TextColumn("[bold]{task.fields[what]:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    )


def _print_noise(who: str, rt_pct: object, sf_pct: object, how: str) -> None:
    """One line with the noise floor in RT and SF (``prima.validate.noise_floor_pct``)."""
    from quell.cli.console import out_console

    if not (isinstance(rt_pct, float) or isinstance(sf_pct, float)):
        return
    rt = f"{rt_pct:.1f}" if isinstance(rt_pct, float) else "-"
    sf = f"{sf_pct:.1f}" if isinstance(sf_pct, float) else "-"
    out_console.print(f"{who} a mean error of about {rt} % in RT and {sf} % in SF ({how})")


def _steal_report(profiler: Profiler) -> dict[str, object]:
    """Print, when any, the runs measured again for the machine's own CPU steal; returns the
    same for ``--json``."""
    from quell.cli.console import out_console

    bound = profiler.spec.max_steal_pct
    if profiler.remeasured:
        out_console.print(
            f"{profiler.remeasured} run(s) measured again: the machine's CPU steal averaged over "
            f"{bound:g} % during them (kept in {profiler.stolen_path})"
        )
    if profiler.over_steal:
        out_console.print(
            f"[bold]kept although every attempt had CPU steal over {bound:g} %:[/bold] "
            + ", ".join(profiler.over_steal)
        )
    return {
        "max_steal_pct": bound,
        "remeasured": profiler.remeasured,
        "over_steal": list(profiler.over_steal),
    }


@prima_app.command("profile")
def profile(
    spec_path: SpecArg,
    out: OutOpt,
    env: EnvOpt = None,
    repetitions: RepsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the probe, measure U × interference cells, write OUT/bundle.json. Resumable: cells
    already in OUT/cells.jsonl are not measured again."""
    from quell.cli.console import out_console
    from quell.report.fit import FitTable as Table
    from quell.studies.prima.profile import Profiler, cell_runner, load_profile_spec
    from quell.studies.prima.validate import scatter

    spec, base = load_profile_spec(spec_path)
    spec = _with_repetitions(spec, repetitions)
    environment = _env(spec.environment, env)
    spec = spec.model_copy(update={"environment": environment})
    profiler = Profiler(spec, base, out, cell_runner(environment, out))
    with _progress() as bar:
        task = bar.add_task("profile", total=profiler.planned(), what="starting")

        def update(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, what=what)

        bundle = profiler.run(update)
        bar.update(task, completed=profiler.planned(), what="done")
    path = out / "bundle.json"
    bundle.save(path)
    t = Table(title=f"probe isolation table ({spec.name})")
    for col in ("U %", "R_iso ms", "samples", "CI width / mean", "converged"):
        t.add_column(col, justify="right")
    pt = bundle.probe_table
    for u, r, n, c, ok in zip(
        pt.util_pct_, pt.r_iso_s_, pt.samples_, pt.ci_ratio_, pt.converged_, strict=True
    ):
        t.add_row(f"{u:.1f}", f"{r * 1e3:.1f}", str(n), f"{c:.3f}", "yes" if ok else "no (cap)")
    out_console.print(t)
    out_console.print(
        f"{len(bundle.data.rtm_points)} model cells → {path}"
        f" (workload {spec.workload}, {environment})"
    )
    noise = scatter(profiler.model_points(pt))
    _print_noise(
        "The cells' own scatter alone would give a model built on them",
        noise["rt_noise_pct"],
        noise["sf_noise_pct"],
        "from how far each cell's repetitions differ",
    )
    steal = _steal_report(profiler)
    if as_json:
        print(
            json.dumps(
                {
                    "bundle": str(path),
                    "cells": len(bundle.data.rtm_points),
                    "probe_table": pt.to_dict(),
                    "scatter": noise,
                    "steal": steal,
                },
                separators=(",", ":"),
            )
        )


@prima_app.command("validate")
def validate_cmd(
    spec_path: SpecArg,
    bundle_path: Annotated[Path, typer.Argument(help="Model bundle to validate.")],
    out: OutOpt,
    env: EnvOpt = None,
    repetitions: RepsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the spec's held-out points and compare them with RTM and IM (like Table II)."""
    from quell.cli.console import out_console
    from quell.errors import InputError, Problem
    from quell.models.bundle import load_bundle
    from quell.report.fit import FitTable as Table
    from quell.studies.prima.profile import Profiler, cell_runner, load_profile_spec
    from quell.studies.prima.validate import summary, validate

    spec, base = load_profile_spec(spec_path)
    spec = _with_repetitions(spec, repetitions)
    bundle = load_bundle(bundle_path, spec.workload)
    if not spec.holdout:
        raise InputError(str(spec_path), [Problem("holdout", "no held-out points to measure")])
    environment = _env(spec.environment, env)
    profiler = Profiler(spec, base, out, cell_runner(environment, out))
    with _progress() as bar:
        planned = len(spec.holdout) * spec.repetitions
        task = bar.add_task("validate", total=planned, what="starting")
        cells = profiler.holdout(
            bundle.probe_table, lambda d, t, w: bar.update(task, completed=d, what=w)
        )
        bar.update(task, completed=planned, what="done")
    rows = validate(bundle, cells)
    t = Table(title="RTM and IM on held-out points (cf. PRIMA Table II)")
    for col in ("U %", "SF", "R ms", "R̂ ms", "error %", "U_total %", "IM(U_total)", "error %"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            f"{r.util_pct:.1f}",
            f"{r.sf:.2f}",
            f"{r.rt_s * 1e3:.1f}",
            f"{r.rt_pred_s * 1e3:.1f}",
            f"{r.rt_error_pct:.1f}",
            f"{r.total_util_pct:.1f}",
            f"{r.sf_pred:.2f}",
            ("-" if r.sf_error_pct is None else f"{r.sf_error_pct:.1f}")
            + (" *" if r.clamped else ""),
        )
    out_console.print(t)
    s = summary(rows)
    sf_err = s["im_sf_mape_pct"]
    sf_text = "-" if not isinstance(sf_err, float) else f"{sf_err:.1f}"
    out_console.print(
        f"RTM mean error {s['rtm_mape_pct']:.1f} % over {s['points']} points; IM mean SF error "
        f"{sf_text} % over the {s['im_sf_points']} with SF ≥ 0.1 "
        f"({s['clamped_points']} clamped, marked *)"
    )
    _print_noise(
        "The held-out runs' own scatter alone would give a perfect model",
        s["rtm_noise_pct"],
        s["im_sf_noise_pct"],
        "from how far each point's repetitions differ; the model's cells scatter too",
    )
    doc = {**s, "steal": _steal_report(profiler)}
    (out / "validation.json").write_text(json.dumps(doc, indent=1) + "\n")
    if as_json:
        print(json.dumps(doc, separators=(",", ":")))


@prima_app.command("show")
def show(bundle_path: Annotated[Path, typer.Argument(help="Model bundle.")]) -> None:
    """Print what a bundle was built on and its measured ranges."""
    from quell.cli.console import out_console
    from quell.models.bundle import load_bundle

    b = load_bundle(bundle_path)
    m = b.meta
    u = b.rtm.util_pct_
    out_console.print(
        f"workload {m.workload}, instance type {m.instance_type}, {m.environment}, "
        f"created {m.created}\nprobe {m.probe_kind} {m.probe_size_bytes} B every "
        f"{m.probe_period_s:g} s\nRTM: {u.size} points, U {u.min():.1f}–{u.max():.1f} %, "
        f"SF {b.rtm.sf_.min():.2f}–{b.rtm.sf_.max():.2f}\nIM: {b.im.total_util_pct_.size} knots,"
        f" U_total {b.im.total_util_pct_[0]:.1f}–{b.im.total_util_pct_[-1]:.1f} %, "
        f"{b.im.level_util_pct_.size} curve(s) by the instance's U"
    )


@prima_app.command("results")
def results(
    out: Annotated[Path, typer.Option("--out", help="Markdown file to write.")],
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="Directory of result files: *.validation.json, *-lab-comparison.json, "
            "*-sim-comparison.json, sim-*-comparison.json and *-misses.json, each kind in "
            "name order.",
            file_okay=False,
        ),
    ] = None,
    validation: Annotated[
        list[Path] | None,
        typer.Option("--validation", help="validation.json of `prima validate`."),
    ] = None,
    lab: Annotated[
        list[Path] | None, typer.Option("--lab", help="comparison.json of `lab compare`.")
    ] = None,
    sim: Annotated[
        list[Path] | None, typer.Option("--sim", help="comparison.json of `sim compare`.")
    ] = None,
    bench: Annotated[Path | None, typer.Option("--bench", help="bench/results/prima.json.")] = None,
) -> None:
    """Write the results page (docs/results/prima.md) from measured runs: those in --data,
    then those named one by one."""
    from quell.cli.console import say
    from quell.report.prima_results import ResultFiles, data_files, render

    files = data_files(data) if data is not None else ResultFiles()
    text = render(
        list(dict.fromkeys([*files.validation, *(validation or [])])),
        list(dict.fromkeys([*files.lab, *(lab or [])])),
        list(dict.fromkeys([*files.sim, *(sim or [])])),
        bench,
        files.misses,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    say(f"written {out}")

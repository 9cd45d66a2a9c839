"""``quell prima``: build PRIMA's models by automated tests, validate them, show a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.progress import Progress

    from quell.studies.prima.campaign import StealReport

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


def _print_steal(steal: StealReport) -> None:
    """The runs measured again for the machine's own CPU steal, when any."""
    from quell.cli.console import out_console

    bound = steal.max_steal_pct
    if steal.remeasured:
        out_console.print(
            f"{steal.remeasured} run(s) measured again: the machine's CPU steal averaged over "
            f"{bound:g} % during them (kept in {steal.stolen_path})"
        )
    if steal.over_steal:
        out_console.print(
            f"[bold]kept although every attempt had CPU steal over {bound:g} %:[/bold] "
            + ", ".join(steal.over_steal)
        )


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
    from quell.cli.console import emit_json, out_console
    from quell.report.fit import FitTable as Table
    from quell.studies.prima.campaign import ProfileCampaign

    campaign = ProfileCampaign(spec_path, out, env, repetitions)
    with _progress() as bar:
        task = bar.add_task("profile", total=campaign.planned, what="starting")
        done = campaign.run(
            lambda d, total, what: bar.update(task, completed=d, total=total, what=what)
        )
    bundle = done.bundle
    t = Table(title=f"probe isolation table ({done.spec.name})")
    for col in ("U %", "R_iso ms", "samples", "CI width / mean", "converged"):
        t.add_column(col, justify="right")
    pt = bundle.probe_table
    for u, r, n, c, ok in zip(
        pt.util_pct_, pt.r_iso_s_, pt.samples_, pt.ci_ratio_, pt.converged_, strict=True
    ):
        t.add_row(f"{u:.1f}", f"{r * 1e3:.1f}", str(n), f"{c:.3f}", "yes" if ok else "no (cap)")
    out_console.print(t)
    out_console.print(
        f"{len(bundle.data.rtm_points)} model cells → {done.bundle_path}"
        f" (workload {done.spec.workload}, {done.environment})"
    )
    _print_noise(
        "The cells' own scatter alone would give a model built on them",
        done.scatter["rt_noise_pct"],
        done.scatter["sf_noise_pct"],
        "from how far each cell's repetitions differ",
    )
    _print_steal(done.steal)
    if as_json:
        emit_json(done.to_json())


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
    from quell.cli.console import emit_json, out_console
    from quell.report.fit import FitTable as Table
    from quell.studies.prima.campaign import ValidationCampaign

    campaign = ValidationCampaign(spec_path, bundle_path, out, env, repetitions)
    with _progress() as bar:
        task = bar.add_task("validate", total=campaign.planned, what="starting")
        done = campaign.run(lambda d, total, what: bar.update(task, completed=d, what=what))
    t = Table(title="RTM and IM on held-out points (cf. PRIMA Table II)")
    for col in ("U %", "SF", "R ms", "R̂ ms", "error %", "U_total %", "IM(U_total)", "error %"):
        t.add_column(col, justify="right")
    for r in done.rows:
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
    s = done.summary
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
    _print_steal(done.steal)
    if as_json:
        emit_json(done.to_json())


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
    from quell.studies.prima.results import write_page

    write_page(out, data, validation or [], lab or [], sim or [], bench)
    say(f"written {out}")

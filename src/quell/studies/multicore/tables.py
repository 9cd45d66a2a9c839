"""The terminal text of ``quell model multicore``: a prediction's table per rate and its knee;
a fit's estimates and Table 3's errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from quell.report.fit import FitTable as Table

if TYPE_CHECKING:
    from rich.console import Console

    from quell.studies.multicore.report import Fitted

PREDICTION_COLUMNS = (
    "rate req/s",
    "E[k] cpu0",
    "P_N cpu0",
    "E[T] cpu0 ms",
    "E[Ts] cpu0 ms",
    "util cpu0",
    "E[T] ms",
    "tput req/s",
    "util per core",
)


def print_prediction(doc: dict[str, Any], console: Console) -> None:
    """``quell.models.multicore.prediction_document``: a row per rate, then the knee."""
    m = doc["model"]
    table = Table(
        title=(
            f"{m['cores']} cores, {m['interrupt_cores']} interrupt core(s), μ1 = {m['mu1_rps']:g}, "
            f"μ2 = {m['mu2_rps']:g} req/s, p = {m['p']:.4g}, N = {m['capacity']}, "
            f"{m['discipline']}"
        )
    )
    for col in PREDICTION_COLUMNS:
        table.add_column(escape(col), justify="right")
    for r in doc["rates"]:
        c, s = r["cpu0"], r["system"]
        table.add_row(
            f"{r['rate']:g}",
            f"{c['E_k']:.4g}",
            f"{c['P_N']:.3g}",
            f"{1e3 * c['E_T_s']:.4g}",
            f"{1e3 * c['E_Ts_s']:.4g}",
            f"{c['util']:.3f}",
            f"{1e3 * s['E_T_s']:.4g}",
            f"{s['throughput_rps']:.5g}",
            " ".join(f"{u:.3f}" for u in s["util_per_core"]),
        )
    console.print(table)
    console.print(f"knee (busiest core's CPU demand reaches one core): {doc['knee_rps']:.5g} req/s")


def print_fit(
    fitted: Fitted, console: Console, say: Callable[[str], None] = lambda m: None
) -> None:
    """The estimates with their standard errors, Table 3's mean relative errors, and (``say``)
    where the report is."""
    f = fitted.doc["fit"]
    console.print(
        f"fitted on {fitted.fit_config!r} ({fitted.discipline}): μ1 = {f['mu1_rps']:.0f} ± "
        f"{f['mu1_se_rps']:.0f} req/s, p = {f['p']:.3f} ± {f['p_se']:.3f}, μ2 = "
        f"{f['mu2_rps']:.0f} ± {f['mu2_se_rps']:.0f} req/s (χ² {f['chi2']:.3g}, {f['dof']} dof)",
        highlight=False,
    )
    rows = fitted.error_rows
    table = Table(title="Mean relative error between model and measurement (%)")
    for col in rows[0]:
        table.add_column(escape(col), justify="right")
    for row in rows[1:]:
        table.add_row(*row)
    console.print(table)
    say(f"report written to {fitted.report_dir}")

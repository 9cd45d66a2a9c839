"""What users feel, per request: beside the interval SLO (the share of instance-intervals whose
mean meets R_th), the share of requests above R_th, the share above 2 × R_th and the 99th
percentile of the response time, over every request sent in a phase.

A request that got no answer (timed out, refused, dropped, or an error: anything but a 2xx or
3xx response; an error page is not what the user asked for, and a service that fails fast must
not look faster for it) counts as taking the workload's timeout (``workload.timeout_s``, live:
``request_timeout_s``): that is how long its user waited. An answer that came after the timeout
counts at the timeout too: its user had given up by then. So every response time felt lies in
[0, timeout], and both thresholds must lie below the timeout (a scenario with 2 × R_th at or
past ``workload.timeout_s`` is refused), so that every unanswered request counts above both.

``share_above_rth`` is P(T > R_th) over the requests, ``share_above_2rth`` P(T > 2 R_th), and
``p99_rt_seconds`` the 99th percentile by nearest rank: the smallest time within which at least
99 % of the requests were answered (of 10 requests, the slowest; of 200, the 198th fastest).

``felt`` is the one computation; the run report, ``sim compare``, ``lab compare`` and the live
controller's page all call it, on the run store's per-request records (``phase_felt``) or on
the live controller's window of HAProxy's log."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from quell.errors import InputError, Problem

if TYPE_CHECKING:
    from quell.scenario.model import Scenario

P99: Final = 0.99

FELT_KEYS: Final = (
    "requests",
    "unanswered",
    "share_above_rth",
    "share_above_2rth",
    "p99_rt_seconds",
)
"""The keys of ``Felt.to_dict``, in table order."""


@dataclass(frozen=True)
class Felt:
    """What the users of some requests felt. The shares are ``None`` without a target, and
    every figure is ``None`` without a request."""

    requests: int
    """Requests counted: answered or not."""
    unanswered: int
    """Of them, those that got no 2xx or 3xx answer, counted at the timeout."""
    share_above_rth: float | None
    """Share of the requests whose response time felt is above R_th (0 to 1)."""
    share_above_2rth: float | None
    """Share above 2 × R_th."""
    p99_rt_seconds: float | None
    """The smallest time within which 99 % of the requests were answered (nearest rank)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def felt(rt_s: ArrayLike, answered: ArrayLike, timeout_s: float, target_rt_s: float | None) -> Felt:
    """The figures of requests with response times ``rt_s`` (seconds; read only where
    ``answered``, so an unanswered one may hold NaN), ``answered`` (one flag per request),
    counted at ``timeout_s`` when unanswered or answered later, against R_th = ``target_rt_s``
    (``None``: no shares). Bad input raises ``InputError``: arrays of different lengths, an
    answered time that is NaN or negative, a timeout that is not a positive number, a target
    that is not positive or whose double is not below the timeout."""
    rt = np.asarray(rt_s, dtype=np.float64)
    ok = np.asarray(answered)
    problems = []
    if rt.ndim != 1 or ok.ndim != 1 or rt.shape != ok.shape:
        problems.append(
            Problem("rt_s", f"shape {rt.shape} and answered {ok.shape}: one flag per request")
        )
    elif ok.dtype != np.bool_:
        problems.append(Problem("answered", f"flags must be booleans, not {ok.dtype}"))
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
        problems.append(Problem("timeout_s", f"{timeout_s!r} is not a positive number of seconds"))
    elif target_rt_s is not None and not (
        math.isfinite(target_rt_s) and 0 < 2 * target_rt_s < timeout_s
    ):
        problems.append(
            Problem(
                "target_rt_s",
                f"2 × {target_rt_s!r} s is not between 0 and the timeout ({timeout_s:g} s): "
                "an unanswered request, counted at the timeout, must count above both thresholds",
            )
        )
    if not problems:
        bad = ok & ~(rt >= 0)  # NaN fails the comparison too
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            problems.append(
                Problem(f"rt_s[{k}]", f"an answered request took {rt[k]!r} s (not a time)")
            )
    if problems:
        raise InputError("per-request figures", problems)
    n = int(rt.size)
    unanswered = int(n - np.count_nonzero(ok))
    if n == 0:
        return Felt(0, 0, None, None, None)
    t = np.full(n, float(timeout_s))
    t[ok] = np.minimum(rt[ok], timeout_s)
    p99 = float(np.sort(t)[math.ceil(P99 * n) - 1])
    if target_rt_s is None:
        return Felt(n, unanswered, None, None, p99)
    above = float(np.count_nonzero(t > target_rt_s)) / n
    above2 = float(np.count_nonzero(t > 2 * target_rt_s)) / n
    return Felt(n, unanswered, above, above2, p99)


def answered_mask(latency_s: NDArray[Any], status: NDArray[Any]) -> NDArray[np.bool_]:
    """Which of a run store's requests were answered: a response time, and a 2xx or 3xx."""
    lat = np.asarray(latency_s, dtype=np.float64)
    code = np.asarray(status)
    return np.asarray(np.isfinite(lat) & (code >= 200) & (code < 400))


def phase_felt(
    requests: Mapping[str, NDArray[Any]],
    start_s: float,
    end_s: float,
    timeout_s: float,
    target_rt_s: float | None,
) -> Felt:
    """``felt`` over the run store's requests (``RunStore.request_arrays``) sent in
    [``start_s``, ``end_s``), answered or not."""
    send = np.asarray(requests["send_s"], dtype=np.float64)
    sel = (send >= start_s) & (send < end_s)
    ok = answered_mask(requests["latency_s"], requests["status"])[sel]
    rt = np.asarray(requests["latency_s"], dtype=np.float64)[sel]
    return felt(rt, ok, timeout_s, target_rt_s)


def phases_felt(
    requests: Mapping[str, NDArray[Any]],
    phases: Sequence[Sequence[Any]],
    timeout_s: float,
    target_rt_s: float | None,
) -> dict[str, dict[str, Any]]:
    """Per phase (``(name, start_s, end_s)``, a run's phases), ``phase_felt`` as a dict."""
    return {
        str(name): phase_felt(requests, float(start), float(end), timeout_s, target_rt_s).to_dict()
        for name, start, end in phases
    }


def scenario_felt(
    requests: Mapping[str, NDArray[Any]] | None, scenario: Scenario
) -> dict[str, dict[str, Any]] | None:
    """``phases_felt`` over the scenario's phases, its R_th and its workload's timeout;
    ``None`` without per-request records (``requests`` ``None`` or empty: a simulator run with
    ``service.request_log`` off)."""
    if requests is None or not len(requests["send_s"]):
        return None
    target = scenario.target.mean_rt_s if scenario.target else None
    return phases_felt(requests, scenario.phases(), scenario.workload.timeout_s, target)


def policy_rows(
    users: Mapping[str, Mapping[str, Mapping[str, Any]] | None],
) -> list[tuple[list[str], Mapping[str, Any] | None]]:
    """The rows of a comparison's table of the figures: per policy (``users``: policy → its
    ``scenario_felt``), one per phase; none for a policy without them."""
    return [
        ([policy, phase], f)
        for policy, phases in users.items()
        if phases is not None
        for phase, f in phases.items()
    ]


# -- showing them -------------------------------------------------------------------------------
FELT_HEADERS: Final = ("requests", "unanswered", "> R_th %", "> 2R_th %", "p99 ms")
"""The headers of the figures' columns, in ``FELT_KEYS`` order."""


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.2f}"


def felt_cells(f: Mapping[str, Any] | None) -> list[str]:
    """One row's cells of ``FELT_HEADERS`` from a ``Felt.to_dict()`` (``-`` where none)."""
    if f is None:
        return ["-"] * len(FELT_HEADERS)
    p99 = f.get("p99_rt_seconds")
    return [
        str(f["requests"]),
        str(f["unanswered"]),
        _pct(f.get("share_above_rth")),
        _pct(f.get("share_above_2rth")),
        "-" if p99 is None else f"{p99 * 1e3:.1f}",
    ]


def felt_title(target_rt_s: float | None, timeout_s: float | None) -> str:
    """The title of a table of the figures."""
    parts = [] if target_rt_s is None else [f"R_th = {target_rt_s * 1e3:g} ms"]
    if timeout_s is not None:
        parts.append(f"unanswered at the {timeout_s:g} s timeout")
    return "what users felt, per request sent" + (f" ({'; '.join(parts)})" if parts else "")


def felt_table(
    rows: Sequence[tuple[Sequence[str], Mapping[str, Any] | None]],
    labels: Sequence[str],
    target_rt_s: float | None,
    timeout_s: float | None,
) -> Any:
    """A ``FitTable`` of the figures: per row its labels (``labels`` their headers, e.g.
    policy and phase) and a ``Felt.to_dict()``."""
    from rich.markup import escape

    from quell.report.fit import FitTable

    table = FitTable(title=felt_title(target_rt_s, timeout_s), title_justify="left")
    for header in labels:
        table.add_column(header)
    for header in FELT_HEADERS:
        table.add_column(header, justify="right")
    for names, f in rows:
        table.add_row(*(escape(n) for n in names), *felt_cells(f))
    return table


def felt_html(
    rows: Sequence[tuple[Sequence[str], Mapping[str, Any] | None]],
    labels: Sequence[str],
    target_rt_s: float | None,
    timeout_s: float | None,
) -> str:
    """The same table as ``felt_table``, as an HTML ``<table>``."""
    from html import escape

    head = "".join(f"<th>{escape(h)}</th>" for h in (*labels, *FELT_HEADERS))
    body = "".join(
        "<tr>"
        + "".join(f"<td>{escape(n)}</td>" for n in names)
        + "".join(f'<td class="num">{escape(c)}</td>' for c in felt_cells(f))
        + "</tr>"
        for names, f in rows
    )
    return (
        f"<table><caption>{escape(felt_title(target_rt_s, timeout_s))}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )

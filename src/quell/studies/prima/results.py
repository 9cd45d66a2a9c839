"""``docs/results/prima.md`` from measured runs: the model validation (Table II), lab
comparisons (``lab compare``) and simulator comparisons (``sim compare``). Nothing in it is typed
by hand: rerun the experiments and this page follows. ``data_files`` finds them in one directory
by name, so ``make results`` regenerates the page in one command."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quell.core.files import load_json
from quell.errors import InputError, Problem
from quell.report.compare import every_request_rows
from quell.report.misses import PLACE_TEXT, PLACES, MissBreakdown, ceiling_text

VALIDATION_GLOB = "*.validation.json"
LAB_GLOB = "*-lab-comparison.json"
SIM_GLOBS = ("*-sim-comparison.json", "sim-*-comparison.json")
MISSES_GLOB = "*-misses.json"
"""Result files by name: ``prima validate``'s validation.json, ``lab compare --json``,
``sim compare --json`` and ``sim misses --json`` output."""


@dataclass
class ResultFiles:
    """The measured files one results page is made of, in page order within each kind."""

    validation: list[Path] = field(default_factory=list)
    lab: list[Path] = field(default_factory=list)
    sim: list[Path] = field(default_factory=list)
    misses: list[Path] = field(default_factory=list)


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key that orders the numbers inside names by value (table7 before table10)."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", name)
        if part
    )


def data_files(directory: Path) -> ResultFiles:
    """Every result file in ``directory`` by kind, each kind in natural order of file name.

    A ``*.json`` that matches none of the names is refused rather than left off the page."""
    if not directory.is_dir():
        raise InputError(str(directory), [Problem("--data", "not a directory")])

    def sorted_paths(paths: Sequence[Path]) -> list[Path]:
        return sorted(set(paths), key=lambda p: natural_key(p.name))

    found = ResultFiles(
        validation=sorted_paths(list(directory.glob(VALIDATION_GLOB))),
        lab=sorted_paths(list(directory.glob(LAB_GLOB))),
        sim=sorted_paths([p for g in SIM_GLOBS for p in directory.glob(g)]),
        misses=sorted_paths(list(directory.glob(MISSES_GLOB))),
    )
    known = {*found.validation, *found.lab, *found.sim, *found.misses}
    stray = sorted((p for p in directory.glob("*.json") if p not in known), key=lambda p: p.name)
    if stray:
        names = ", ".join([VALIDATION_GLOB, LAB_GLOB, *SIM_GLOBS, MISSES_GLOB])
        raise InputError(
            str(directory), [Problem(p.name, f"not a result file name ({names})") for p in stray]
        )
    return found


def _read(path: Path) -> dict[str, Any]:
    data = load_json(path, "result file")
    if not isinstance(data, dict):
        raise InputError(str(path), [Problem("", "expected a JSON object")])
    return data


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def validation_section(v: dict[str, Any], source: str) -> list[str]:
    model = Path(source).name.removesuffix(".json").removesuffix(".validation")
    out = [
        f"## Model validation (cf. Table II): {model}",
        "",
        f"Source: `{source}`. {v['points']} held-out lab points; RTM mean absolute error "
        f"**{_f(v['rtm_mape_pct'], '.1f')} %**; IM mean absolute SF error "
        f"**{_f(v['im_sf_mape_pct'], '.1f')} %** over the {v['im_sf_points']} points with "
        f"SF ≥ 0.1, and **{_f(v.get('im_total_mape_pct'), '.1f')} %** read the other way "
        "(U_total from the measured SF, as the controller uses it); "
        f"{v['clamped_points']} point(s) clamped. Paper: 7.2 % / 6.9 %.",
        *_noise_line(v),
        "",
        "| U % | SF | R ms | R̂ ms | error % | U_total % | IM(U_total) | IM⁻¹(SF) % |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in v["rows"]:
        out.append(
            f"| {r['util_pct']:.1f} | {r['sf']:.2f} | {r['rt_s'] * 1e3:.2f} | "
            f"{r['rt_pred_s'] * 1e3:.2f} | {r['rt_error_pct']:.1f} | {r['total_util_pct']:.1f} | "
            f"{r['sf_pred']:.2f} | {_f(r.get('total_pred_pct'), '.1f')} |"
        )
    return [*out, ""]


def _noise_line(v: dict[str, Any]) -> list[str]:
    rt, sf = v.get("rtm_noise_pct"), v.get("im_sf_noise_pct")
    if rt is None and sf is None:
        return []
    return [
        "",
        "The held-out runs' own scatter alone (from how far each point's repetitions differ) "
        f"would give a mean error of about **{_f(rt, '.1f')} %** in RT and "
        f"**{_f(sf, '.1f')} %** in SF against a perfect model; the model's cells were measured "
        "the same way and scatter too (`quell prima profile` prints theirs).",
    ]


def _check_policies(c: dict[str, Any], source: str, kind: type, what: str) -> None:
    if not isinstance(c.get("policies"), kind) or not c["policies"]:
        raise InputError(source, [Problem("policies", f"not {what} comparison")])


def lab_section(c: dict[str, Any], source: str) -> list[str]:
    if "repeats" in c:
        return repeats_section(c, source)
    _check_policies(c, source, dict, "a `lab compare`")
    target = c.get("target_rt_s")
    names = list(c["policies"])
    phases = [p["phase"] for p in c["policies"][names[0]]["phases"]]
    out = [
        f"## Lab: {c['scenario']}",
        "",
        f"Source: `{source}`. Worst instance's mean RT per phase over the settled window "
        f"({c['settle_s']:g} s after the phase starts, or boot delay + 2 periods after the "
        f"policy's last added instance in that phase if later and before the phase ends), "
        f"R_th = "
        f"{_f(None if target is None else target * 1e3, '.0f')} ms; **bold** = above R_th. "
        "Steal: the machine's largest mean CPU steal over a settled window (- where the run "
        "predates its recording).",
        "",
        "| policy | " + " | ".join(phases) + " | scaling actions | errors | steal % |",
        "|---|" + "---:|" * (len(phases) + 3),
    ]
    for name in names:
        r = c["policies"][name]
        cells = []
        for p in r["phases"]:
            w = p["worst_mean_rt_s"]
            text = "-" if w is None else f"{w * 1e3:.1f}"
            cells.append(f"**{text}**" if p["meets_target"] is False else text)
        out.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {r['scaling_actions']} | {r['errors']} | {_f(r.get('max_steal_pct'), '.2f')} |"
        )
    out += [
        "",
        "Each instance's settled mean RT (ms) with, where recorded, the requests it answered, and "
        "where the settled window starts:",
        "",
        "| policy | " + " | ".join(phases) + " |",
        "|---|" + "---|" * len(phases),
    ]
    for name in names:
        cells = [
            (", ".join(_instance_cell(p, i, rt) for i, rt in p["mean_rt_s"].items()) or "-")
            + f" (from {p['settled_from_s']:.0f} s)"
            for p in c["policies"][name]["phases"]
        ]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    every = every_request_rows(c)
    if every is not None:
        out += [
            "",
            "Every answered request in the settled window, whichever instance served it: mean / "
            "95th percentile (ms):",
            "",
            "| policy | " + " | ".join(phases) + " |",
            "|---|" + "---:|" * len(phases),
        ]
        out += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in every]
    return [*out, ""]


def repeats_section(c: dict[str, Any], source: str) -> list[str]:
    """A ``lab compare --repeats`` summary: per policy and phase, how many repeats met R_th,
    and each figure's mean ± sd with its paired difference from the first policy."""
    from quell.report.repeats import REPEAT_HEADERS, repeat_lines

    _check_policies(c, source, list, "a `lab compare --repeats`")
    target = c.get("target_rt_s")
    first = c["policies"][0]["policy"]
    out = [
        f"## Lab: {c['scenario']}, {c['repeats']} repeats",
        "",
        f"Source: `{source}` (each repeat's comparison is listed in it). Per phase over the "
        f"settled window: how many repeats met R_th = "
        f"{_f(None if target is None else target * 1e3, '.0f')} ms, the scaling actions the "
        "policy asked for in the whole phase in each repeat (`-`: not recorded), the worst "
        "instance's mean RT, and the mean and 95th percentile over every answered request, each as mean ± sd "
        f"over the repeats (ms), with its paired difference from {first} (per repeat, relative "
        "to its figure; mean ± standard error, and on how many repeats lower).",
        "",
        "| policy | phase | " + " | ".join(REPEAT_HEADERS) + " |",
        "|---|---|" + "---:|" * len(REPEAT_HEADERS),
    ]
    for policy, phase, cells in repeat_lines(c["policies"]):
        out.append(f"| {policy} | {phase} | " + " | ".join(cells) + " |")
    return [*out, ""]


def _instance_cell(phase: dict[str, Any], instance: str, rt_s: float) -> str:
    """``i1 12.2``, with the requests it answered where the file counts them: ``i1 12.2 (1233)``."""
    n = (phase.get("requests") or {}).get(instance)
    return f"{instance} {rt_s * 1e3:.1f}" + ("" if n is None else f" ({n})")


def _settling(r: dict[str, Any], key: str, count: str) -> float | None:
    """A row's settling share (%), from the row or, in files written before it was, from its
    SLO counts."""
    if r.get(key) is not None:
        return float(r[key])
    slo = r.get("slo") or {}
    n, k = slo.get("instance_intervals"), slo.get(count)
    return None if not n or k is None else round(100.0 * k / n, 3)


def sim_section(c: dict[str, Any], source: str) -> list[str]:
    _check_policies(c, source, list, "a `sim compare`")
    if "seeds" in c:
        return seeds_section(c, source)
    target = c.get("target_rt_s")
    out = [
        f"## Simulator: {c['scenario']}",
        "",
        f"Source: `{source}`. SLO = share of instance-intervals with mean RT ≤ R_th "
        f"({_f(None if target is None else target * 1e3, 'g')} ms): settled, outside the settle "
        f"windows ({c['settle_s']:g} s after each change), and over all instance-intervals; "
        "settling = the share left out, own = of which only for the policy's own scaling "
        "actions.",
        "",
        "| policy | SLO settled % | SLO all % | settling % | own % | mean RT ms | p95 RT ms "
        "| instance-s | oracle instance-s | × oracle | scaling |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in c["policies"]:
        inst, oracle = r["instance_seconds"], r["oracle_instance_seconds"]
        ratio = inst / oracle if inst is not None and oracle else None
        out.append(
            f"| {r['policy']} | {_f(r['slo_pct'], '.2f')} | {_f(r.get('slo_all_pct'), '.2f')} | "
            f"{_f(_settling(r, 'settling_pct', 'excluded_intervals'), '.1f')} | "
            f"{_f(_settling(r, 'settling_own_pct', 'excluded_own_intervals'), '.1f')} | "
            f"{_f(r['mean_rt_ms'], '.2f')} | "
            f"{_f(r['p95_rt_ms'], '.2f')} | {_f(inst, '.0f')} | "
            f"{_f(oracle, '.0f')} | {_f(ratio, '.2f')} | {_f(r['scaling_actions'], 'd')} |"
        )
    return [*out, ""]


def _pm(stat: dict[str, Any] | None, spec: str, spread: str = "sd") -> str:
    if stat is None:
        return "-"
    sd = stat.get(spread)
    mean = format(stat["mean"], spec)
    return mean if sd is None else f"{mean} ± {format(sd, spec.lstrip('+'))}"


def seeds_section(c: dict[str, Any], source: str) -> list[str]:
    """A ``sim compare --seeds N`` summary: each policy's mean ± sd over the seeds and its
    paired difference from the first policy (mean ± standard error); feasible: of the
    instance-intervals the oracle finds feasible."""
    seeds = c["seeds"]
    first = c["policies"][0]["policy"]
    out = [
        f"## Simulator over seeds {seeds[0]}–{seeds[-1]}: {c['scenario']}",
        "",
        f"Source: `{source}`. Mean ± sample sd over {len(seeds)} seeds; vs {first}: the paired "
        "difference per seed (policy − "
        f"{first}), mean ± standard error, and on how many seeds the policy was higher.",
        "",
        f"| policy | SLO settled % | vs {first} | higher | SLO all % | vs {first} | feasible % "
        f"| settling % | instance-s | vs {first} | oracle instance-s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in c["policies"]:
        vs = r.get("slo_pct_vs_first")
        out.append(
            f"| {r['policy']} | {_pm(r['slo_pct'], '.2f')} | {_pm(vs, '+.2f', 'se')} | "
            f"{'-' if vs is None else str(vs['higher_on']) + '/' + str(vs['of'])} | "
            f"{_pm(r.get('slo_all_pct'), '.2f')} | "
            f"{_pm(r.get('slo_all_pct_vs_first'), '+.2f', 'se')} | "
            f"{_pm(r.get('slo_feasible_pct'), '.2f')} | "
            f"{_pm(r.get('settling_pct'), '.1f')} | {_pm(r['instance_seconds'], '.0f')} | "
            f"{_pm(r.get('instance_seconds_vs_first'), '+.0f', 'se')} | "
            f"{_pm(r['oracle_instance_seconds'], '.0f')} |"
        )
    return [*out, ""]


def misses_section(m: dict[str, Any], source: str) -> list[str]:
    """A ``sim misses --json`` breakdown: where the run's missed intervals fell, and the ceiling."""
    b = MissBreakdown.from_dict(m)
    lines = [
        f"## Simulator, where the misses fall: {m['scenario']}",
        "",
        f"Source: `{source}` (`quell sim misses RUN_DIR --json`). {b.misses:,} of {b.served:,} "
        f"served instance-intervals above R_th ({b.target_rt_s * 1e3:g} ms), placed by the "
        "neighbours' arrivals on the instance's host, at a weight above 0 or at 0.",
        "",
        "| where the interval fell | weight > 0 | weight 0 |",
        "|---|---:|---:|",
    ]
    lines += [f"| {PLACE_TEXT[p]} | {b.by_place[p][0]:,} | {b.by_place[p][1]:,} |" for p in PLACES]
    text = ceiling_text(b)
    return [*lines, "", *([text, ""] if text else [])]


def bench_section(b: dict[str, Any], source: str) -> list[str]:
    return [
        "## Decision time (make bench)",
        "",
        f"{b['instances']} instances: median {b['prima_decision_ms_median']} ms per decision "
        f"(goal ≤ {b['goal_ms']} ms), {b['ratio_prima_over_rr']}× round robin's on the same "
        "snapshots.",
        "",
    ]


Section = Callable[[dict[str, Any], str], list[str]]


def _section(build: Section, path: Path, what: str) -> list[str]:
    """``build``'s lines for the result file at ``path``; a file without the keys and types
    ``build`` reads (another kind of result file, an older format) raises ``InputError``."""
    data = _read(path)
    try:
        return build(data, str(path))
    except KeyError as exc:
        problem = Problem(str(exc.args[0]), f"required key is missing: is this {what}?")
        raise InputError(str(path), [problem]) from None
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(str(path), [Problem("", f"cannot be read as {what}: {exc}")]) from None


def render(
    validation: Sequence[Path],
    lab: Sequence[Path],
    sim: Sequence[Path],
    bench: Path | None = None,
    misses: Sequence[Path] = (),
) -> str:
    lines = [
        "# PRIMA: measured results",
        "",
        "Generated by `quell prima results` from the files named below; see "
        "[docs/papers/prima.md](../papers/prima.md) for how each was produced.",
        "",
    ]
    for p in validation:
        lines += _section(validation_section, p, "a `prima validate` result")
    for p in lab:
        lines += _section(lab_section, p, "a `lab compare` comparison")
    for p in sim:
        lines += _section(sim_section, p, "a `sim compare` comparison")
    for p in misses:
        lines += _section(misses_section, p, "a `sim misses` breakdown")
    if bench is not None:
        lines += _section(bench_section, bench, "a bench result (bench/results/prima.json)")
    return "\n".join(lines)


def write_page(
    out: Path,
    data: Path | None = None,
    validation: Sequence[Path] = (),
    lab: Sequence[Path] = (),
    sim: Sequence[Path] = (),
    bench: Path | None = None,
) -> None:
    """The page at ``out`` from the result files in ``data`` (``data_files``), then those
    named one by one, each file once."""
    files = data_files(data) if data is not None else ResultFiles()
    text = render(
        list(dict.fromkeys([*files.validation, *validation])),
        list(dict.fromkeys([*files.lab, *lab])),
        list(dict.fromkeys([*files.sim, *sim])),
        bench,
        files.misses,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)

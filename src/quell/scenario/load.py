"""Read and check a scenario file. Every problem is reported at once, with the key it concerns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from quell.core.files import load_yaml
from quell.core.schema import validation_problems
from quell.errors import InputError, Problem
from quell.scenario.attribution import check_attribution
from quell.scenario.model import Scenario


def _pydantic_problems(err: ValidationError) -> list[Problem]:
    # Discriminated unions add the tag as a path element ("poisson", "stress-ng"): drop it.
    return validation_problems(err, skip=_TAGS)


_TAGS = frozenset(
    {
        "poisson",
        "deterministic",
        "schedule",
        "mmpp2",
        "trace",
        "closed",
        "stress-ng",
        "iperf3",
        "fio",
    }
)


def check_scenario(s: Scenario) -> list[Problem]:
    """Checks that span sections: references, uniqueness, times inside the run."""
    problems: list[Problem] = []
    host_ids = [h.id for h in s.hosts]
    inst_ids = [i.id for i in s.instances]
    ant_ids = [a.id for a in s.antagonists]
    for what, ids in (("hosts", host_ids), ("instances", inst_ids), ("antagonists", ant_ids)):
        for dup, n in Counter(ids).items():
            if n > 1:
                problems.append(Problem(what, f"id {dup!r} is used {n} times"))
    for dup, n in Counter(inst_ids + ant_ids).items():
        if n > 1 and dup in inst_ids and dup in ant_ids:
            problems.append(Problem("antagonists", f"id {dup!r} is also an instance id"))
    known_hosts = set(host_ids)
    for k, inst in enumerate(s.instances):
        if inst.host not in known_hosts:
            problems.append(Problem(f"instances[{k}].host", f"unknown host {inst.host!r}"))
        if inst.gzip and inst.server != "nginx":
            problems.append(Problem(f"instances[{k}].gzip", "gzip needs server: nginx"))
        if inst.instrument and inst.server not in ("lighttpd", "apache"):
            problems.append(
                Problem(f"instances[{k}].instrument", "instrument needs server: lighttpd or apache")
            )
        if inst.apache is not None and inst.server != "apache":
            problems.append(
                Problem(f"instances[{k}].apache", "apache settings need server: apache")
            )
    for k, ant in enumerate(s.antagonists):
        if ant.host not in known_hosts:
            problems.append(Problem(f"antagonists[{k}].host", f"unknown host {ant.host!r}"))
    file_paths = [f.path for f in s.files]
    page_paths = [p.path for p in s.pages]
    for dup, n in Counter(file_paths + page_paths).items():
        if n > 1:
            where = "pages" if dup in page_paths else "files"
            problems.append(Problem(where, f"path {dup!r} is listed {n} times"))
    wl = s.workload
    if (wl.requests is None) == (wl.sessions is None):
        problems.append(Problem("workload", "give exactly one of 'requests' and 'sessions'"))
    for k, req in enumerate(wl.requests or []):
        if req.path not in file_paths and req.path not in page_paths:
            problems.append(
                Problem(f"workload.requests[{k}].path", f"{req.path!r} is not in files or pages")
            )
    if page_paths:
        servers = {i.server for i in s.instances}
        if s.scaling is not None:
            servers.add(s.scaling.server)
        if servers != {"apache"}:
            problems.append(
                Problem("pages", "PHP pages need every instance (and scaling.server) to be apache")
            )
    if s.target is not None and 2 * s.target.mean_rt_s >= wl.timeout_s:
        problems.append(
            Problem(
                "target.mean_rt_s",
                f"2 × {s.target.mean_rt_s:g} s is not below workload.timeout_s "
                f"({wl.timeout_s:g} s): a request without an answer counts at the timeout, "
                "which must lie above R_th and 2 × R_th",
            )
        )
    if getattr(wl.arrival, "process", "") == "closed" and wl.sessions is not None:
        problems.append(
            Problem("workload.sessions", "video sessions need an open-loop arrival process")
        )
    arrival = wl.arrival
    if getattr(arrival, "process", "") == "schedule":
        for k, pt in enumerate(arrival.points):  # type: ignore[union-attr]
            if pt.at_s > s.duration_s:
                problems.append(
                    Problem(
                        f"workload.arrival.points[{k}].at_s",
                        f"{pt.at_s} s is after the end of the run ({s.duration_s} s)",
                    )
                )
    if s.interval_s > s.duration_s:
        problems.append(
            Problem("interval_s", f"{s.interval_s} s is longer than duration_s ({s.duration_s} s)")
        )
    if s.scaling is not None:
        sc = s.scaling
        for k, h in enumerate(sc.hosts):
            if h not in known_hosts:
                problems.append(Problem(f"scaling.hosts[{k}]", f"unknown host {h!r}"))
        if sc.max_instances is not None and sc.max_instances < sc.min_instances:
            problems.append(
                Problem(
                    "scaling.max_instances",
                    f"{sc.max_instances} is below min_instances ({sc.min_instances})",
                )
            )
    link_of = {h.id: h.link_mbit for h in s.hosts}
    for k, src in enumerate(s.service.interference if s.service else []):
        for j, h in enumerate(src.hosts or list(link_of)):
            where = f"service.interference[{k}].hosts" + (f"[{j}]" if src.hosts else "")
            if h not in link_of:
                problems.append(Problem(where, f"unknown host {h!r}"))
            elif link_of[h] is None:
                problems.append(Problem(where, f"host {h!r} has no link_mbit"))
    names = [s.policy.key] + [p.key for p in s.compare]
    for dup, n in Counter(names).items():
        if n > 1:
            problems.append(
                Problem("compare", f"{dup!r} names {n} runs: give each a distinct label")
            )
    known_ants = set(ant_ids)
    running: set[str] = set()
    phase_names = [s.initial_phase]
    for k, ev in sorted(enumerate(s.events), key=lambda kv: kv[1].at_s):
        where = f"events[{k}]"
        if ev.at_s >= s.duration_s:
            problems.append(
                Problem(f"{where}.at_s", f"{ev.at_s} s is not before the end ({s.duration_s} s)")
            )
        if ev.phase is None and not ev.start and not ev.stop:
            problems.append(Problem(where, "event does nothing: give phase, start or stop"))
        if ev.phase is not None:
            if ev.phase in phase_names:
                problems.append(Problem(f"{where}.phase", f"phase {ev.phase!r} is already used"))
            phase_names.append(ev.phase)
        for a in ev.start:
            if a not in known_ants:
                problems.append(Problem(f"{where}.start", f"unknown antagonist {a!r}"))
            elif a in running:
                problems.append(Problem(f"{where}.start", f"antagonist {a!r} is already running"))
            running.add(a)
        for a in ev.stop:
            if a not in known_ants:
                problems.append(Problem(f"{where}.stop", f"unknown antagonist {a!r}"))
            elif a not in running:
                problems.append(Problem(f"{where}.stop", f"antagonist {a!r} is not running"))
            running.discard(a)
    return problems


def parse_scenario(data: Any, source: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    """A checked scenario; ``base_dir``: the scenario's folder, where files it names (the
    attribution model) are read and checked (``None``: not read)."""
    if not isinstance(data, dict):
        raise InputError(source, [Problem("", "a scenario must be a mapping of keys to values")])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as err:
        raise InputError(source, _pydantic_problems(err)) from None
    problems = check_scenario(scenario) + check_attribution(scenario, base_dir)
    if problems:
        raise InputError(source, problems)
    return scenario


def load_scenario(path: Path) -> Scenario:
    """Read a YAML scenario file; raises ``InputError`` naming every problem found (a file
    that cannot be read as YAML is refused by ``quell.core.files.load_yaml``)."""
    return parse_scenario(load_yaml(path, "file"), str(path), path.parent)

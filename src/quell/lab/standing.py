"""A lab left standing: ``quell lab up`` brings a scenario's hosts, instances and HAProxy up with
no policy and returns, leaving them running; agents, Prometheus and the live controller then run
as separate processes against them, as on real hosts. ``quell lab down`` (or ``quell lab
clean``) tears them down.

What is up is written to ``lab.json`` in the run directory: the run tag (every process,
namespace, cgroup and file of the lab carries it, so teardown finds exactly them), HAProxy's
sockets, each instance's address, cgroup, pid, probe URL and (apache instances) the files of
its Apache and php-fpm, and which instances are
pre-provisioned slots (declared ``disabled`` in HAProxy, their servers running, put in service
through the runtime API). Beside it: an agent config per host, a Prometheus config and a live
controller config that point at them (``quell.live.config`` reads them)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from quell.errors import ComponentError, InputError, Problem
from quell.lab.balancer import BACKEND, FRONTEND_ADDR, FRONTEND_PORT
from quell.lab.cleanup import clean_tag, runner_record
from quell.lab.instance import LabInstance
from quell.lab.prober import PROBE_PATH
from quell.lab.servers import PORT, PROBE_PORT
from quell.lab.tag import RUNTIME_ROOT, RunTag
from quell.lab.testbed import StatusFn, Testbed
from quell.scenario.model import Instance, Scenario
from quell.signals.cgroup import CgroupLayout
from quell.signals.netns import NETNS_DIR
from quell.workload.schedule import RequestSchedule

STATE_FILE = "lab.json"
SCRAPE_INTERVAL_S = 0.5
"""How often the Prometheus config ``lab up`` writes scrapes the agents."""


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``addr`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def slot_id(host: str, host_index: int, k: int) -> str:
    """The id of the ``k``-th pre-provisioned instance on ``host`` (an instance id: short)."""
    name = f"{host}s{k}"
    return name if len(name) <= 12 else f"h{host_index}s{k}"


@dataclass(frozen=True)
class StandingLab:
    run_dir: Path
    tag: str
    state: dict[str, Any]
    testbed: Testbed
    load_origin: float | None = None
    """When the load's clock started (monotonic), with ``load``."""


def stage_events(lab: StandingLab, scenario: Scenario, status: StatusFn = lambda m: None) -> None:
    """Start and stop the scenario's neighbours on the load's clock, as ``quell lab run`` does,
    until the scenario's end; the lab stays up after. Needs the load started (``load``)."""
    assert lab.load_origin is not None
    for ev in sorted(scenario.events, key=lambda e: e.at_s):
        time.sleep(max(0.0, lab.load_origin + ev.at_s - time.monotonic()))
        lab.testbed.trigger(ev, ev.at_s)
        status(f"{ev.at_s:g} s: {ev.phase or 'event'}")
    time.sleep(max(0.0, lab.load_origin + scenario.duration_s - time.monotonic()))


def _instance_entry(inst: LabInstance, slot: bool, probe: bool) -> dict[str, Any]:
    apache = None
    if inst.apache is not None:
        layout = inst.apache.paths.layout()
        apache = {
            "httpd_conf": str(layout.httpd_conf),
            "php_fpm_conf": str(layout.php_fpm_conf),
            "httpd_pid_file": str(layout.httpd_pid_file),
            "php_fpm_pid_file": str(layout.php_fpm_pid_file),
            "error_log": str(layout.error_log),
            "apache_binary": layout.apache_binary,
            "php_fpm_binary": layout.php_fpm_binary,
            "settle_timeout_s": inst.apache.server.settle_timeout_s,
        }
    return {
        "apache": apache,
        "id": inst.spec.id,
        "host": inst.spec.host,
        "addr": inst.addr,
        "port": PORT,
        "cgroup": inst.group.name,
        "pid": inst.server.pid,
        "probe_url": f"http://{inst.addr}:{PROBE_PORT}{PROBE_PATH}" if probe else None,
        "slot": slot,
        "weight": inst.weight,
    }


def bring_up(
    scenario: Scenario,
    scenario_dir: Path,
    run_dir: Path,
    layout: CgroupLayout,
    spares: int = 1,
    load: bool = False,
    status: StatusFn = lambda msg: None,
    runtime_root: Path = RUNTIME_ROOT,
    schedule: RequestSchedule | None = None,
) -> StandingLab:
    """Bring the scenario's lab up and leave it running. ``spares`` pre-provisioned instances
    on each of the scenario's scaling hosts become HAProxy slots; ``load``: the scenario's
    load (replaying ``schedule`` if given, as ``preflight`` returns it) starts now, for its
    duration. If anything fails, nothing of it stays."""
    tag = RunTag.new()
    run_dir.mkdir(parents=True, exist_ok=True)
    bed = Testbed(scenario, scenario_dir, run_dir, layout, tag, runtime_root, schedule)
    try:
        return _bring_up(bed, scenario, run_dir, spares, load, status)
    except BaseException:
        with contextlib.suppress(ComponentError):
            bed.teardown()
        raise


def _bring_up(
    bed: Testbed, scenario: Scenario, run_dir: Path, spares: int, load: bool, status: StatusFn
) -> StandingLab:
    bed.prepare(status)
    status("servers")
    serving = [bed.start_instance(inst, k) for k, inst in enumerate(scenario.instances)]
    slots: list[LabInstance] = []
    scaling_hosts = scenario.scaling.hosts if scenario.scaling is not None else []
    server = scenario.scaling.server if scenario.scaling is not None else "lighttpd"
    for host in scaling_hosts:
        j = bed.topology.host_index[host]
        for k in range(1, spares + 1):
            spec = Instance(id=slot_id(host, j, k), host=host, server=server)
            slots.append(bed.start_instance(spec, len(serving) + len(slots)))
    bed.start_iperf_servers()
    status("haproxy")
    log_socket = bed.work / "haproxy-log.sock"
    bed.start_haproxy(serving, slots, log_socket=log_socket)
    origin = None
    if load:
        status("load")
        bed.write_schedule()
        origin = time.monotonic() + 0.3
        bed.start_load(origin, run_dir / "requests.csv")
    probe = scenario.probe is not None
    state: dict[str, Any] = {
        "tag": bed.tag.value,
        "run_dir": str(run_dir.resolve()),
        "scenario": scenario.name,
        "haproxy": {
            "socket": str(bed.work / "haproxy.sock"),
            "log_socket": str(log_socket),
            "backend": BACKEND,
            "frontend": f"{FRONTEND_ADDR}:{FRONTEND_PORT}",
            "netns": bed.topology.client,
            "pid": next(p.pid for p in bed.supervisor.procs if p.name == "haproxy"),
        },
        "client_netns": str(NETNS_DIR / bed.topology.client),
        "instances": [_instance_entry(i, False, probe) for i in serving]
        + [_instance_entry(i, True, probe) for i in slots],
        "probe": None
        if scenario.probe is None
        else {"period_s": scenario.probe.period_s, "size_bytes": scenario.probe.size_bytes},
    }
    (run_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    (bed.work / "state.json").write_text(
        json.dumps(
            {"tag": bed.tag.value, **runner_record(), "run_dir": str(run_dir), "standing": True}
        )
    )
    if origin is not None:
        state["load_started_at"] = time.time() + (origin - time.monotonic())
        (run_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    write_live_configs(run_dir, scenario, state, bed.scenario_dir)
    return StandingLab(run_dir, bed.tag.value, state, bed, origin)


def write_live_configs(
    run_dir: Path, scenario: Scenario, state: dict[str, Any], scenario_dir: Path
) -> None:
    """An agent config per host, a Prometheus config scraping them and a live controller config,
    all pointing at the lab in ``state`` (ports picked free now); the policy's relative paths
    resolve in ``scenario_dir``, as the scenario's do."""
    hosts = sorted({i["host"] for i in state["instances"]})
    agent_ports = {h: free_port() for h in hosts}
    token = run_dir / "agent.token"
    token.write_text(os.urandom(16).hex() + "\n")
    token.chmod(0o600)
    probe = state["probe"]
    for host in hosts:
        instances = []
        for i in state["instances"]:
            if i["host"] != host:
                continue
            entry: dict[str, Any] = {"id": i["id"], "cgroup": i["cgroup"]}
            if probe is not None and i["probe_url"]:
                entry["probe"] = {
                    "url": i["probe_url"],
                    "size_bytes": probe["size_bytes"],
                    "period_s": probe["period_s"],
                    "timeout_s": scenario.workload.timeout_s,
                    "netns": state["client_netns"],
                }
            if i.get("apache"):
                entry["apache"] = i["apache"]
            instances.append(entry)
        agent = {
            "host": host,
            "listen": {"addr": "127.0.0.1", "port": agent_ports[host]},
            "token_file": str(token),
            "allow": ["cpu_cap", "reconfigure"]
            if any("apache" in e for e in instances)
            else ["cpu_cap"],
            "instances": instances,
        }
        (run_dir / f"agent-{host}.yaml").write_text(yaml.safe_dump(agent, sort_keys=False))
    prom_port = free_port()
    prometheus = {
        "global": {
            "scrape_interval": f"{round(SCRAPE_INTERVAL_S * 1000)}ms",
            "scrape_timeout": f"{round(SCRAPE_INTERVAL_S * 1000)}ms",
            "evaluation_interval": "1s",
        },
        "scrape_configs": [
            {
                "job_name": "quell-agent",
                "honor_labels": True,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{agent_ports[h]}"], "labels": {"quell_host": h}}
                    for h in hosts
                ],
            }
        ],
    }
    (run_dir / "prometheus.yml").write_text(yaml.safe_dump(prometheus, sort_keys=False))
    (run_dir / "prometheus.port").write_text(f"{prom_port}\n")
    target = scenario.target.mean_rt_s if scenario.target is not None else None
    sc = scenario.scaling
    live: dict[str, Any] = {
        "name": f"lab-{scenario.name}",
        "interval_s": scenario.interval_s,
        "prometheus": {"url": f"http://127.0.0.1:{prom_port}", "scrape_interval_s": 0.5},
        "haproxy": {
            "socket": state["haproxy"]["socket"],
            "backend": state["haproxy"]["backend"],
            "log_socket": state["haproxy"]["log_socket"],
        },
        "agents": {h: f"http://127.0.0.1:{agent_ports[h]}" for h in hosts},
        "token_file": str(token),
        "instances": [
            {"id": i["id"], "host": i["host"], "slot": i["slot"]} for i in state["instances"]
        ],
        "policy": scenario.policy.model_dump(mode="json"),
        "listen": {"addr": "127.0.0.1", "port": free_port()},
        "request_timeout_s": scenario.workload.timeout_s,
    }
    if target is not None:
        live["target_rt_s"] = target
    if sc is not None:
        live["scaling"] = {
            "min_instances": sc.min_instances,
            "max_instances": sc.max_instances,
            "boot_s": sc.boot_s,
        }
    if probe is not None:
        live["probe_period_s"] = probe["period_s"]
        live["probe_size_bytes"] = probe["size_bytes"]
    live["base_dir"] = str(scenario_dir.resolve())
    links = {h.id: h.link_mbit for h in scenario.hosts if h.link_mbit is not None}
    if links:
        live["host_link_mbit"] = links
    (run_dir / "live.yaml").write_text(yaml.safe_dump(live, sort_keys=False))


def read_state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(
            str(run_dir), [Problem(STATE_FILE, f"no standing lab here: {exc}")]
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("tag"), str):
        raise InputError(str(run_dir), [Problem(STATE_FILE, "not a standing lab's state")])
    return state


def standing_run_dirs(runtime_root: Path = RUNTIME_ROOT) -> list[Path]:
    """The run directories of every lab left standing on this machine."""
    out = []
    with contextlib.suppress(OSError):
        for d in sorted(runtime_root.iterdir()):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                state = json.loads((d / "state.json").read_text())
                if state.get("standing"):
                    out.append(Path(state["run_dir"]))
    return out


def tear_down(run_dir: Path, layout: CgroupLayout, runtime_root: Path = RUNTIME_ROOT) -> list[str]:
    """Stop and remove everything of the standing lab in ``run_dir``; what was removed."""
    state = read_state(run_dir)
    removed = clean_tag(state["tag"], layout, runtime_root)
    state["down_at"] = time.time()
    (run_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    return removed

"""The two files of a live deployment: ``agent.yaml`` (one per host: what the agent watches and
where it listens) and ``live.yaml`` (the controller: Prometheus, HAProxy, the agents, the
instances, the policy, the limits). Validated like scenarios: unknown keys and wrong types
refused, then the checks across sections, every problem reported at once (exit 2)."""

from __future__ import annotations

import ipaddress
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from quell.core.files import load_yaml
from quell.core.schema import Name, StrictModel, validation_problems
from quell.errors import InputError, Problem
from quell.scenario.model import Identifier, PolicySpec

Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0, le=3600)]


class Listen(StrictModel):
    """Where a /metrics endpoint listens: loopback unless said otherwise."""

    addr: str = "127.0.0.1"
    """The IP address to bind; loopback by default."""
    port: Port
    """The TCP port."""

    @field_validator("addr")
    @classmethod
    def _ip(cls, addr: str) -> str:
        """an IPv4 or IPv6 address"""
        ipaddress.ip_address(addr)  # ValueError: "... does not appear to be an IPv4 ..."
        return addr


# -- the agent ---------------------------------------------------------------------------------
class ProbeSpec(StrictModel):
    """PRIMA's probe against the local instance: download ``url`` every ``period_s``."""

    url: Annotated[str, Field(pattern=r"^http://[^/\s]+/\S*$")]
    """The probe file's URL (plain HTTP)."""
    size_bytes: Annotated[int, Field(gt=0, le=1 << 30)]
    """The probe file's size: a download counts only when it answers 200 with exactly this many
    bytes."""
    period_s: Seconds = 1.0
    """Time between two downloads (one that overruns skips the slots it covered)."""
    timeout_s: Seconds = 2.0
    """A download not done in this long fails."""
    netns: str | None = None
    """A network namespace file (``/run/netns/NAME``) to probe from (a lab's client side)."""


class ApacheSpec(StrictModel):
    """An Apache + php-fpm pair on the host that the agent may reconfigure (permission
    ``reconfigure``): the files hold the settings IC2 moves on one line each
    (``MaxRequestWorkers``, ``KeepAliveTimeout``; php-fpm's ``pm.max_children`` with
    ``pm = static``). A change is tested (``-t``), applied by a graceful restart of Apache and a
    reload of php-fpm, read back from Apache's error log and php-fpm's pool, and rolled back on
    failure (``quell.actuate.apache``)."""

    httpd_conf: str
    """The configuration Apache was started with (``-f``), holding MaxRequestWorkers and
    KeepAliveTimeout."""
    php_fpm_conf: str
    """php-fpm's configuration holding the pool's ``pm.max_children``."""
    httpd_pid_file: str
    """Apache's pid file."""
    php_fpm_pid_file: str
    """php-fpm's pid file."""
    error_log: str
    """Where Apache logs (the read-back looks for "resuming normal operations" in it)."""
    apache_binary: str = "apache2"
    """Run as ``BINARY -t -f CONF`` and ``BINARY -k graceful -f CONF`` (Debian's packaged
    Apache: ``apache2ctl``, which reads ``/etc/apache2/envvars`` first)."""
    php_fpm_binary: str = "php-fpm8.2"
    """php-fpm's binary, run as ``BINARY -t -y CONF`` to test a configuration."""
    settle_timeout_s: Seconds = 10.0
    """How long the servers may take to show the new settings before the change counts as failed."""


class AgentInstance(StrictModel):
    """One instance on the host, found by exactly one of its cgroup, pid file or systemd unit."""

    id: Identifier
    """The instance's ``instance`` label: its HAProxy server name in live.yaml."""
    cgroup: str | None = None
    """The instance's cgroup, relative to the cgroup root (``system.slice/nginx.service``)."""
    pid_file: str | None = None
    """A file holding the pid of one of its processes; its cgroup is that process's."""
    systemd_unit: Annotated[str, Field(pattern=r"^[A-Za-z0-9@._:-]+$")] | None = None
    """A systemd service; its cgroup is ``system.slice/UNIT``."""
    interface: str = "eth0"
    """The interface whose counters are the instance's (in its network namespace)."""
    probe: ProbeSpec | None = None
    """PRIMA's probe against it; ``None``: none."""
    apache: ApacheSpec | None = None
    """The instance's Apache + php-fpm, for ``reconfigure``."""


Permission = Literal["cpu_cap", "reconfigure"]


class AgentConfig(StrictModel):
    """agent.yaml: the host, where the agent listens, the instances it watches and what it may
    change."""

    host: Identifier
    """The host's id: the ``host`` label of everything it serves (the ``host`` of its instances in
    live.yaml)."""
    listen: Listen
    """Where ``/metrics`` and the state-changing endpoints listen."""
    token_file: str | None = None
    """A file holding the bearer token state-changing requests must carry."""
    allow: list[Permission] = []
    """State-changing endpoints that are on (``cpu_cap``, ``reconfigure``); none unless listed,
    and only with a token file."""
    instances: Annotated[list[AgentInstance], Field(min_length=1, max_length=64)]
    """The instances on this host it watches."""


def agent_problems(cfg: AgentConfig) -> list[Problem]:
    problems: list[Problem] = []
    for dup, n in Counter(i.id for i in cfg.instances).items():
        if n > 1:
            problems.append(Problem("instances", f"id {dup!r} is used {n} times"))
    for k, inst in enumerate(cfg.instances):
        given = [x for x in (inst.cgroup, inst.pid_file, inst.systemd_unit) if x is not None]
        if len(given) != 1:
            problems.append(
                Problem(
                    f"instances[{k}]",
                    "give exactly one of 'cgroup', 'pid_file' and 'systemd_unit'",
                )
            )
        if inst.cgroup is not None and ".." in Path(inst.cgroup).parts:
            problems.append(Problem(f"instances[{k}].cgroup", "must not contain '..'"))
    if "reconfigure" in cfg.allow and not any(i.apache for i in cfg.instances):
        problems.append(Problem("allow", "'reconfigure' needs an instance with 'apache'"))
    if cfg.allow and cfg.token_file is None:
        problems.append(Problem("allow", "state-changing endpoints need 'token_file'"))
    return problems


# -- the controller ----------------------------------------------------------------------------
class PrometheusSpec(StrictModel):
    """Prometheus, which scrapes the agents; the controller reads their series through its query
    API."""

    url: Annotated[str, Field(pattern=r"^https?://[^/\s]+/?$")]
    """Prometheus's base URL (its query API is under ``/api/v1``)."""
    scrape_interval_s: Seconds = 1.0
    """How often Prometheus scrapes the agents; rate windows are at least 4 of them."""
    timeout_s: Seconds = 2.0
    """A query not answered in this long counts as Prometheus missing: the interval is held."""
    stale_s: Seconds = 5.0
    """A sample older than this is stale: the metric counts as missing."""


class HAProxySpec(StrictModel):
    """HAProxy: its admin socket (stats and runtime changes), the backend, and the socket its
    request log goes to."""

    socket: str
    """HAProxy's admin stats socket (``stats socket ... level admin``)."""
    backend: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]+$")]
    """The backend whose servers are the instances."""
    log_socket: str
    """The unix datagram socket HAProxy logs every request to (the controller binds it)."""
    timeout_s: Seconds = 2.0
    """A command on the admin socket not answered in this long fails."""


class LiveInstance(StrictModel):
    """One server of HAProxy's backend: an instance that serves, or a slot."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
    """The instance's HAProxy server name (and its ``instance`` label at its agent)."""
    host: Identifier
    """The id of the host it runs on (its agent's ``host``)."""
    slot: bool = False
    """A pre-provisioned instance HAProxy holds as a disabled server: the slot scaler puts it in
    service on AddInstance and out on RemoveInstance."""


class CommandScaler(StrictModel):
    """A user command per scale-out and scale-in, as an argument list (never a shell).
    ``{instance}`` and ``{host}`` in an argument are replaced."""

    scale_out: Annotated[list[str], Field(min_length=1)]
    """Run to start an instance."""
    scale_in: Annotated[list[str], Field(min_length=1)]
    """Run to stop one."""
    timeout_s: Seconds = 60.0
    """A command not done in this long fails."""


class LiveScaling(StrictModel):
    """How far and how often the controller may scale, and how new instances start."""

    min_instances: Annotated[int, Field(ge=1)] = 1
    """The guard never leaves fewer serving instances."""
    max_instances: Annotated[int, Field(ge=1)] | None = None
    """The guard never lets a policy go above this many; ``None``: no cap but the free slots and the
    command."""
    boot_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """Delay between asking for an instance and it serving, as the policy counts it."""
    min_gap_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """The least time between two scaling actions."""
    command: CommandScaler | None = None
    """A command per scale-out and scale-in, for a host without a free slot; ``None``: slots only.
    """


class LiveConfig(StrictModel):
    """live.yaml: where Prometheus, HAProxy and the agents are, the instances, the policy and the
    limits."""

    name: Name = "live"
    """The deployment's name: its run directory is ``runs/live-NAME`` unless ``--run-dir`` says
    otherwise."""
    interval_s: Seconds = 5.0
    """The control interval: every this long the controller observes, decides and (with ``--apply``)
    acts."""
    prometheus: PrometheusSpec
    """The Prometheus that scrapes the agents."""
    haproxy: HAProxySpec
    """The HAProxy in front of the instances."""
    agents: dict[Identifier, Annotated[str, Field(pattern=r"^https?://[^/\s]+/?$")]] = {}
    """host → the agent's base URL (for CPU caps); metrics come through Prometheus."""
    token_file: str | None = None
    """The agents' bearer token, for state-changing requests."""
    instances: Annotated[list[LiveInstance], Field(min_length=1, max_length=256)]
    """HAProxy's servers the controller balances: serving instances and slots."""
    policy: PolicySpec
    """The policy that decides, as in a scenario."""
    target_rt_s: Annotated[float, Field(gt=0)] | None = None
    """R_th, the response-time target in seconds; ``None``: none (policies that need one refuse to
    start)."""
    scaling: LiveScaling | None = None
    """Scaling through slots or a command; ``None``: the policy may not scale."""
    probe_period_s: Seconds | None = None
    """The agents' probe period (their ``probe.period_s``); ``None``: no probe runs."""
    probe_size_bytes: Annotated[int, Field(gt=0)] | None = None
    """The agents' probe file: with ``host_link_mbit``, the share of a host's link the probe
    itself takes (PRIMA subtracts it)."""
    base_dir: str | None = None
    """Where relative paths in the policy's parameters (a model bundle) resolve; default: the
    config file's directory."""
    host_link_mbit: dict[Identifier, Annotated[float, Field(gt=0)]] = {}
    """host → the rate of its link, in Mbit/s: with ``probe_size_bytes``, the probe's share of it.
    """
    request_timeout_s: Seconds = 10.0
    """How long a user waits for an answer: on the controller's page, a request HAProxy logged
    without a 2xx or 3xx answer, or answered later than this, counts as taking this long. Set
    it to HAProxy's ``timeout server`` or the clients' own timeout, whichever is shorter; it
    must exceed 2 × ``target_rt_s``."""
    max_weight_step: Annotated[int, Field(ge=1, le=256)] = 256
    """The most a weight may move in one interval."""
    listen: Listen | None = None
    """Where the controller's own /metrics and decision page listen (none if absent)."""


def live_problems(cfg: LiveConfig) -> list[Problem]:
    problems: list[Problem] = []
    ids = [i.id for i in cfg.instances]
    for dup, n in Counter(ids).items():
        if n > 1:
            problems.append(Problem("instances", f"id {dup!r} is used {n} times"))
    if not any(not i.slot for i in cfg.instances):
        problems.append(Problem("instances", "at least one instance must serve (not a slot)"))
    hosts = {i.host for i in cfg.instances}
    for h in cfg.agents:
        if h not in hosts:
            problems.append(Problem(f"agents.{h}", f"no instance runs on host {h!r}"))
    sc = cfg.scaling
    if sc is not None:
        serving = sum(1 for i in cfg.instances if not i.slot)
        if sc.max_instances is not None and sc.max_instances < sc.min_instances:
            problems.append(Problem("scaling.max_instances", "is below min_instances"))
        if serving < sc.min_instances:
            problems.append(
                Problem("scaling.min_instances", f"{sc.min_instances} > the {serving} serving")
            )
    if cfg.target_rt_s is not None and 2 * cfg.target_rt_s >= cfg.request_timeout_s:
        problems.append(
            Problem(
                "request_timeout_s",
                f"{cfg.request_timeout_s:g} s is not above 2 × target_rt_s "
                f"({2 * cfg.target_rt_s:g} s): a request without an answer counts at it",
            )
        )
    if cfg.agents and cfg.token_file is None:
        problems.append(Problem("token_file", "CPU caps through the agents need the token"))
    return problems


M = TypeVar("M", bound=StrictModel)


def parse_config(model: type[M], data: Any, source: str) -> M:
    if not isinstance(data, dict):
        raise InputError(source, [Problem("", "a config must be a mapping of keys to values")])
    try:
        cfg = model.model_validate(data)
    except ValidationError as err:
        raise InputError(source, validation_problems(err)) from None
    problems = agent_problems(cfg) if isinstance(cfg, AgentConfig) else []
    if isinstance(cfg, LiveConfig):
        problems = live_problems(cfg)
    if problems:
        raise InputError(source, problems)
    return cfg


def load_agent_config(path: Path) -> AgentConfig:
    return parse_config(AgentConfig, load_yaml(path, "file"), str(path))


def load_live_config(path: Path) -> LiveConfig:
    return parse_config(LiveConfig, load_yaml(path, "file"), str(path))

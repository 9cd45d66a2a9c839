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
    port: Port

    @field_validator("addr")
    @classmethod
    def _ip(cls, addr: str) -> str:
        ipaddress.ip_address(addr)  # ValueError: "... does not appear to be an IPv4 ..."
        return addr


# -- the agent ---------------------------------------------------------------------------------
class ProbeSpec(StrictModel):
    """PRIMA's probe against the local instance: download ``url`` every ``period_s``."""

    url: Annotated[str, Field(pattern=r"^http://[^/\s]+/\S*$")]
    size_bytes: Annotated[int, Field(gt=0, le=1 << 30)]
    period_s: Seconds = 1.0
    timeout_s: Seconds = 2.0
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
    php_fpm_pid_file: str
    error_log: str
    """Where Apache logs (the read-back looks for "resuming normal operations" in it)."""
    apache_binary: str = "apache2"
    """Run as ``BINARY -t -f CONF`` and ``BINARY -k graceful -f CONF`` (Debian's packaged
    Apache: ``apache2ctl``, which reads ``/etc/apache2/envvars`` first)."""
    php_fpm_binary: str = "php-fpm8.2"
    settle_timeout_s: Seconds = 10.0


class AgentInstance(StrictModel):
    """One instance on the host, found by exactly one of its cgroup, pid file or systemd unit."""

    id: Identifier
    cgroup: str | None = None
    """The instance's cgroup, relative to the cgroup root (``system.slice/nginx.service``)."""
    pid_file: str | None = None
    systemd_unit: Annotated[str, Field(pattern=r"^[A-Za-z0-9@._:-]+$")] | None = None
    interface: str = "eth0"
    """The interface whose counters are the instance's (in its network namespace)."""
    probe: ProbeSpec | None = None
    apache: ApacheSpec | None = None
    """The instance's Apache + php-fpm, for ``reconfigure``."""


Permission = Literal["cpu_cap", "reconfigure"]


class AgentConfig(StrictModel):
    host: Identifier
    listen: Listen
    token_file: str | None = None
    """A file holding the bearer token state-changing requests must carry."""
    allow: list[Permission] = []
    """State-changing endpoints that are on (``cpu_cap``, ``reconfigure``); none unless listed,
    and only with a token file."""
    instances: Annotated[list[AgentInstance], Field(min_length=1, max_length=64)]


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
    url: Annotated[str, Field(pattern=r"^https?://[^/\s]+/?$")]
    scrape_interval_s: Seconds = 1.0
    """How often Prometheus scrapes the agents; rate windows are at least 4 of them."""
    timeout_s: Seconds = 2.0
    stale_s: Seconds = 5.0
    """A sample older than this is stale: the metric counts as missing."""


class HAProxySpec(StrictModel):
    socket: str
    """HAProxy's admin stats socket (``stats socket ... level admin``)."""
    backend: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]+$")]
    log_socket: str
    """The unix datagram socket HAProxy logs every request to (the controller binds it)."""
    timeout_s: Seconds = 2.0


class LiveInstance(StrictModel):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
    """The instance's HAProxy server name (and its ``instance`` label at its agent)."""
    host: Identifier
    slot: bool = False
    """A pre-provisioned instance HAProxy holds as a disabled server: the slot scaler puts it in
    service on AddInstance and out on RemoveInstance."""


class CommandScaler(StrictModel):
    """A user command per scale-out and scale-in, as an argument list (never a shell).
    ``{instance}`` and ``{host}`` in an argument are replaced."""

    scale_out: Annotated[list[str], Field(min_length=1)]
    scale_in: Annotated[list[str], Field(min_length=1)]
    timeout_s: Seconds = 60.0


class LiveScaling(StrictModel):
    min_instances: Annotated[int, Field(ge=1)] = 1
    max_instances: Annotated[int, Field(ge=1)] | None = None
    boot_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    min_gap_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """The least time between two scaling actions."""
    command: CommandScaler | None = None


class LiveConfig(StrictModel):
    name: Name = "live"
    interval_s: Seconds = 5.0
    prometheus: PrometheusSpec
    haproxy: HAProxySpec
    agents: dict[Identifier, Annotated[str, Field(pattern=r"^https?://[^/\s]+/?$")]] = {}
    """host → the agent's base URL (for CPU caps); metrics come through Prometheus."""
    token_file: str | None = None
    """The agents' bearer token, for state-changing requests."""
    instances: Annotated[list[LiveInstance], Field(min_length=1, max_length=256)]
    policy: PolicySpec
    target_rt_s: Annotated[float, Field(gt=0)] | None = None
    scaling: LiveScaling | None = None
    probe_period_s: Seconds | None = None
    probe_size_bytes: Annotated[int, Field(gt=0)] | None = None
    """The agents' probe file: with ``host_link_mbit``, the share of a host's link the probe
    itself takes (PRIMA subtracts it)."""
    base_dir: str | None = None
    """Where relative paths in the policy's parameters (a model bundle) resolve; default: the
    config file's directory."""
    host_link_mbit: dict[Identifier, Annotated[float, Field(gt=0)]] = {}
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

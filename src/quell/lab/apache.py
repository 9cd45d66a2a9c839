"""Apache httpd with php-fpm behind it, as a lab instance: their configurations, the PHP pages
they serve, bring-up, and the instance's ``ReconfigureServer``.

Both run in the foreground under the supervisor, in the instance's namespace and cgroup, on its
CPUs, with their own configuration under the run's work directory (nothing of
``/etc/apache2``; php-fpm reads only the system ``php.ini`` and its extensions). Apache's pool
is fixed, as php-fpm's (``pm = static``): StartServers and MinSpareThreads ask for every
thread MaxRequestWorkers allows, so busy + idle in ``server-status`` is the MaxRequestWorkers
Apache uses. StartServers alone is not enough: after a graceful restart Apache starts the new
generation's children in the slots of old ones as it reaps them, and the rest at its next
one-second tick, but skips a slot an old child still holds then and does not come back to it
(``server_main_loop`` in ``server/mpm/worker/worker.c``, event's alike); only MinSpareThreads
makes it add children afterwards, one a second. With MinSpareThreads at ThreadsPerChild, 4 of
12 graceful restarts between 8 and 12 threads (children of 4, no load) stayed at a child short
for good; at MaxRequestWorkers all 12 reached it, within 2.5 s. Both log to their supervisor log (``logs/server-ID.log``, ``logs/php-fpm-ID.log``).

A PHP page reads ``touches`` bytes at random in a working set of ``working_set_bytes``, then
answers ``response_bytes``. PHP-FPM keeps nothing of a request for the next (a ``static`` is
reset with every request), so the working set is a string literal in a generated PHP file
that php-fpm's master compiles into OPcache once as it starts or reloads (``opcache.preload``,
before it forks the pool), into the shared memory its workers inherit; the page includes it
(no copy) on every request. Its reads
miss the CPU caches as the working set and the neighbours decide.

``ReconfigureServer`` (settings ``max_request_workers``, ``keepalive_timeout_s``,
``php_max_children``, any subset):

* ``graceful=True`` (the paper's "httpd-basic"): new configurations, tested, applied by a
  graceful restart of Apache and/or a reload of php-fpm (only what changed), read back, rolled
  back on failure (``quell.actuate.apache``).
* ``graceful=False`` (the paper's "httpd-online", a patched Apache there): stock Apache cannot
  change a setting without restarting its children, so ``max_request_workers`` changes
  online as HAProxy's ``maxconn`` for the instance (requests beyond it wait in HAProxy's
  queue, none in Apache's) while Apache's own MaxRequestWorkers stays where it is; it may not
  exceed it. ``php_max_children`` changes by a reload of php-fpm alone, Apache untouched, as
  the paper's httpd-online changed it. ``keepalive_timeout_s`` is refused online: Apache
  reads KeepAliveTimeout only when it (re)starts its children."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from quell.actuate.apache import (
    ApacheConfig,
    ApacheLayout,
    ApacheServer,
    Part,
    ServerSettings,
    keepalive_value,
    online_change,
    setting_problems,
)
from quell.core.observation import SERVER_SETTING_KEYS
from quell.core.rng import component_rng
from quell.errors import ComponentError, InputError, Problem
from quell.instrument.native import phpfpm_shim
from quell.lab.process import Managed, Placement, Supervisor
from quell.lab.servers import PORT, WEB_USER, preloaded, token_logs_dir
from quell.scenario.model import ApacheSettings, Instance, PhpPage, Scenario
from quell.signals.apache import http_get
from quell.signals.netns import NETNS_DIR, socket_in_netns, tcp_listeners

APACHE_BINARY = "apache2"
PHP_FPM_BINARY = "php-fpm8.2"
MODULES_DIR = Path("/usr/lib/apache2/modules")
MODULES = (
    "authz_core",
    "authz_host",
    "mime",
    "dir",
    "status",
    "proxy",
    "proxy_fcgi",
)
OPCACHE_BASE_MB = 64
"""OPcache shared memory besides the working sets."""
MEMORY_LIMIT_BASE_BYTES = 128 << 20
"""php's memory_limit besides twice the largest working set (compiling the literal holds it
twice for a moment)."""
MAX_PHP_CHILDREN = 512
"""The lab's bound on php_max_children (each worker of the pool is a process: about 3 MiB of
its own memory with the pages loaded, measured here)."""
MAX_WORKING_SET_BYTES = 1 << 30
"""The lab's bound on a page's working set (it lives in OPcache's shared memory)."""
LISTEN_TIMEOUT_S = 10.0
WARM_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ApachePaths:
    """Where one apache instance's files are, under ``base``, and where Apache logs."""

    base: Path
    error_log: Path

    @property
    def run(self) -> Path:
        return self.base / "run"

    @property
    def httpd_conf(self) -> Path:
        return self.base / "httpd.conf"

    @property
    def php_fpm_conf(self) -> Path:
        return self.base / "php-fpm.conf"

    @property
    def fpm_socket(self) -> Path:
        return self.run / "php-fpm.sock"

    def layout(self) -> ApacheLayout:
        return ApacheLayout(
            self.httpd_conf,
            self.php_fpm_conf,
            self.run / "httpd.pid",
            self.run / "php-fpm.pid",
            self.error_log,
            APACHE_BINARY,
            PHP_FPM_BINARY,
        )


# -- configurations (pure) -------------------------------------------------------------------
def keepalive_directive(keepalive_timeout_s: float) -> str:
    """Whole seconds as such, anything finer in milliseconds (Apache takes ``500ms``)."""
    return f"KeepAliveTimeout {keepalive_value(keepalive_timeout_s)}"


def httpd_config(
    paths: ApachePaths, settings: ApacheSettings, addr: str, port: int, docroot: Path
) -> str:
    """Apache's configuration: ``settings``' MPM and limits, every child started at once (after
    a graceful restart, within seconds: see the module) and none stopped for being idle, static files and PHP pages from ``docroot``, ``server-status``
    for the instance itself only. Errors go to standard error (the supervisor's log)."""
    s = settings
    modules = [(f"mpm_{s.mpm}", f"mod_mpm_{s.mpm}.so")] + [(m, f"mod_{m}.so") for m in MODULES]
    loads = "\n".join(f"LoadModule {name}_module {MODULES_DIR / so}" for name, so in modules)
    return f"""# quell apache instance at {addr}:{port}
ServerRoot "{paths.base}"
ServerName {addr}
Listen {addr}:{port}
PidFile "{paths.run / "httpd.pid"}"
DefaultRuntimeDir "{paths.run}"
ErrorLog "/proc/self/fd/2"
LogLevel notice
User {WEB_USER}
Group {WEB_USER}
{loads}

ServerLimit {s.server_limit}
ThreadLimit {s.threads_per_child}
ThreadsPerChild {s.threads_per_child}
MaxRequestWorkers {s.max_request_workers}
StartServers {s.max_request_workers // s.threads_per_child}
MinSpareThreads {s.max_request_workers}
MaxSpareThreads {s.max_request_workers + s.threads_per_child}
MaxConnectionsPerChild 0
KeepAlive On
{keepalive_directive(s.keepalive_timeout_s)}
MaxKeepAliveRequests 100

TypesConfig /etc/mime.types
DocumentRoot "{docroot}"
<Directory "{docroot}">
    Require all granted
</Directory>
<FilesMatch "\\.php$">
    SetHandler "proxy:unix:{paths.fpm_socket}|fcgi://localhost/"
</FilesMatch>
ExtendedStatus Off
<Location "/server-status">
    SetHandler server-status
    Require local
</Location>
"""


def php_fpm_config(
    paths: ApachePaths,
    settings: ApacheSettings,
    process_control_timeout_s: int,
    memory_limit_bytes: int,
) -> str:
    """php-fpm's configuration: one static pool of ``php_max_children`` on a unix socket; a
    reload lets busy children finish for ``process_control_timeout_s`` (0, php-fpm's default,
    kills them at once)."""
    return f"""; quell apache instance's php-fpm
[global]
pid = {paths.run / "php-fpm.pid"}
error_log = /proc/self/fd/2
daemonize = no
process_control_timeout = {process_control_timeout_s}s

[www]
user = {WEB_USER}
group = {WEB_USER}
listen = {paths.fpm_socket}
listen.owner = {WEB_USER}
listen.group = {WEB_USER}
listen.mode = 0660
listen.backlog = 4096
pm = static
pm.max_children = {settings.php_max_children}
php_admin_value[memory_limit] = {memory_limit_bytes}
"""


def opcache_mb(pages: Sequence[PhpPage]) -> int:
    """OPcache shared memory for the pages' working sets (one copy each, plus room)."""
    total = sum(p.working_set_bytes for p in pages)
    return OPCACHE_BASE_MB + math.ceil(total * 1.1 / (1 << 20))


def memory_limit_bytes(pages: Sequence[PhpPage]) -> int:
    return MEMORY_LIMIT_BASE_BYTES + 2 * max((p.working_set_bytes for p in pages), default=0)


def php_fpm_argv(
    paths: ApachePaths, pages: Sequence[PhpPage], preload: Path | None = None
) -> list[str]:
    """php-fpm in the foreground; OPcache sized for the working sets and told never to look at
    the files again (they do not change) nor to wait before caching a new one; with
    ``preload`` (``write_pages``'s), the master compiles the working sets into OPcache once
    as it starts, before it forks the pool, and again on each reload."""
    argv = [
        PHP_FPM_BINARY,
        "--nodaemonize",
        "--fpm-config",
        str(paths.php_fpm_conf),
        "-d",
        "opcache.enable=1",
        "-d",
        f"opcache.memory_consumption={opcache_mb(pages)}",
        "-d",
        "opcache.validate_timestamps=0",
        "-d",
        "opcache.file_update_protection=0",
    ]
    if preload is not None:
        argv += ["-d", f"opcache.preload={preload}", "-d", f"opcache.preload_user={WEB_USER}"]
    return argv


def httpd_argv(paths: ApachePaths) -> list[str]:
    return [APACHE_BINARY, "-DFOREGROUND", "-f", str(paths.httpd_conf)]


def page_source(page: PhpPage, working_set_file: Path) -> str:
    """The PHP page: ``touches`` reads at positions of a linear congruential sequence (period
    2^31) in the working set, their sum in a header, then ``response_bytes`` bytes."""
    return f"""<?php
// quell page {page.path}: {page.touches} reads at random in a working set of
// {page.working_set_bytes} bytes (compiled once into OPcache), then {page.response_bytes} bytes
$s = include '{working_set_file}';
$n = strlen($s);
$i = mt_rand(0, 0x7fffffff);
$sum = 0;
for ($k = 0; $k < {page.touches}; $k++) {{
    $i = ($i * 1103515245 + 12345) & 0x7fffffff;
    $sum += ord($s[$i % $n]);
}}
header('Content-Type: application/octet-stream');
header('X-Quell-Touch-Sum: ' . $sum);
echo str_repeat('x', {page.response_bytes});
"""


WORKING_SETS_DIR = "php-ws"
"""Under a run's work directory: the pages' working sets and their preload script."""


def working_set_file(ws_dir: Path, index: int) -> Path:
    return ws_dir / f"ws{index}.php"


def preload_file(ws_dir: Path) -> Path:
    """The OPcache preload script ``write_pages`` writes beside the working sets."""
    return ws_dir / "preload.php"


def preload_source(working_sets: Sequence[Path]) -> str:
    """Compile each working set into OPcache (``opcache.preload``, in php-fpm's master).
    Without it each worker of a new pool compiles the literal itself on its first request,
    all of them at once after a reload: 0.1 s of CPU each for 16 MiB here, seconds for a pool
    of 64 on one core under load."""
    lines = "".join(f"opcache_compile_file('{ws}');\n" for ws in working_sets)
    return f"<?php\n// quell: the working sets, compiled once as php-fpm starts\n{lines}"


def write_pages(docroot: Path, ws_dir: Path, pages: Sequence[PhpPage], seed: int) -> None:
    """Each page in ``docroot`` and its working set (random lower-case letters, a PHP string
    literal) in ``ws_dir``, out of the served tree, and the script that preloads the working
    sets (``preload_file``)."""
    ws_dir.mkdir(parents=True, exist_ok=True)
    ws_dir.chmod(0o755)
    rng = component_rng(seed, "lab/php-working-sets")
    for k, page in enumerate(pages):
        ws = working_set_file(ws_dir, k)
        with open(ws, "wb") as f:
            f.write(b"<?php return '")
            remaining = page.working_set_bytes
            while remaining > 0:
                n = min(remaining, 1 << 24)
                f.write((rng.integers(0, 26, size=n, dtype=np.uint8) + 97).tobytes())
                remaining -= n
            f.write(b"';\n")
        ws.chmod(0o644)
        path = docroot / page.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page_source(page, ws))
        path.chmod(0o644)
    preload = preload_file(ws_dir)
    preload.write_text(preload_source([working_set_file(ws_dir, k) for k in range(len(pages))]))
    preload.chmod(0o644)


# -- settings ----------------------------------------------------------------------------------
def settings_after(current: ApacheSettings, changes: Mapping[str, object]) -> ApacheSettings:
    """``current`` with ``changes``, checked against everything an apache instance allows;
    ``InputError`` lists every problem."""
    problems = setting_problems(changes)
    if not problems:
        try:
            after = ApacheSettings.model_validate({**current.model_dump(), **changes})
        except ValidationError as exc:
            problems += [Problem("settings", str(e["msg"])) for e in exc.errors()]
        else:
            if after.php_max_children <= MAX_PHP_CHILDREN:
                return after
            problems.append(
                Problem(
                    "settings.php_max_children",
                    f"{after.php_max_children} is over the lab's {MAX_PHP_CHILDREN}",
                )
            )
    raise InputError("ReconfigureServer", problems)


def wanted(settings: ApacheSettings) -> ServerSettings:
    return ServerSettings(
        settings.max_request_workers, settings.keepalive_timeout_s, settings.php_max_children
    )


# -- one instance ------------------------------------------------------------------------------
Renderer = Callable[[ApacheSettings], ApacheConfig]


class ApacheInstance:
    """An apache instance's two servers, the settings asked of them, what they read back, and
    the concurrency cap it has online (in HAProxy).

    ``start_part`` starts Apache or php-fpm in the instance's place (namespace, cgroup, CPUs);
    ``fetch`` GETs a path from Apache inside the instance's namespace."""

    def __init__(
        self,
        paths: ApachePaths,
        settings: ApacheSettings,
        render: Renderer,
        start_part: Callable[[Part], Managed],
        fetch: Callable[[str], str],
        pages: Sequence[str],
        settle_timeout_s: float,
    ) -> None:
        self.paths = paths
        self.settings = settings
        """What the configurations in force ask for."""
        self.render = render
        self._start_part = start_part
        self.fetch = fetch
        self.pages = list(pages)
        self.procs: dict[Part, Managed] = {}
        self.online_workers: int | None = None
        """MaxRequestWorkers set online (HAProxy's maxconn for the instance), if it is."""
        self.replaced: Callable[[Part, Managed], None] = lambda part, proc: None
        """Called when a server had to be started again (a roll-back after it died)."""
        self.server = ApacheServer(
            paths.layout(),
            render(settings),
            fetch,
            self.restart,
            settle_timeout_s=settle_timeout_s,
        )

    @property
    def processes(self) -> list[Managed]:
        return list(self.procs.values())

    def start(self) -> None:
        """Write the configurations, start php-fpm, then Apache once php-fpm listens."""
        config = self.server.last_good
        self.paths.run.mkdir(parents=True, exist_ok=True)
        self.paths.httpd_conf.write_text(config.httpd)
        self.paths.php_fpm_conf.write_text(config.php_fpm)
        self.restart("php-fpm")
        self._wait(lambda: self.paths.fpm_socket.exists(), "php-fpm", "open its socket")
        self.restart("apache")

    def restart(self, part: Part) -> None:
        proc = self._start_part(part)
        self.procs[part] = proc
        self.replaced(part, proc)

    def _wait(self, done: Callable[[], bool], part: Part, what: str) -> None:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        proc = self.procs[part]
        while not done():
            if not proc.alive():
                raise ComponentError(proc.name, f"exited before it could {what}: {proc.log_tail()}")
            if time.monotonic() > deadline:
                raise ComponentError(proc.name, f"did not {what} in {LISTEN_TIMEOUT_S:g} s")
            time.sleep(0.02)

    def settle(self, listening: Callable[[], bool]) -> ServerSettings:
        """Once Apache listens: the settings read back, every worker thread started, and every
        page requested once (OPcache compiles its working set)."""
        self._wait(listening, "apache", "listen")
        in_force = self.server.read_back(wanted(self.settings))
        self.server.wait_for_workers(in_force.max_request_workers)
        for path in self.pages:
            self.fetch(path)
        return in_force

    def reconfigure(self, changes: Mapping[str, object], graceful: bool) -> None:
        """Apply ``changes`` (see the module); ``InputError`` for what cannot be asked,
        ``ComponentError`` for what the servers refused or did not come back from (rolled
        back)."""
        if not graceful:
            online = online_change(changes, self.in_force.max_request_workers)
            if online.reload:
                after = settings_after(self.settings, online.reload)
                self.server.reconfigure(self.render(after), wanted(after))
                self.settings = after
            if online.workers is not None:
                self.online_workers = online.workers
            return
        after = settings_after(self.settings, changes)
        self.server.reconfigure(self.render(after), wanted(after))
        self.settings = after
        if "max_request_workers" in changes:
            self.online_workers = None

    @property
    def in_force(self) -> ServerSettings:
        if self.server.in_force is None:
            raise ComponentError("apache", "settings not read back yet")
        return self.server.in_force

    def extra(self) -> dict[str, float]:
        """The settings in force, under ``SERVER_SETTING_KEYS``: read back from the servers,
        MaxRequestWorkers the online cap while there is one."""
        f = self.server.in_force
        if f is None:
            return {}
        workers = self.online_workers if self.online_workers is not None else f.max_request_workers
        return {
            SERVER_SETTING_KEYS["max_request_workers"]: float(workers),
            SERVER_SETTING_KEYS["keepalive_timeout_s"]: float(f.keepalive_timeout_s),
            SERVER_SETTING_KEYS["php_max_children"]: float(f.php_max_children),
        }


def start_apache(
    supervisor: Supervisor,
    scenario: Scenario,
    inst: Instance,
    work: Path,
    addr: str,
    placement: Placement,
) -> ApacheInstance:
    """php-fpm, then Apache, in ``placement`` (files under ``work/i-ID``, serving
    ``work/www``); returns once Apache listens, every page has been requested once and the
    settings are read back. If any of it fails, what it started is stopped."""
    paths = ApachePaths(work / f"i-{inst.id}", supervisor.log_dir / f"server-{inst.id}.log")
    docroot = work / "www"
    control_s = max(1, math.ceil(scenario.workload.timeout_s))
    memory_limit = memory_limit_bytes(scenario.pages)
    netns = NETNS_DIR / placement.netns if placement.netns else None

    def render(settings: ApacheSettings) -> ApacheConfig:
        return ApacheConfig(
            httpd_config(paths, settings, addr, PORT, docroot),
            php_fpm_config(paths, settings, control_s, memory_limit),
        )

    def start_part(part: Part) -> Managed:
        if part == "apache":
            return supervisor.start(f"server-{inst.id}", httpd_argv(paths), placement)
        preload = preload_file(work / WORKING_SETS_DIR) if scenario.pages else None
        argv: Sequence[str] = php_fpm_argv(paths, scenario.pages, preload)
        if inst.instrument:  # a token per request in each worker (docs/reference/attribution.md)
            argv = preloaded(argv, phpfpm_shim(), token_logs_dir(paths.base))
        return supervisor.start(f"php-fpm-{inst.id}", argv, placement, instrumented=inst.instrument)

    def fetch(path: str) -> str:
        sock = socket_in_netns(netns) if netns else socket.socket()
        return http_get(sock, addr, PORT, path, WARM_TIMEOUT_S)

    apache = ApacheInstance(
        paths,
        inst.apache or ApacheSettings(),
        render,
        start_part,
        fetch,
        [p.path for p in scenario.pages],
        settle_timeout_s=control_s + 5.0,
    )
    try:
        apache.start()
        apache.settle(lambda: (addr, PORT) in tcp_listeners(apache.procs["apache"].pid))
    except ComponentError:
        for proc in apache.processes:
            supervisor.stop(proc)
        raise
    return apache

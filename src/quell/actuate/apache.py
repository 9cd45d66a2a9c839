"""Reconfigure a running Apache httpd and its php-fpm pool in place, and read back what they
really use.

A change goes as an operator would make it (the paper's "httpd-basic"):

1. **Test.** Both new configurations are tested before anything is applied (``apache2 -t``,
   ``php-fpm -t``); a refused one applies nothing and the error names the server's message.
2. **Apply.** Only what changed is reloaded. Apache restarts gracefully (``apache2 -k
   graceful``: the parent stays and re-reads its configuration, old children finish what they
   serve, a new generation starts); php-fpm reloads on ``USR2`` (the master re-execs itself,
   lets busy children finish within ``process_control_timeout`` and starts a new pool; its pid
   file is read again after).
3. **Read back.** Apache: its error log says, after the mark taken before the restart, that it
   re-read its configuration ("configured -- resuming normal operations"), and the
   MaxRequestWorkers in force is the configured one unless Apache said it lowers it (it warns
   and lowers rather than refusing: ``apache2 -t`` names both kinds of lowering, the log at a
   restart only one). It is read there, not from ``server-status``: when MaxRequestWorkers
   shrinks, the new generation may only use scoreboard slots that old children hold until they
   have finished (with the worker MPM, until their idle kept-alive connections time out), and
   nobody answers a status request meanwhile. php-fpm: its master runs and has exactly
   ``pm.max_children`` children, none of them from before the reload.
4. **Roll back.** A reload that fails or that a server does not come back from puts the last
   configuration that worked back, reloads (or, where a server died, starts again through
   ``restart``) what had been reloaded, reads it back, logs it, and raises ``ComponentError``
   saying what failed and that it was rolled back: the service keeps serving.

The servers are reached through what the caller gives: ``fetch`` (an HTTP GET inside the
server's network namespace, for ``server-status``) and ``restart`` (start a dead server again
where it ran)."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from quell.core.observation import SERVER_SETTING_KEYS
from quell.errors import ComponentError, InputError, Problem
from quell.signals.apache import (
    ApacheStatus,
    parse_lowered_workers,
    parse_server_status,
    process_running,
    read_children,
    read_title,
)

log = logging.getLogger(__name__)

POOL_TITLE = "php-fpm: pool "
"""How a php-fpm pool worker's title begins (the master's is ``php-fpm: master process``)."""

Part = Literal["apache", "php-fpm"]
PARTS: tuple[Part, ...] = ("apache", "php-fpm")
STATUS_PATH = "/server-status?auto"
RESUMED = "configured -- resuming normal operations"
"""What Apache logs once it has (re-)read its configuration, at start and at every restart."""
NOT_ALLOWED = "not allowed during restart"
"""What Apache logs when a restart cannot change a setting (ServerLimit, ThreadLimit)."""
MAX_LOG_BYTES = 1 << 20
LOG_TAIL_BYTES = 400
"""How much of Apache's log an error quotes."""
STEADY_POLLS = 3
"""Polls in a row that must show the new worker count (old children can still be counted for a
moment after a graceful restart)."""

Fetch = Callable[[str], str]
Runner = Callable[[Sequence[str]], tuple[int, str]]


@dataclass(frozen=True)
class ApacheConfig:
    """The two configuration texts of one Apache + php-fpm pair."""

    httpd: str
    php_fpm: str

    def text(self, part: Part) -> str:
        return self.httpd if part == "apache" else self.php_fpm


@dataclass(frozen=True)
class ApacheLayout:
    """Where the pair's files are, and the binaries that test and signal them."""

    httpd_conf: Path
    php_fpm_conf: Path
    httpd_pid_file: Path
    php_fpm_pid_file: Path
    error_log: Path
    """Where Apache's ErrorLog goes."""
    apache_binary: str = "apache2"
    php_fpm_binary: str = "php-fpm8.2"

    def conf(self, part: Part) -> Path:
        return self.httpd_conf if part == "apache" else self.php_fpm_conf

    def pid_file(self, part: Part) -> Path:
        return self.httpd_pid_file if part == "apache" else self.php_fpm_pid_file

    def test_argv(self, part: Part, conf: Path) -> list[str]:
        if part == "apache":
            return [self.apache_binary, "-t", "-f", str(conf)]
        return [self.php_fpm_binary, "-t", "-y", str(conf)]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The three settings IC2 moves, as asked for or as read back from the servers."""

    max_request_workers: int
    keepalive_timeout_s: float
    php_max_children: int


# -- the settings in a configuration's text (an operator's own files) -------------------------
_DIRECTIVES: dict[str, tuple[Part, re.Pattern[str]]] = {
    "max_request_workers": (
        "apache",
        re.compile(r"^([ \t]*MaxRequestWorkers[ \t]+)(\S+)([ \t]*)$", re.I | re.M),
    ),
    "keepalive_timeout_s": (
        "apache",
        re.compile(r"^([ \t]*KeepAliveTimeout[ \t]+)(\S+)([ \t]*)$", re.I | re.M),
    ),
    "php_max_children": (
        "php-fpm",
        re.compile(r"^([ \t]*pm\.max_children[ \t]*=[ \t]*)(\S+)([ \t]*)$", re.M),
    ),
}
"""Where each setting IC2 moves is written: one line of Apache's configuration
(``MaxRequestWorkers 64``, ``KeepAliveTimeout 5`` or ``500ms``) or of php-fpm's pool
(``pm.max_children = 16``)."""


def _seconds(text: str) -> float:
    return float(text[:-2]) / 1000.0 if text.lower().endswith("ms") else float(text)


def keepalive_value(keepalive_timeout_s: float) -> str:
    """KeepAliveTimeout's argument: whole seconds as such, anything finer in milliseconds."""
    if float(keepalive_timeout_s).is_integer():
        return str(int(keepalive_timeout_s))
    return f"{round(keepalive_timeout_s * 1000)}ms"


def read_settings(config: ApacheConfig, source: str = "apache") -> ServerSettings:
    """The three settings ``config``'s texts ask for; ``InputError`` naming every setting that
    is missing, written more than once (the one to change would be ambiguous) or unreadable."""
    problems: list[Problem] = []
    found: dict[str, float] = {}
    for key, (part, pattern) in _DIRECTIVES.items():
        hits = pattern.findall(config.text(part))
        if len(hits) != 1:
            problems.append(
                Problem(key, f"the {part} configuration has {len(hits)} such lines, not one")
            )
            continue
        value = hits[0][1]
        try:
            number = _seconds(value) if key == "keepalive_timeout_s" else float(int(value))
        except ValueError:
            problems.append(Problem(key, f"{value!r} is not a number"))
            continue
        if number <= 0:
            problems.append(Problem(key, f"{value!r} must be above 0"))
        found[key] = number
    if problems:
        raise InputError(source, problems)
    return ServerSettings(
        int(found["max_request_workers"]),
        found["keepalive_timeout_s"],
        int(found["php_max_children"]),
    )


def with_settings(config: ApacheConfig, settings: ServerSettings) -> ApacheConfig:
    """``config`` with the one line of each setting rewritten to ``settings`` (every other
    byte as it was); the lines must be there as ``read_settings`` requires."""
    values = {
        "max_request_workers": str(settings.max_request_workers),
        "keepalive_timeout_s": keepalive_value(settings.keepalive_timeout_s),
        "php_max_children": str(settings.php_max_children),
    }
    texts = {"apache": config.httpd, "php-fpm": config.php_fpm}
    for key, (part, pattern) in _DIRECTIVES.items():
        texts[part] = _rewrite(pattern, texts[part], values[key])
    return ApacheConfig(texts["apache"], texts["php-fpm"])


def _rewrite(pattern: re.Pattern[str], text: str, value: str) -> str:
    return pattern.sub(lambda m: m.group(1) + value + m.group(3), text)


# -- what a ReconfigureServer may ask ---------------------------------------------------------
ONLINE_SETTINGS = frozenset({"max_request_workers", "php_max_children"})
"""What ``ReconfigureServer(graceful=False)`` changes without restarting Apache: MaxRequestWorkers
as the balancer's cap for the instance, php-fpm's pool size by a reload of php-fpm alone (the
paper's httpd-online reloaded php-fpm as well). KeepAliveTimeout needs Apache's children
restarted."""


def setting_problems(changes: Mapping[str, object]) -> list[Problem]:
    problems: list[Problem] = []
    for key, value in changes.items():
        where = f"settings.{key}"
        if key not in SERVER_SETTING_KEYS:
            known = ", ".join(SERVER_SETTING_KEYS)
            problems.append(Problem(where, f"apache instances have no such setting ({known})"))
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        whole = number and (key == "keepalive_timeout_s" or isinstance(value, int))
        if not whole:
            kind = "a number of seconds" if key == "keepalive_timeout_s" else "a whole number"
            problems.append(Problem(where, f"{value!r} is not {kind}"))
    return problems


@dataclass(frozen=True)
class OnlineChange:
    """A ``ReconfigureServer(graceful=False)``, split by how each setting is applied."""

    workers: int | None
    """MaxRequestWorkers as the balancer's cap for the instance (None: left as it is)."""
    reload: dict[str, int]
    """What php-fpm takes by a reload of its own, Apache untouched (empty: no reload)."""


def online_change(changes: Mapping[str, object], ceiling: int) -> OnlineChange:
    """What ``changes`` set online: MaxRequestWorkers at most ``ceiling`` (what Apache runs) and
    php-fpm's pool size; ``InputError`` lists every problem, settings that cannot change online
    among them."""
    problems = setting_problems(changes)
    if fixed := sorted(set(changes) & set(SERVER_SETTING_KEYS) - ONLINE_SETTINGS):
        problems.append(
            Problem(
                "graceful",
                f"{', '.join(fixed)} cannot change online: Apache reads KeepAliveTimeout only "
                "when it restarts its children; send it with graceful=True",
            )
        )
    workers = changes.get("max_request_workers")
    if isinstance(workers, int) and not 1 <= workers <= ceiling:
        problems.append(
            Problem(
                "settings.max_request_workers",
                f"{workers} is not in 1..{ceiling}: online it can only go as high as the "
                f"{ceiling} Apache runs (raise that with graceful=True)",
            )
        )
    php = changes.get("php_max_children")
    if workers is None and php is None and not problems:
        problems.append(Problem("settings", "nothing to change online"))
    if problems:
        raise InputError("ReconfigureServer", problems)
    return OnlineChange(
        workers if isinstance(workers, int) else None,
        {"php_max_children": php} if isinstance(php, int) else {},
    )


def run_command(argv: Sequence[str], timeout_s: float = 20.0) -> tuple[int, str]:
    """Exit code and output (stdout then stderr) of a short command."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise ComponentError(argv[0], "is not installed") from None
    except subprocess.TimeoutExpired:
        raise ComponentError(argv[0], f"{' '.join(argv)} took over {timeout_s:g} s") from None
    return done.returncode, (done.stdout + done.stderr).strip()


class ApacheServer:
    """One running Apache + php-fpm pair whose configuration is ``config`` (in force, and read
    back as ``in_force`` by ``read_back``)."""

    def __init__(
        self,
        layout: ApacheLayout,
        config: ApacheConfig,
        fetch: Fetch,
        restart: Callable[[Part], None],
        *,
        settle_timeout_s: float = 10.0,
        poll_s: float = 0.05,
        proc_root: Path = Path("/proc"),
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        run: Runner = run_command,
        kill: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.layout = layout
        self.last_good = config
        self.in_force: ServerSettings | None = None
        self.fetch = fetch
        self.restart = restart
        self.settle_timeout_s = settle_timeout_s
        self.poll_s = poll_s
        self.proc_root = proc_root
        self.monotonic = monotonic
        self.sleep = sleep
        self.run = run
        self.kill = kill

    # -- what runs ---------------------------------------------------------------------------
    def _named(self, part: Part) -> int | None:
        """The pid ``part``'s pid file names; None while there is none: no file yet, or an
        empty one (php-fpm creates its pid file, then writes it; Apache renames a whole one
        into place)."""
        try:
            return int(self.layout.pid_file(part).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pid(self, part: Part) -> int | None:
        """The pid in ``part``'s pid file, if it names a running process."""
        pid = self._named(part)
        return pid if pid is not None and process_running(pid, self.proc_root) else None

    def _running(self, part: Part) -> int | None:
        """``part``'s pid once it runs; None while it starts (no whole pid file yet); raises
        when its pid file names a process that has exited."""
        pid = self._named(part)
        if pid is None:
            return None
        if not process_running(pid, self.proc_root):
            if part == "php-fpm":
                raise ComponentError(part, "not running (its master exited)")
            tail = self.log_since(max(0, self.log_mark() - LOG_TAIL_BYTES)).strip()
            raise ComponentError(part, f"not running (its parent exited); its log ends {tail!r}")
        return pid

    def status(self) -> ApacheStatus:
        return parse_server_status(self.fetch(STATUS_PATH))

    def children(self) -> list[int]:
        """php-fpm's pool processes."""
        pid = self.pid("php-fpm")
        return read_children(pid, self.proc_root) if pid is not None else []

    def log_mark(self) -> int:
        """Where Apache's error log ends now (what it writes next comes after)."""
        try:
            return self.layout.error_log.stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        try:
            with open(self.layout.error_log, "rb") as f:
                f.seek(mark)
                return f.read(MAX_LOG_BYTES).decode(errors="replace")
        except OSError:
            return ""

    # -- reading back ------------------------------------------------------------------------
    def read_back(
        self,
        want: ServerSettings,
        mark: int | None = 0,
        lowered: int | None = None,
        old_children: frozenset[int] = frozenset(),
    ) -> ServerSettings:
        """Wait (up to ``settle_timeout_s``) until the servers have taken ``want``: Apache's
        log, after ``mark`` (None: Apache was not restarted), says it re-read its
        configuration; php-fpm has a pool of ``php_max_children`` processes none of which is
        in ``old_children``. Returns what they use (MaxRequestWorkers lowered where ``lowered``
        or the log says so), and keeps it as ``in_force``."""
        deadline = self.monotonic() + self.settle_timeout_s
        if mark is None and self.in_force is not None:
            workers = self.in_force.max_request_workers
        else:
            logged = self._wait_for_resume(mark or 0, deadline)
            found = (want.max_request_workers, lowered, parse_lowered_workers(logged))
            workers = min(w for w in found if w is not None)
        children = self._wait_for_pool(want.php_max_children, old_children, deadline)
        self.in_force = ServerSettings(workers, want.keepalive_timeout_s, children)
        return self.in_force

    def _wait_for_resume(self, mark: int, deadline: float) -> str:
        """Apache's log after ``mark`` once it says it re-read its configuration."""
        while True:
            logged = self.log_since(mark)
            if self._running("apache") is not None and RESUMED in logged:
                if refused := [line for line in logged.splitlines() if NOT_ALLOWED in line]:
                    raise ComponentError("apache", "; ".join(refused))
                return logged
            if self.monotonic() >= deadline:
                raise ComponentError(
                    "apache",
                    f"did not say it re-read its configuration within {self.settle_timeout_s:g} "
                    f"s: {logged[-400:]!r}",
                )
            self.sleep(self.poll_s)

    def wait_for_workers(self, workers: int) -> ApacheStatus:
        """``server-status`` once it shows ``workers`` threads of the serving generation,
        three polls in a row (up to ``settle_timeout_s``)."""
        deadline = self.monotonic() + self.settle_timeout_s
        steady = 0
        while True:
            try:
                seen: ApacheStatus | None = self.status()
            except ComponentError:
                seen = None
            steady = steady + 1 if seen is not None and seen.workers == workers else 0
            if seen is not None and steady >= STEADY_POLLS:
                return seen
            if self.monotonic() >= deadline:
                raise ComponentError("apache", f"server-status shows {seen}, not {workers} workers")
            self.sleep(self.poll_s)

    def _wait_for_pool(self, size: int, old: frozenset[int], deadline: float) -> int:
        """The pool's size once it has ``size`` processes, all started after ``old`` and each
        a pool worker already (``POOL_TITLE``: just after the fork a child still has the
        master's title and has not opened its pool)."""
        kids: list[int] = []
        while True:
            if self._running("php-fpm") is not None:
                kids = self.children()
                if (
                    len(kids) == size
                    and not old.intersection(kids)
                    and all(read_title(k, self.proc_root).startswith(POOL_TITLE) for k in kids)
                ):
                    return len(kids)
            if self.monotonic() >= deadline:
                stale = len(old.intersection(kids))
                starting = sum(
                    not read_title(k, self.proc_root).startswith(POOL_TITLE) for k in kids
                )
                raise ComponentError(
                    "php-fpm",
                    f"has {len(kids)} children ({stale} from before the reload, {starting} not"
                    f" pool workers yet), not {size} new pool workers,"
                    f" {self.settle_timeout_s:g} s on",
                )
            self.sleep(self.poll_s)

    # -- changing ----------------------------------------------------------------------------
    def test(self, config: ApacheConfig) -> int | None:
        """Test each changed configuration, written beside the one in force (``.new``);
        ``ComponentError`` naming every refusal, with nothing applied. Returns the
        MaxRequestWorkers Apache said it would lower the new value to, if it would."""
        refused: list[str] = []
        lowered = None
        for part in self._changed(config):
            staged = self._staged(part)
            staged.write_text(config.text(part))
            rc, out = self.run(self.layout.test_argv(part, staged))
            if rc != 0:
                refused.append(f"{part} refused the new configuration: {out}")
                staged.unlink(missing_ok=True)
            elif part == "apache":
                lowered = parse_lowered_workers(out)
        if refused:
            for part in PARTS:
                self._staged(part).unlink(missing_ok=True)
            raise ComponentError("apache", "; ".join(refused))
        return lowered

    def reconfigure(self, config: ApacheConfig, want: ServerSettings) -> ServerSettings:
        """Test, apply, read back ``want`` (see the module); roll back on failure."""
        parts = self._changed(config)
        if not parts and self.in_force is not None:
            return self.in_force
        started = self.monotonic()
        lowered = self.test(config)
        try:
            for part in parts:
                os.replace(self._staged(part), self.layout.conf(part))
            mark, old = self._reload(parts)
            reading = self.read_back(want, mark, lowered, old)
        except ComponentError as exc:
            self._roll_back(parts, exc)
        self.last_good = config
        log.info(
            "%s reconfigured to %s in %.2f s", "+".join(parts), reading, self.monotonic() - started
        )
        return reading

    def _changed(self, config: ApacheConfig) -> list[Part]:
        return [p for p in PARTS if config.text(p) != self.last_good.text(p)]

    def _staged(self, part: Part) -> Path:
        conf = self.layout.conf(part)
        return conf.with_name(conf.name + ".new")

    def _reload(self, parts: Sequence[Part]) -> tuple[int | None, frozenset[int]]:
        """Reload ``parts`` with the configurations in their files (start a part that is not
        running again); returns what the read-back must see passed: where Apache's log ended
        before (None: Apache was not reloaded), php-fpm's children before its reload."""
        mark: int | None = None
        old: frozenset[int] = frozenset()
        for part in parts:
            pid = self.pid(part)
            if part == "apache":
                mark = self.log_mark()
            if pid is None:
                self.layout.pid_file(part).unlink(missing_ok=True)  # the new one writes it
                self.restart(part)
            elif part == "apache":
                conf = str(self.layout.httpd_conf)
                rc, out = self.run([self.layout.apache_binary, "-k", "graceful", "-f", conf])
                if rc != 0:
                    raise ComponentError("apache", f"graceful restart failed ({rc}): {out}")
            else:
                old = frozenset(read_children(pid, self.proc_root))
                self.kill(pid, signal.SIGUSR2)
        return mark, old

    def _roll_back(self, parts: Sequence[Part], cause: ComponentError) -> NoReturn:
        """Put the last configuration that worked back and reload ``parts`` with it; raises
        ``ComponentError`` saying what failed, and whether the roll-back worked."""
        good = self.in_force
        log.warning("reconfiguration failed (%s); rolling back to %s", cause, good)
        for part in PARTS:
            self._staged(part).unlink(missing_ok=True)
        try:
            for part in parts:
                self.layout.conf(part).write_text(self.last_good.text(part))
            mark, old = self._reload(parts)
            if good is not None:
                self.read_back(good, mark, None, old)
        except ComponentError as again:
            log.error("rolling back failed too: %s", again)
            raise ComponentError(
                "apache",
                f"{cause}; rolling back to the last configuration that worked failed too: {again}",
            ) from None
        log.warning("rolled back to %s", good)
        raise ComponentError(
            "apache", f"{cause}; rolled back to the last configuration that worked ({good})"
        ) from None

"""Starting and stopping the lab's processes. Each runs in its own session (so its whole process
group can be signalled), carries the run tag in its environment, and can be placed in a network
namespace, cgroups and on chosen CPUs. Placement happens by exec chaining, so the pid we hold is
the pid of the real program. ``terminate_on_signals``: the runner itself, asked to stop by
SIGTERM or SIGHUP, unwinds as from Ctrl-C, so whatever it brought up is torn down."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from quell.errors import ComponentError
from quell.instrument.token import rq_map_inheritance
from quell.lab.tag import ENV_VAR, RunTag

TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(SystemExit):
    """Raised in the main thread when SIGTERM or SIGHUP arrives (exit status 128 + the
    signal's number), so the teardown that a ``finally`` or ``__exit__`` holds runs."""


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise ``Terminated`` in the main thread; the handlers
    before are restored on the way out. Outside the main thread (where Python delivers no
    signal) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated(128 + signum)

    old = {s: signal.signal(s, handler) for s in TERMINATING_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


_JOIN_CGROUPS = 'for f in $QUELL_CGROUP_PROCS; do echo $$ > "$f" || exit 97; done; exec "$@"'


@dataclass
class Placement:
    netns: str | None = None
    cgroup_procs: Sequence[Path] = ()
    cpus: Sequence[int] | None = None


@dataclass
class Managed:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, n_bytes: int = 600) -> str:
        try:
            data = self.log_path.read_bytes()[-n_bytes:]
        except OSError:
            return ""
        return data.decode(errors="replace").strip()


@dataclass
class Supervisor:
    """Owns every process of one run; ``stop_all`` ends them, newest first."""

    tag: RunTag
    log_dir: Path
    procs: list[Managed] = field(default_factory=list)
    rq_threads_fd: int | None = None
    """The attached eBPF split's per-thread map, which instrumented servers inherit (named in
    ``QUELL_RQ_THREADS_FD``) so that their records carry the wait behind other cgroups."""

    def argv(self, command: Sequence[str], placement: Placement) -> list[str]:
        argv = list(command)
        if placement.cpus is not None:
            argv = ["taskset", "-c", ",".join(map(str, placement.cpus)), *argv]
        if placement.netns is not None:
            argv = ["ip", "netns", "exec", placement.netns, *argv]
        if placement.cgroup_procs:
            argv = ["/bin/sh", "-c", _JOIN_CGROUPS, "quell-launch", *argv]
        return argv

    def start(
        self,
        name: str,
        command: Sequence[str],
        placement: Placement | None = None,
        env: dict[str, str] | None = None,
        instrumented: bool = False,
    ) -> Managed:
        placement = placement or Placement()
        rq_env, fds = rq_map_inheritance(self.rq_threads_fd if instrumented else None)
        full_env = {**os.environ, **(env or {}), **rq_env, ENV_VAR: self.tag.value}
        full_env["QUELL_CGROUP_PROCS"] = " ".join(str(p) for p in placement.cgroup_procs)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            try:
                popen = subprocess.Popen(
                    self.argv(command, placement),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                    pass_fds=fds,
                )
            except OSError as exc:
                raise ComponentError(name, f"cannot start {command[0]}: {exc.strerror}") from None
        managed = Managed(name, popen, log_path)
        self.procs.append(managed)
        return managed

    def stop(self, proc: Managed, timeout_s: float = 5.0, sig: int = signal.SIGTERM) -> None:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            deadline = time.monotonic() + timeout_s
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            if proc.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=5)
        # Reap, and kill anything the program left in its process group (daemon children).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=1)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc, timeout_s=3.0)


def run_checked(argv: Sequence[str], what: str, timeout_s: float = 20.0) -> str:
    """Run a short command; a non-zero exit raises ``ComponentError`` with its output."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise ComponentError(what, f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ComponentError(what, f"{' '.join(argv)} did not finish in {timeout_s:g} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise ComponentError(what, f"{' '.join(argv)} failed ({done.returncode}): {detail}")
    return done.stdout

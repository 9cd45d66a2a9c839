"""One process's run-queue split (``quell attribute rqsplit``): per thread, its wait for a CPU
split between its own cgroup and the others that held the CPU meanwhile, and its preemptions by
other cgroups, over a span.

Either a running process, measured for ``seconds`` (or until it exits), its threads named from
``/proc/<pid>/task/<tid>/comm``; or a command, started held at a gate (an interpreter that waits
on a pipe, then ``exec``s the command in place, so its pid is the command's), the program
attached to that pid before the gate opens, so the command's first instruction is measured, and
measured until it exits (ended after ``seconds`` if given); its threads have exited by then and
carry no name. The /proc root (``proc_root``, as the collectors take it), the clock, the pause
and the attaching are injected.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from quell.errors import ComponentError, InputError, Problem
from quell.instrument.bpf.loader import RunQueueSplit, attached
from quell.instrument.bpf.records import ThreadSplit

PROC = Path("/proc")
PID_SECONDS = 10.0
"""How long a running process is measured when no span is given."""
GATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "os.read(fd, 1)\n"
    "os.close(fd)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)
"""The interpreter the command waits in: a byte on the pipe's descriptor (its number in argv:
it keeps the number it has here, which need not be 3, nor one digit as a shell's ``<&`` needs)
opens it, and the command replaces it, pid and all."""

Update = Callable[[float, str], None]
ProgressBar = Callable[[float, str], AbstractContextManager[Update]]
Attach = Callable[[int], AbstractContextManager[RunQueueSplit]]


@contextmanager
def _no_bar(total_s: float, label: str) -> Iterator[Update]:
    yield lambda done_s, what: None


def _attach(target_tgid: int) -> AbstractContextManager[RunQueueSplit]:
    return attached(target_tgid=target_tgid)


@dataclass(frozen=True)
class ProcessSplit:
    """The measured process, the span, each recorded thread with its name (``None`` if gone),
    and for a command its exit status (negative: ended by that signal, as at the end of the
    span)."""

    pid: int
    seconds: float
    threads: list[tuple[ThreadSplit, str | None]]
    returncode: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "seconds": self.seconds,
            "threads": [t.to_json() | {"name": n} for t, n in self.threads],
        }


def thread_name(pid: int, tid: int, proc_root: Path = PROC) -> str | None:
    try:
        return (proc_root / str(pid) / "task" / str(tid) / "comm").read_text().strip()
    except OSError:
        return None


def measure_pid(
    pid: int,
    seconds: float = PID_SECONDS,
    proc_root: Path = PROC,
    progress: ProgressBar = _no_bar,
    attach: Attach = _attach,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProcessSplit:
    """The running process ``pid`` measured for ``seconds``, or until it exits."""
    if not (proc_root / str(pid)).is_dir():
        raise InputError("--pid", [Problem("", f"no process {pid}")])
    with attach(pid) as split:
        start = clock()
        with progress(seconds, f"run-queue split of {pid}") as update:
            while (done := clock() - start) < seconds:
                update(done, "measuring")
                if not (proc_root / str(pid)).is_dir():
                    break
                sleep(min(0.2, seconds - done))
            update(min(seconds, clock() - start), "done")
        span = clock() - start
        threads = split.read()
        named = [(t, thread_name(pid, t.tid, proc_root)) for t in threads]
    return ProcessSplit(pid, span, named)


def measure_command(
    command: Sequence[str],
    seconds: float | None = None,
    attach: Attach = _attach,
    clock: Callable[[], float] = time.monotonic,
    which: Callable[[str], str | None] = shutil.which,
) -> ProcessSplit:
    """``command`` started at the gate, the program attached to it, the gate opened, measured
    until it exits (terminated after ``seconds`` if given)."""
    if which(command[0]) is None:
        raise InputError("COMMAND", [Problem("", f"{command[0]!r} is not an executable")])
    read_end, write_end = os.pipe()
    try:
        argv = [sys.executable, "-c", GATE, str(read_end), *command]
        proc = subprocess.Popen(argv, pass_fds=(read_end,))
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        raise ComponentError(command[0], str(exc)) from None
    os.close(read_end)
    threads: list[ThreadSplit] = []
    try:
        with attach(proc.pid) as split:
            start = clock()
            try:
                os.write(write_end, b"go\n")
            except BrokenPipeError:  # the gate is gone: nothing of the command ran
                status = proc.wait(timeout=10)
                raise ComponentError(command[0], f"its gate exited with {status}") from None
            os.close(write_end)
            write_end = -1
            try:
                proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=10)
            span = clock() - start
            threads = split.read()
    finally:
        if write_end >= 0:
            os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return ProcessSplit(proc.pid, span, [(t, None) for t in threads], proc.returncode)


def measure(
    pid: int | None = None,
    command: Sequence[str] = (),
    seconds: float | None = None,
    proc_root: Path = PROC,
    progress: ProgressBar = _no_bar,
) -> ProcessSplit:
    """``quell attribute rqsplit``: the process ``pid`` (for ``seconds``, default
    ``PID_SECONDS``) or ``command``, exactly one of them."""
    if (pid is None) == (not command):
        raise InputError("rqsplit", [Problem("", "give one of --pid PID or a command after --")])
    if pid is not None:
        return measure_pid(pid, PID_SECONDS if seconds is None else seconds, proc_root, progress)
    return measure_command(command, seconds)

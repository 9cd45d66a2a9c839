"""``quell.instrument.bpf.rqsplit`` with the program's attaching replaced: a command waits at its
gate until the program is attached to its pid, and is that pid when it runs; a running process's
threads are named from the /proc root given, and its measurement ends when it exits."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from quell.errors import InputError
from quell.instrument.bpf import rqsplit
from quell.instrument.bpf.records import ThreadSplit


def thread(tid: int, tgid: int, wait_ns: int) -> ThreadSplit:
    return ThreadSplit(tid, tgid, 7, "/svc", wait_ns, wait_ns, 0, 0, 0, ())


class FakeSplit:
    def __init__(self, threads: list[ThreadSplit]) -> None:
        self.threads = threads

    def read(self) -> list[ThreadSplit]:
        return self.threads


def test_a_command_runs_only_once_attached_and_as_the_pid_attached_to(tmp_path: Path) -> None:
    started = tmp_path / "started"
    attached_to: list[int] = []

    @contextmanager
    def attach(pid: int) -> Iterator[FakeSplit]:
        attached_to.append(pid)
        time.sleep(0.2)  # time enough for a command that was not held to have started
        assert not started.exists()  # held at the gate while the program attaches
        yield FakeSplit([thread(pid, pid, 5_000)])

    command = ["sh", "-c", f'echo $$ > "{started}"; exit 3']
    # the lowest free descriptors taken, so the gate's pipe is not on 3 (as under a caller with
    # descriptors of its own open: the gate once read 3 whatever the pipe's number was)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(4)]
    try:
        result = rqsplit.measure_command(command, attach=attach)  # type: ignore[arg-type]
    finally:
        for fd in held:
            os.close(fd)
    assert attached_to == [result.pid]
    assert int(started.read_text()) == result.pid  # exec in place: the command is that pid
    assert result.returncode == 3
    assert [(t.tid, name) for t, name in result.threads] == [(result.pid, None)]
    assert result.as_dict()["threads"] == [
        thread(result.pid, result.pid, 5_000).to_json() | {"name": None}
    ]


def test_a_running_process_is_named_from_the_proc_root_and_ends_with_it(tmp_path: Path) -> None:
    task = tmp_path / "40" / "task"
    for tid, comm in ((41, "web\n"), (42, "worker [1]\n")):
        (task / str(tid)).mkdir(parents=True)
        (task / str(tid) / "comm").write_text(comm)
    now = [0.0]
    exits_at = [float("inf")]
    shown: list[tuple[float, str]] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= exits_at[0] and (tmp_path / "40").exists():
            shutil.rmtree(tmp_path / "40")

    @contextmanager
    def attach(pid: int) -> Iterator[FakeSplit]:
        assert pid == 40
        yield FakeSplit([thread(41, 40, 1_000), thread(42, 40, 9_000), thread(43, 40, 0)])

    @contextmanager
    def bar(total_s: float, label: str) -> Iterator[rqsplit.Update]:
        shown.append((total_s, label))
        yield lambda done_s, what: shown.append((done_s, what))

    def measure(seconds: float) -> rqsplit.ProcessSplit:
        return rqsplit.measure_pid(
            40,
            seconds,
            tmp_path,
            bar,
            attach,
            clock=lambda: now[0],
            sleep=sleep,  # type: ignore[arg-type]
        )

    result = measure(1.0)
    assert {t.tid: name for t, name in result.threads} == {41: "web", 42: "worker [1]", 43: None}
    assert result.seconds == pytest.approx(1.0)
    assert shown[0] == (1.0, "run-queue split of 40") and shown[-1] == (pytest.approx(1.0), "done")
    # exits 0.4 s into a 10 s span: the measurement ends there, its threads unnamed
    now[0], exits_at[0] = 0.0, 0.4
    result = measure(10.0)
    assert result.seconds == pytest.approx(0.4)
    assert {name for _, name in result.threads} == {None}
    with pytest.raises(InputError, match="no process 40"):
        rqsplit.measure_pid(40, proc_root=tmp_path)


def test_one_target_exactly() -> None:
    for pid, command in ((None, ()), (1, ("true",))):
        with pytest.raises(InputError, match="give one of --pid PID or a command after --"):
            rqsplit.measure(pid, command)
    with pytest.raises(InputError, match="'/nonexistent/x' is not an executable"):
        rqsplit.measure(command=["/nonexistent/x"])

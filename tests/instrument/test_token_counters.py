"""The quelltoken counters against threads whose behaviour is known: one that sleeps, one that
spins, one preempted by a competitor pinned to its CPU, and tokens yielded and resumed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quell.errors import PrerequisiteError
from quell.instrument import token as qt
from tests.instrument.conftest import in_thread, spin_cpu, spin_wall

MS = 1_000_000


def test_a_sleeping_thread_is_blocked_for_the_sleep(lib: qt.TokenLibrary) -> None:
    def run() -> qt.Reading:
        with qt.token(1, "/sleep", library=lib) as t:
            time.sleep(0.2)
        return t.read()

    r = in_thread(run)
    assert r.state == "ended" and r.request_id == 1 and r.request_class == "/sleep"
    assert 200 * MS <= r.wall_ns < 400 * MS
    assert r.cpu_ns < 10 * MS
    assert r.vol_cs >= 1
    assert r.blocked_ns >= 190 * MS
    assert r.wall_ns == r.end_ns - r.start_ns
    assert r.yields == 0


def test_a_spinning_thread_is_on_the_cpu_or_waiting_for_it(lib: qt.TokenLibrary) -> None:
    def run() -> qt.Reading:
        with qt.token(2, "/spin", library=lib) as t:
            spin_wall(0.3)
        return t.read()

    r = in_thread(run)
    assert 300 * MS <= r.wall_ns < 500 * MS
    # never blocked: every nanosecond is CPU or run-queue wait (a few ms of tick granularity);
    # the interpreter may block a few times, briefly, when another thread asks for the GIL, so
    # the count of voluntary switches is not bounded, only the time they take
    assert abs(r.blocked_ns) <= 0.02 * r.wall_ns + 2 * MS
    assert r.cpu_ns > 0
    assert r.cpu_ns <= r.wall_ns


def _competitor(cpu: int, seconds: float) -> subprocess.Popen[bytes]:
    code = (
        "import os, time\n"
        f"os.sched_setaffinity(0, {{{cpu}}})\n"
        f"end = time.monotonic() + {seconds}\n"
        "while time.monotonic() < end:\n    pass\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _run_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def test_a_competitor_on_the_same_cpu_shows_as_run_queue_wait(lib: qt.TokenLibrary) -> None:
    cpu = max(os.sched_getaffinity(0))
    rival = _competitor(cpu, 10.0)
    try:
        deadline = time.monotonic() + 5
        while _run_ns(rival.pid) < 100 * MS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _run_ns(rival.pid) >= 100 * MS, "the competitor did not start spinning"

        def run() -> qt.Reading:
            os.sched_setaffinity(0, {cpu})
            with qt.token(3, "/contended", library=lib) as t:
                spin_wall(0.5)
            return t.read()

        r = in_thread(run)
    finally:
        rival.kill()
        rival.wait(timeout=10)
    # two runnable threads on one CPU: a fair scheduler gives each about half
    assert 500 * MS <= r.wall_ns < 800 * MS
    assert r.runq_wait_ns >= 0.25 * r.wall_ns
    assert r.cpu_ns <= 0.75 * r.wall_ns
    assert r.invol_cs > 0
    assert r.timeslices >= r.invol_cs
    assert abs(r.wall_ns - r.cpu_ns - r.runq_wait_ns) <= 0.02 * r.wall_ns + 2 * MS


def test_yield_and_resume_count_only_the_running_spans(lib: qt.TokenLibrary) -> None:
    def run() -> tuple[qt.Reading, qt.Snapshot, qt.Snapshot]:
        before = lib.snapshot()
        tok = lib.start(4, "/yielded")
        spin_cpu(0.05)
        lib.yield_(tok)
        spin_cpu(0.1)  # not this token's
        for _ in range(3):
            time.sleep(0.01)  # three voluntary switches, not this token's
        lib.resume(tok)
        spin_cpu(0.05)
        lib.end(tok)
        return lib.read(tok), before, lib.snapshot()

    r, before, after = in_thread(run)
    assert r.yields == 1
    assert 100 * MS <= r.cpu_ns <= 105 * MS
    assert after.cpu_ns - before.cpu_ns >= 200 * MS
    assert r.vol_cs <= (after.vol_cs - before.vol_cs) - 3
    assert r.wall_ns >= 230 * MS


def _ended(lib: qt.TokenLibrary, a: int, b: int) -> tuple[qt.Reading, qt.Reading]:
    lib.end(a)
    lib.end(b)
    return lib.read(a), lib.read(b)


def _each_counted_60_ms(*readings: qt.Reading) -> None:
    for r in readings:
        assert 60 * MS <= r.cpu_ns <= 62 * MS


def test_one_thread_multiplexes_tokens(lib: qt.TokenLibrary) -> None:
    """Two tokens interleaved on one thread: each counts its own spans, 3 x 20 and 2 x 30 ms."""

    def run() -> tuple[qt.Reading, qt.Reading]:
        a = lib.start(10, "/a")
        lib.yield_(a)
        b = lib.start(11, "/b")
        lib.yield_(b)
        for i in range(3):
            lib.resume(a)
            spin_cpu(0.02)
            lib.yield_(a)
            if i < 2:
                lib.resume(b)
                spin_cpu(0.03)
                lib.yield_(b)
        return _ended(lib, a, b)

    a, b = in_thread(run)
    assert (a.request_id, a.yields, b.request_id, b.yields) == (10, 4, 11, 3)
    _each_counted_60_ms(a, b)
    assert a.thread_id == b.thread_id
    assert a.start_ns < b.start_ns < b.end_ns and a.end_ns <= b.end_ns


def test_a_switch_counts_as_a_yield_and_a_resume_at_one_reading(lib: qt.TokenLibrary) -> None:
    """The same interleaving with qt_start_after and qt_switch, as an event loop makes it: each
    token counts its own spans (3 x 20 and 2 x 30 ms) and nothing between them."""

    def run() -> tuple[qt.Reading, qt.Reading]:
        a = lib.start(12, "/a")
        b = lib.start_after(a, 13, "/b")  # a yielded, b running
        lib.switch(b, 0)
        spin_cpu(0.02)  # neither token's
        cur = 0
        for i in range(3):
            lib.switch(cur, a)
            spin_cpu(0.02)
            cur = a
            if i < 2:
                lib.switch(a, b)
                spin_cpu(0.03)
                cur = b
        return _ended(lib, a, b)

    a, b = in_thread(run)
    assert (a.request_id, a.yields, b.request_id, b.yields) == (12, 3, 13, 3)
    _each_counted_60_ms(a, b)


def test_a_refused_switch_changes_nothing(lib: qt.TokenLibrary) -> None:
    import errno

    def run() -> list[tuple[str, int, int, str]]:
        a = lib.start(14, "/a")
        b = lib.start_after(a, 15, "/b")
        seen = []
        for frm, to in ((a, b), (b, b), (b, 987654321), (0, 0)):
            try:
                lib.switch(frm, to)
                seen.append(("switch", 0, lib.read(a).yields, lib.read(b).state))
            except qt.TokenError as exc:
                seen.append((exc.operation, exc.errno, lib.read(a).yields, lib.read(b).state))
        return seen

    assert in_thread(run) == [
        ("switch", errno.EALREADY, 1, "running"),  # a is not running: b stays running
        ("switch", errno.EALREADY, 1, "running"),  # b cannot be resumed while it runs
        ("switch", errno.EINVAL, 1, "running"),  # no such token: b is not yielded
        ("switch", 0, 1, "running"),  # nothing to do
    ]


def test_read_sees_a_running_token_so_far(lib: qt.TokenLibrary) -> None:
    def run() -> tuple[qt.Reading, qt.Reading, int]:
        before = time.thread_time_ns()
        with qt.token(5, "/r", library=lib) as t:
            spin_cpu(0.02)
            mid = t.read()
            spin_cpu(0.02)
        around = time.thread_time_ns() - before
        return mid, t.read(), around

    mid, last, around = in_thread(run)
    assert mid.state == "running" and mid.end_ns == 0
    assert 20 * MS <= mid.cpu_ns < last.cpu_ns
    # at least what was spun, at most the thread's own CPU over a span that holds the token
    # (a fixed 2 ms of slack failed once under a loaded machine: 43.8 ms)
    assert last.state == "ended" and 40 * MS <= last.cpu_ns <= around


def test_misuse_is_refused_with_the_errno(lib: qt.TokenLibrary) -> None:
    def run() -> list[tuple[str, int]]:
        seen: list[tuple[str, int]] = []
        tok = lib.start(6, "/x")
        for op in (lib.resume, lib.end, lib.end, lib.yield_, lib.resume):
            try:
                op(tok)
                seen.append((getattr(op, "__name__", "?"), 0))
            except qt.TokenError as exc:
                seen.append((exc.operation, exc.errno))
        try:
            lib.read(123456789)
        except qt.TokenError as exc:
            seen.append((exc.operation, exc.errno))
        return seen

    import errno

    assert in_thread(run) == [
        ("resume", errno.EALREADY),  # running already
        ("end", 0),
        ("end", errno.EINVAL),  # ended already
        ("yield", errno.EINVAL),
        ("resume", errno.EINVAL),
        ("read", errno.EINVAL),
    ]


def test_a_token_belongs_to_its_thread(lib: qt.TokenLibrary) -> None:
    tok = in_thread(lambda: lib.start(7, "/other"))
    with pytest.raises(qt.TokenError) as info:
        lib.end(tok)
    assert info.value.operation == "end"


def test_module_functions_and_the_context_manager_share_the_default_library(
    default_lib: qt.TokenLibrary,
) -> None:
    def run() -> qt.Reading:
        tok = qt.start(8, "/m")
        qt.yield_(tok)
        qt.resume(tok)
        qt.end(tok)
        return qt.read(tok)

    r = in_thread(run)
    assert (r.request_id, r.request_class, r.yields, r.state) == (8, "/m", 1, "ended")


def test_the_body_raising_still_ends_the_token(lib: qt.TokenLibrary) -> None:
    def run() -> qt.Reading:
        holder: list[qt.Token] = []
        with pytest.raises(ZeroDivisionError), qt.token(9, "/boom", library=lib) as t:
            holder.append(t)
            _ = 1 / 0
        return holder[0].read()

    assert in_thread(run).state == "ended"


def test_a_missing_library_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError, match="make native"):
        qt.TokenLibrary(tmp_path / "nope.so")


def _own_schedstat() -> tuple[int, int]:
    """The calling thread's run-queue wait and timeslice count, read afresh."""
    fields = Path("/proc/thread-self/schedstat").read_text().split()
    return int(fields[1]), int(fields[2])


def test_the_kept_schedstat_reading_is_the_file_s_value(lib: qt.TokenLibrary) -> None:
    """The library reads schedstat again only after the thread's switch counts moved: each
    snapshot's run-queue wait and timeslices are what the file says, after a sleep (a switch:
    read again) and between back-to-back calls (no switch: the kept reading), whenever no switch
    fell between the snapshot and the check."""

    def run() -> tuple[int, int, int]:
        import resource

        def switches() -> int:
            ru = resource.getrusage(resource.RUSAGE_THREAD)
            return ru.ru_nvcsw + ru.ru_nivcsw

        checked = exact = moved = 0
        last_slices = -1
        for i in range(400):
            if i % 4 == 0:
                time.sleep(0.0005)
            before = switches()
            s = lib.snapshot()
            fresh = _own_schedstat()
            if switches() != before:
                continue  # switched out between the two readings: not comparable
            checked += 1
            exact += (s.runq_wait_ns, s.timeslices) == fresh
            moved += s.timeslices != last_slices
            last_slices = s.timeslices
        return checked, exact, moved

    checked, exact, moved = in_thread(run)
    assert checked >= 200
    assert exact == checked
    assert moved >= 50  # the sleeps moved the counts, and the snapshots followed them


# A process that loads the library with QUELL_RQ_THREADS_FD naming one of its descriptors and
# prints what a token's two eBPF fields say.
_RQ_FIELDS = (
    "from pathlib import Path\n"
    "import sys\n"
    "from quell.instrument import token as qt\n"
    "lib = qt.TokenLibrary(Path(sys.argv[1]))\n"
    "with qt.token(1, '/x', library=lib) as t:\n"
    "    pass\n"
    "r = t.read()\n"
    "print(r.runq_wait_other_cgroup_ns, r.preempt_other_total)\n"
)


@pytest.mark.parametrize("named", ["file", "closed", "garbage"])
def test_a_descriptor_that_is_not_the_split_s_map_leaves_its_fields_unmeasured(
    lib_path: Path, tmp_path: Path, named: str
) -> None:
    path = tmp_path / "not-a-map"
    path.write_bytes(b"\0" * 4096)
    with path.open("rb") as fh:
        fd = fh.fileno()
        value = {"file": str(fd), "closed": "999", "garbage": "7x"}[named]
        env = dict(os.environ, **{qt.RQ_FD_ENV: value})
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        done = subprocess.run(
            [sys.executable, "-c", _RQ_FIELDS, str(lib_path)],
            env=env,
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["-1", "-1"]

"""The ctypes binding of the quelltoken C library: start a token for a request, yield and resume
it while the thread serves other work, end it, read what it saw.

The library is a shared object built by ``make native`` at ``c/build/libquelltoken.so`` beside
this module (``QUELL_TOKEN_LIB`` names another one; ``quell.instrument.native``). It is loaded on first use, not at import.
A token belongs to the thread that started it; every call on it must come from that thread.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final, NamedTuple

from quell.errors import PrerequisiteError, QuellError
from quell.instrument.native import library_path, require_library

LOG_DIR_ENV = "QUELL_TOKEN_LOG_DIR"
LOG_RECORDS_ENV = "QUELL_TOKEN_LOG_RECORDS"
ABI_VERSION = 2
CLASS_BYTES = 48

RUNNING, YIELDED, ENDED = 1, 2, 3
_STATES = {RUNNING: "running", YIELDED: "yielded", ENDED: "ended"}


class TokenError(QuellError):
    """A quelltoken call failed: which call, on which token, and the errno it returned."""

    def __init__(self, operation: str, token: int, code: int) -> None:
        self.operation = operation
        self.token = token
        self.errno = code
        why = {
            errno.EINVAL: "not a live token of this thread",
            errno.EALREADY: "already in that state",
            errno.ENOSPC: "too many tokens open on this thread",
            errno.EIO: "the thread's counters could not be read",
        }.get(code, os.strerror(code))
        super().__init__(f"quelltoken {operation}({token}): {why} (errno {code})")


RQ_FD_ENV: Final = "QUELL_RQ_THREADS_FD"
"""quelltoken.h's QT_RQ_FD_ENV: names a descriptor of the eBPF split's per-thread map
(:meth:`quell.instrument.bpf.RunQueueSplit.threads_fd`) that the process inherited; the library
maps it when it loads, and tokens then count their wait behind other cgroups."""


def rq_map_inheritance(fd: int | None) -> tuple[dict[str, str], tuple[int, ...]]:
    """What a child process needs to inherit the eBPF split's per-thread map ``fd``: the
    environment entry naming it and the descriptors to pass (nothing when ``fd`` is None)."""
    return ({}, ()) if fd is None else ({RQ_FD_ENV: str(fd)}, (fd,))


# a qt_record (quelltoken.h): 14 little-endian int64 fields, then the class
_RECORD = struct.Struct(f"<14q{CLASS_BYTES}s")
_RecordBytes = ctypes.c_char * _RECORD.size


class _Snapshot(ctypes.Structure):
    _fields_ = [
        ("mono_ns", ctypes.c_int64),
        ("cpu_ns", ctypes.c_int64),
        ("runq_wait_ns", ctypes.c_int64),
        ("timeslices", ctypes.c_int64),
        ("vol_cs", ctypes.c_int64),
        ("invol_cs", ctypes.c_int64),
    ]


class Reading(NamedTuple):
    """What a token saw so far (``end_ns`` is 0 until it ended). Counters cover only its running
    spans; ``wall_ns`` runs from start to end (or to the read). A named tuple: a read is on the
    hot path of an instrumented service, and a tuple is built several times faster than a
    frozen dataclass."""

    request_id: int
    request_class: str
    thread_id: int
    state: str
    start_ns: int
    end_ns: int
    wall_ns: int
    cpu_ns: int
    runq_wait_ns: int
    timeslices: int
    vol_cs: int
    invol_cs: int
    yields: int
    runq_wait_other_cgroup_ns: int = -1
    """Run-queue wait behind tasks of other cgroups; -1 unless the process inherited the eBPF
    split's per-thread map (``QUELL_RQ_THREADS_FD``, :mod:`quell.instrument.bpf`)."""
    preempt_other_total: int = -1
    """Preemptions by tasks of other cgroups; -1 as above."""

    @property
    def blocked_ns(self) -> int:
        """Wall time neither on the CPU nor waiting for it (derived, as in the records)."""
        return self.wall_ns - self.cpu_ns - self.runq_wait_ns


@dataclass(frozen=True)
class Snapshot:
    """One raw reading of the calling thread's counters (for benchmarks and checks)."""

    mono_ns: int
    cpu_ns: int
    runq_wait_ns: int
    timeslices: int
    vol_cs: int
    invol_cs: int


class TokenLibrary:
    """The loaded C library. Every method raises :class:`TokenError` on a failed call."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = require_library(Path(path) if path is not None else library_path())
        try:
            # PyDLL: the calls keep the GIL (they take about a microsecond; releasing and
            # re-taking it would cost more and let other threads run inside the measurement).
            lib = ctypes.PyDLL(str(self.path))
        except OSError as exc:
            raise PrerequisiteError(
                f"the quelltoken library at {self.path} cannot be loaded: {exc}",
                "per-request instrumentation",
            ) from exc
        lib.qt_abi_version.restype = ctypes.c_int
        abi = lib.qt_abi_version()
        if abi != ABI_VERSION:
            raise PrerequisiteError(
                f"the quelltoken library at {self.path} has ABI {abi}, this binding needs "
                f"{ABI_VERSION} (rebuild with `make native`)",
                "per-request instrumentation",
            )
        lib.qt_start.argtypes = [ctypes.c_int64, ctypes.c_char_p]
        lib.qt_start.restype = ctypes.c_int64
        for name in ("qt_yield", "qt_resume", "qt_end"):
            getattr(lib, name).argtypes = [ctypes.c_int64]
            getattr(lib, name).restype = ctypes.c_int
        lib.qt_switch.argtypes = [ctypes.c_int64, ctypes.c_int64]
        lib.qt_switch.restype = ctypes.c_int
        lib.qt_start_after.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p]
        lib.qt_start_after.restype = ctypes.c_int64
        lib.qt_label.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p]
        lib.qt_label.restype = ctypes.c_int
        lib.qt_read.argtypes = [ctypes.c_int64, ctypes.c_void_p]
        lib.qt_read.restype = ctypes.c_int
        lib.qt_snapshot_now.argtypes = [ctypes.POINTER(_Snapshot)]
        lib.qt_snapshot_now.restype = ctypes.c_int
        lib.qt_log_path.restype = ctypes.c_char_p
        lib.qt_log_close.restype = None
        lib.qt_log_dropped.restype = ctypes.c_uint64
        self._lib = lib
        # bound C functions, looked up once: each call is then one ctypes call
        self._start = lib.qt_start
        self._yield = lib.qt_yield
        self._resume = lib.qt_resume
        self._end = lib.qt_end
        self._read = lib.qt_read

    def start(self, request_id: int = -1, request_class: str = "") -> int:
        tok = int(self._start(request_id, request_class.encode()[: CLASS_BYTES - 1]))
        if tok < 0:
            raise TokenError("start", tok, -tok)
        return tok

    def yield_(self, tok: int) -> None:
        rc = self._yield(tok)
        if rc:
            raise TokenError("yield", tok, -rc)

    def resume(self, tok: int) -> None:
        rc = self._resume(tok)
        if rc:
            raise TokenError("resume", tok, -rc)

    def switch(self, from_tok: int, to_tok: int) -> None:
        """Yield ``from_tok`` and resume ``to_tok`` (either 0: none) at one reading of the
        counters; nothing changes if either cannot."""
        rc = self._lib.qt_switch(from_tok, to_tok)
        if rc:
            raise TokenError("switch", from_tok or to_tok, -rc)

    def start_after(self, previous: int, request_id: int = -1, request_class: str = "") -> int:
        """Yield ``previous`` (0: none) and start a new token at one reading of the counters."""
        cls = request_class.encode()[: CLASS_BYTES - 1]
        tok = int(self._lib.qt_start_after(previous, request_id, cls))
        if tok < 0:
            raise TokenError("start_after", previous, -tok)
        return tok

    def end(self, tok: int) -> None:
        rc = self._end(tok)
        if rc:
            raise TokenError("end", tok, -rc)

    def label(self, tok: int, request_id: int, request_class: str) -> None:
        """Set a live token's request id and class (known only once the request is read)."""
        rc = self._lib.qt_label(tok, request_id, request_class.encode()[: CLASS_BYTES - 1])
        if rc:
            raise TokenError("label", tok, -rc)

    def read(self, tok: int) -> Reading:
        buf = _RecordBytes()
        rc = self._read(tok, buf)
        if rc < 0:
            raise TokenError("read", tok, -rc)
        f = _RECORD.unpack_from(buf)  # one unpack: each ctypes field access costs a call
        cls = f[14].split(b"\0", 1)[0].decode("utf-8", "replace")
        return Reading(f[0], cls, f[1], _STATES[rc], *f[2:5], *f[5:13])

    def snapshot(self) -> Snapshot:
        snap = _Snapshot()
        rc = self._lib.qt_snapshot_now(ctypes.byref(snap))
        if rc:
            raise TokenError("snapshot", 0, -rc)
        return Snapshot(
            snap.mono_ns,
            snap.cpu_ns,
            snap.runq_wait_ns,
            snap.timeslices,
            snap.vol_cs,
            snap.invol_cs,
        )

    def log_path(self) -> Path | None:
        """The calling thread's current log file (None while it has written no record)."""
        raw: bytes = self._lib.qt_log_path()
        return Path(raw.decode()) if raw else None

    def log_close(self) -> None:
        """Close the calling thread's log; its next record opens a file under the directory
        ``$QUELL_TOKEN_LOG_DIR`` names then."""
        self._lib.qt_log_close()

    def log_dropped(self) -> int:
        """Records this process could not write (a log that could not be opened)."""
        return int(self._lib.qt_log_dropped())


@cache
def default_library() -> TokenLibrary:
    """The library at :func:`library_path`, loaded once per process on first use."""
    return TokenLibrary()


def start(request_id: int = -1, request_class: str = "") -> int:
    return default_library().start(request_id, request_class)


def yield_(tok: int) -> None:
    default_library().yield_(tok)


def resume(tok: int) -> None:
    default_library().resume(tok)


def end(tok: int) -> None:
    default_library().end(tok)


def read(tok: int) -> Reading:
    return default_library().read(tok)


@dataclass
class Token:
    """A started token, as the :func:`token` context manager hands it out."""

    id: int
    library: TokenLibrary

    def yield_(self) -> None:
        self.library.yield_(self.id)

    def resume(self) -> None:
        self.library.resume(self.id)

    def read(self) -> Reading:
        return self.library.read(self.id)


@contextmanager
def token(
    request_id: int = -1, request_class: str = "", library: TokenLibrary | None = None
) -> Iterator[Token]:
    """``with token(42, "/index.html") as t: ...``: a token started on entry and ended on exit
    (also when the body raises); ``t.read()`` still works after the block."""
    lib = library if library is not None else default_library()
    tok = Token(lib.start(request_id, request_class), lib)
    try:
        yield tok
    finally:
        lib.end(tok.id)

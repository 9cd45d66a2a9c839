"""Load and attach rqwait.bpf.o through libbpf (ctypes over ``libbpf.so.1``, no bcc), read its
maps, detach. :func:`probe` says whether it can load here and, if not, why.

The object is built by ``make native`` into ``build/`` beside this module (``QUELL_RQWAIT_OBJ``
names another). Nothing is loaded at import; the library is opened on first use."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from quell.errors import PrerequisiteError, QuellError
from quell.instrument.bpf.cgroups import MOUNTS, CgroupLayout, cgroup_layout, cgroup_paths
from quell.instrument.bpf.records import CONFIG, KEY, VALUE, ThreadSplit, decode

BPF_DIR = Path(__file__).resolve().parent
OBJECT = BPF_DIR / "build" / "rqwait.bpf.o"
OBJECT_ENV = "QUELL_RQWAIT_OBJ"
BTF = Path("/sys/kernel/btf/vmlinux")
LIBBPF = "libbpf.so.1"
NEEDED_FOR = "the eBPF run-queue split"
LIBBPF_WARN = 0  # enum libbpf_print_level: LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG


class BpfLoadError(QuellError):
    """libbpf refused the program: which step, the errno, and what libbpf printed."""

    exit_code = 2

    def __init__(self, step: str, code: int, log: list[str], why: str | None = None) -> None:
        self.step = step
        self.errno = code
        self.log = log
        tail = "; ".join(line.removeprefix("libbpf: ") for line in log[-6:] if line)
        super().__init__(
            f"eBPF run-queue split: {step} failed: {why or os.strerror(code)} (errno {code})"
            + (f"; libbpf: {tail}" if tail else "")
        )


def object_path() -> Path:
    """``$QUELL_RQWAIT_OBJ`` or the ``make native`` build (unchecked)."""
    env = os.environ.get(OBJECT_ENV)
    return Path(env) if env else OBJECT


_PrintFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class _Libbpf:
    """The few libbpf 1.x calls the loader needs, typed; its log lines collected, not printed."""

    def __init__(self, name: str = LIBBPF) -> None:
        self.lib = ctypes.CDLL(name, use_errno=True)
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.log: list[str] = []
        p, i, s, c = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
        for fn, args, res in (
            ("bpf_object__open_file", [c, p], p),
            ("bpf_object__load", [p], i),
            ("bpf_object__close", [p], None),
            ("bpf_object__next_program", [p, p], p),
            ("bpf_object__next_map", [p, p], p),
            ("bpf_object__find_map_by_name", [p, c], p),
            ("bpf_map__name", [p], c),
            ("bpf_map__fd", [p], i),
            ("bpf_map__value_size", [p], ctypes.c_uint32),
            ("bpf_map__set_initial_value", [p, p, s], i),
            ("bpf_program__attach", [p], p),
            ("bpf_program__name", [p], c),
            ("bpf_link__destroy", [p], i),
            ("bpf_map_get_next_key", [i, p, p], i),
            ("bpf_map_lookup_elem", [i, p, p], i),
            ("libbpf_set_print", [_PrintFn], p),
            ("libbpf_strerror", [i, p, s], i),
        ):
            f = getattr(self.lib, fn)
            f.argtypes, f.restype = args, res
        self.libc.vsnprintf.argtypes = [p, s, c, p]
        self.libc.vsnprintf.restype = i
        self._printer = _PrintFn(self._print)  # kept alive as long as the library is used
        self.lib.libbpf_set_print(self._printer)

    def _print(self, level: int, fmt: bytes | None, args: int | None) -> int:
        if level <= LIBBPF_WARN and fmt is not None:
            buf = ctypes.create_string_buffer(1024)
            self.libc.vsnprintf(buf, len(buf), fmt, args)
            self.log.append(buf.value.decode(errors="replace").strip())
        return 0


@dataclass(frozen=True)
class Probe:
    """Whether the program can load here; ``reason`` says why not."""

    ok: bool
    reason: str | None = None
    object_path: Path | None = None


def _prerequisite(obj: Path, btf: Path, euid: int) -> str | None:
    if not obj.is_file():
        return f"the program is not built at {obj} (run `make native`; needs clang and bpftool)"
    if not btf.exists():
        return f"the kernel has no BTF ({btf} is missing; needs CONFIG_DEBUG_INFO_BTF)"
    if euid != 0:
        return "loading eBPF programs needs root"
    return None


def probe(
    obj: Path | None = None,
    btf: Path = BTF,
    euid: Callable[[], int] = os.geteuid,
    libbpf: str = LIBBPF,
) -> Probe:
    """Whether rqwait.bpf.o loads here (it is loaded into the kernel and closed, not attached),
    and if not, why: not built, no BTF, not root, no libbpf, or the load's error text."""
    path = obj if obj is not None else object_path()
    reason = _prerequisite(path, btf, euid())
    if reason is not None:
        return Probe(False, reason, path)
    try:
        lib = _Libbpf(libbpf)
    except OSError as exc:
        return Probe(False, f"libbpf is not installed ({libbpf}: {exc}; Debian: libbpf1)", path)
    try:
        obj_ptr = _open_and_load(lib, path, CgroupLayout(v2=False, root=Path("/")), 0)
    except BpfLoadError as exc:
        return Probe(False, str(exc), path)
    lib.lib.bpf_object__close(obj_ptr)
    return Probe(True, None, path)


def _fail(lib: _Libbpf, step: str, code: int) -> BpfLoadError:
    err = abs(code) or ctypes.get_errno() or 1
    buf = ctypes.create_string_buffer(256)
    lib.lib.libbpf_strerror(err, buf, len(buf))
    return BpfLoadError(step, err, list(lib.log), buf.value.decode(errors="replace") or None)


def _open_and_load(lib: _Libbpf, path: Path, layout: CgroupLayout, target_tgid: int) -> int:
    obj = lib.lib.bpf_object__open_file(str(path).encode(), None)
    if not obj:
        raise _fail(lib, f"opening {path}", ctypes.get_errno())
    try:
        rodata = None
        m = lib.lib.bpf_object__next_map(obj, None)
        while m:
            if (lib.lib.bpf_map__name(m) or b"").endswith(b".rodata"):
                rodata = m
            m = lib.lib.bpf_object__next_map(obj, m)
        if rodata is None or lib.lib.bpf_map__value_size(rodata) != CONFIG.size:
            raise BpfLoadError(f"finding the program's configuration in {path}", 22, [])
        cfg = ctypes.create_string_buffer(CONFIG.pack(int(layout.v2), target_tgid), CONFIG.size)
        rc = lib.lib.bpf_map__set_initial_value(rodata, cfg, CONFIG.size)
        if rc:
            raise _fail(lib, "setting the configuration", rc)
        rc = lib.lib.bpf_object__load(obj)
        if rc:
            raise _fail(lib, "loading the program into the kernel", rc)
    except BaseException:
        lib.lib.bpf_object__close(obj)
        raise
    return int(obj)


@dataclass
class RunQueueSplit:
    """An attached program: :meth:`read` returns every recorded thread's split so far."""

    _lib: _Libbpf
    _obj: int
    layout: CgroupLayout
    target_tgid: int
    _links: list[int] = field(default_factory=list)

    def threads_fd(self) -> int:
        """The descriptor of the per-thread map (``struct rq_thread``), which the token library
        maps read-only when a process inherits it and names it in ``QUELL_RQ_THREADS_FD``."""
        m = self._lib.lib.bpf_object__find_map_by_name(self._obj, b"threads")
        return int(self._lib.lib.bpf_map__fd(m))

    def entries(self) -> list[tuple[bytes, bytes]]:
        """The ``waits`` map's raw key/value pairs."""
        m = self._lib.lib.bpf_object__find_map_by_name(self._obj, b"waits")
        fd = self._lib.lib.bpf_map__fd(m)
        key = ctypes.create_string_buffer(KEY.size)
        nxt = ctypes.create_string_buffer(KEY.size)
        val = ctypes.create_string_buffer(VALUE.size)
        out = []
        prev: ctypes.Array[ctypes.c_char] | None = None
        for _ in range(1 << 20):  # bounded: the map holds at most 65536 entries
            if self._lib.lib.bpf_map_get_next_key(fd, prev, nxt) != 0:
                break
            ctypes.memmove(key, nxt, KEY.size)
            if self._lib.lib.bpf_map_lookup_elem(fd, key, val) == 0:
                out.append((key.raw, val.raw))
            prev = key
        return out

    def read(self, paths: dict[int, str] | None = None) -> list[ThreadSplit]:
        """Every recorded thread's split, cgroup ids named by a walk of the hierarchy (or
        ``paths``)."""
        names = paths if paths is not None else cgroup_paths(self.layout.root)
        return decode(self.entries(), names)


def current_layout(mounts: Path = MOUNTS) -> CgroupLayout:
    layout = cgroup_layout(mounts.read_text())
    if layout is None:
        raise PrerequisiteError("no cgroup hierarchy is mounted (v1 cpu or cgroup2)", NEEDED_FOR)
    return layout


@contextmanager
def attached(
    target_tgid: int = 0,
    obj: Path | None = None,
    layout: CgroupLayout | None = None,
    libbpf: str = LIBBPF,
) -> Iterator[RunQueueSplit]:
    """The program loaded and attached for the block (recording the threads of ``target_tgid``,
    or of every process when 0), detached and unloaded on exit, also on error."""
    path = obj if obj is not None else object_path()
    reason = _prerequisite(path, BTF, os.geteuid())
    if reason is not None:
        raise PrerequisiteError(reason, NEEDED_FOR)
    try:
        lib = _Libbpf(libbpf)
    except OSError as exc:
        raise PrerequisiteError(f"libbpf is not installed ({exc})", NEEDED_FOR) from None
    where = layout if layout is not None else current_layout()
    obj_ptr = _open_and_load(lib, path, where, target_tgid)
    split = RunQueueSplit(lib, obj_ptr, where, target_tgid)
    try:
        prog = lib.lib.bpf_object__next_program(obj_ptr, None)
        while prog:
            link = lib.lib.bpf_program__attach(prog)
            if not link:
                name = (lib.lib.bpf_program__name(prog) or b"?").decode()
                raise _fail(lib, f"attaching {name}", ctypes.get_errno())
            split._links.append(link)
            prog = lib.lib.bpf_object__next_program(obj_ptr, prog)
        yield split
    finally:
        for link in split._links:
            lib.lib.bpf_link__destroy(link)
        lib.lib.bpf_object__close(obj_ptr)

"""The quelltoken library, compiled from the sources under test into a scratch folder once per
session (so the tests never run a stale `make native` build)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from quell.instrument import native
from quell.instrument import token as qt

T = TypeVar("T")


def compile_library(out_dir: Path, name: str = "libquelltoken.so", *sources: str) -> Path:
    """The library (and ``sources`` with it, e.g. the lighttpd shim) built into ``out_dir``."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("the instrumentation tests need gcc (run `make install`)")
    out = out_dir / name
    srcs = [str(native.NATIVE_DIR / s) for s in (*sources, "quelltoken.c")]
    flags = ["-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-pthread", "-shared"]
    done = subprocess.run(
        [cc, *flags, "-o", str(out), *srcs, "-ldl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_library(tmp_path_factory.mktemp("quelltoken"))


@pytest.fixture(scope="session")
def shim_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_library(
        tmp_path_factory.mktemp("shim"), "libquell_lighttpd.so", "quell_lighttpd.c"
    )


@pytest.fixture(scope="session")
def phpfpm_shim_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_library(tmp_path_factory.mktemp("fpm"), "libquell_phpfpm.so", "quell_phpfpm.c")


@pytest.fixture(scope="session")
def lib(lib_path: Path) -> qt.TokenLibrary:
    return qt.TokenLibrary(lib_path)


@pytest.fixture
def default_lib(lib_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[qt.TokenLibrary]:
    """The module-level functions of quell.instrument.token, pointed at the test build."""
    monkeypatch.setenv(native.LIB_ENV, str(lib_path))
    qt.default_library.cache_clear()
    yield qt.default_library()
    qt.default_library.cache_clear()


def in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh thread (its own schedstat file, tokens and log) and return its result."""
    out: list[T] = []
    err: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed back to the test
            err.append(exc)

    th = threading.Thread(target=run)
    th.start()
    th.join(timeout=60)
    assert not th.is_alive(), "the measured thread did not finish in 60 s"
    if err:
        raise err[0]
    return out[0]


def spin_cpu(cpu_seconds: float) -> None:
    """Burn this thread's CPU for ``cpu_seconds`` of its own CPU clock."""
    until = time.thread_time() + cpu_seconds
    while time.thread_time() < until:
        pass


def spin_wall(seconds: float) -> None:
    """Stay runnable (never block) for ``seconds`` of wall time."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


CPU_COUNT = len(os.sched_getaffinity(0))

"""Where ``make native`` puts the instrumentation's shared objects, and finding them.

``c/build/libquelltoken.so``: the library the ctypes binding loads (``QUELL_TOKEN_LIB`` names
another). ``c/build/libquell_lighttpd.so``: the same library with the LD_PRELOAD shim for an
unmodified lighttpd (``QUELL_LIGHTTPD_SHIM`` names another); ``c/build/libquell_phpfpm.so``:
with the shim for php-fpm's workers (``QUELL_PHPFPM_SHIM``)."""

from __future__ import annotations

import os
from pathlib import Path

from quell.errors import PrerequisiteError

NATIVE_DIR = Path(__file__).resolve().parent / "c"
BUILD_DIR = NATIVE_DIR / "build"
LIB_ENV = "QUELL_TOKEN_LIB"
SHIM_ENV = "QUELL_LIGHTTPD_SHIM"
LIBRARY = BUILD_DIR / "libquelltoken.so"
LIGHTTPD_SHIM = BUILD_DIR / "libquell_lighttpd.so"
PHPFPM_SHIM = BUILD_DIR / "libquell_phpfpm.so"
PHPFPM_SHIM_ENV = "QUELL_PHPFPM_SHIM"


def _built(path: Path, what: str, env: str) -> Path:
    if not path.is_file():
        raise PrerequisiteError(
            f"the {what} is not built at {path} (run `make native`, or set {env})",
            "per-request instrumentation",
        )
    return path


def library_path() -> Path:
    """The quelltoken library: ``$QUELL_TOKEN_LIB`` or the ``make native`` build (unchecked)."""
    env = os.environ.get(LIB_ENV)
    return Path(env) if env else LIBRARY


def lighttpd_shim() -> Path:
    """The LD_PRELOAD object for lighttpd; a clear error when it is not built."""
    env = os.environ.get(SHIM_ENV)
    return _built(Path(env) if env else LIGHTTPD_SHIM, "lighttpd preload shim", SHIM_ENV)


def phpfpm_shim() -> Path:
    """The LD_PRELOAD object for php-fpm's workers; a clear error when it is not built."""
    env = os.environ.get(PHPFPM_SHIM_ENV)
    return _built(Path(env) if env else PHPFPM_SHIM, "php-fpm preload shim", PHPFPM_SHIM_ENV)


def require_library(path: Path) -> Path:
    return _built(path, "quelltoken library", LIB_ENV)

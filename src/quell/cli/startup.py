"""A command's start-up: what it imports and loads stays until the process ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loading() -> Iterator[None]:
    """Import and load what the command needs (modules, numba's compiled code) without the
    cyclic garbage collector, then freeze what was made (``gc.freeze``): it lives until the
    process ends. Importing numba and its first call create some 10^5 such objects, and the
    collector, left on, ran full collections over them that freed nothing: 0.1 s of a
    ``quell sim run``. Collections after start-up skip the frozen objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()

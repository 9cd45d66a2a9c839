"""A command's start-up when quell is a process of its own: what the command imports and loads
stays until the process ends, and nothing else runs beside it."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

_owned = False
"""Whether this process runs one quell command and ends with it (``own_process``)."""


def own_process() -> None:
    """Declare this process quell's own: one command, then exit (``quell.cli.entry``). Then
    ``loading`` may freeze what a command loads, and OpenBLAS, unless the user set it, starts no
    worker threads: quell's linear algebra is a few dot products of short vectors, and numpy's
    and scipy's OpenBLAS would each start a thread per core, spinning on the CPU the command
    needs (most on a busy machine). Call before anything loads numpy."""
    global _owned
    _owned = True
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextmanager
def loading() -> Iterator[None]:
    """In a process of quell's own: import and load what the command needs (modules, numba's
    compiled code) without the cyclic garbage collector, then freeze what was made
    (``gc.freeze``), as it lives until the process ends. Importing numba and its first call
    create some 10^5 such objects, and the collector, left on, ran full collections over them
    that freed nothing: 0.1 s of a ``quell sim run``; collections after start-up skip them.
    Inside another program (``main`` called from tests), it changes nothing."""
    if not _owned:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()

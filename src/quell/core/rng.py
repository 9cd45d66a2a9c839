"""Independent, named random streams derived from one scenario seed. No global random state."""

from __future__ import annotations

import zlib

import numpy as np


def component_rng(seed: int, name: str) -> np.random.Generator:
    """A generator for one component (e.g. ``"arrivals"``, ``"sim/instance/i3"``).

    Streams for different names are independent; the same (seed, name) always gives the same stream.
    """
    key = zlib.crc32(name.encode())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(key,))))

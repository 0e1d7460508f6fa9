"""One place that turns (seed, epoch, purpose, ...) into a random generator.

Every random choice in the library goes through here, keyed on plain integers and a
purpose tag, so the same seed gives the same order on any machine and no two purposes
(chunk order, within-block draws, manifest splits) share a stream by accident.
"""

from __future__ import annotations

import zlib

import numpy as np


def _tag(purpose: str) -> int:
    return zlib.crc32(purpose.encode())


def rng_for(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A generator determined only by `seed`, the `purpose` string and integer `keys`."""
    if seed < 0 or any(k < 0 for k in keys):
        raise ValueError(f"seeds and keys must be non-negative integers, got {seed}, {keys}")
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([seed, _tag(purpose), *keys]))
    )

"""Spatial patches: a fixed-size crop of the grid per sample, random for training, tiled for
evaluation, or one fixed region for every sample.

Random crops are a pure function of (seed, epoch, anchor): a counter-based hash
(splitmix64) of those integers, vectorised over a block's anchors. They do not depend on
the rank, the block or the batch a sample lands in, so a resumed run crops exactly as the
uninterrupted one, and the read plan knows every crop before any byte is read, which is
what lets it fetch only the grid chunks the crops touch.

Tiles cover the grid with full-size crops (the last tile of an axis is moved back to end
at the edge, so it overlaps its neighbour rather than being short); each anchor then
yields one sample per tile.

A region is the same crop for every sample: what an xarray Dataset's spatial slice
(`ds.isel(lat=slice(100, 300))`) selects. Being a crop, it reuses the read plan's "only
the chunks a crop touches" and the gather's cropping, so a region of a large grid is read
as its chunks, never as the whole grid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.settings import as_int_tuple

RANDOM = "random"
TILES = "tiles"
REGION = "region"
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class PatchSpec:
    """Crop the last `len(size)` axes of every variable to `size`.

    Args:
        size: the patch's length along each cropped axis (ints >= 1; numpy integers are
            taken as Python ints).
        mode: "random" (a crop per sample, for training), "tiles" (every tile, for
            evaluation) or "region" (the crop at `origin` for every sample).
        origin: for "region" only, where the crop starts on each cropped axis (ints >= 0).
    """

    size: tuple[int, ...]
    mode: str = RANDOM
    origin: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        size = as_int_tuple("patch size", self.size)
        if not size or any(s < 1 for s in size):
            raise ValueError(f"patch size must be positive lengths, got {size}")
        object.__setattr__(self, "size", size)
        if self.mode not in (RANDOM, TILES, REGION):
            raise ValueError(
                f"patch mode must be {RANDOM!r}, {TILES!r} or {REGION!r}, got {self.mode!r}"
            )
        if self.mode != REGION:
            if self.origin is not None:
                raise ValueError(f"origin= is for mode={REGION!r} only, not {self.mode!r}")
            return
        if self.origin is None:
            raise ValueError(f"mode={REGION!r} needs origin=: where the region starts")
        origin = as_int_tuple("patch origin", self.origin)
        if len(origin) != len(size) or any(o < 0 for o in origin):
            raise ValueError(
                f"patch origin {origin} must give one start >= 0 per cropped axis {size}"
            )
        object.__setattr__(self, "origin", origin)

    def check_grid(self, grid: tuple[int, ...]) -> None:
        if len(grid) != len(self.size) or any(s > g for s, g in zip(self.size, grid, strict=True)):
            raise ValueError(
                f"patch size {self.size} does not fit the grid {grid} (the last "
                f"{len(self.size)} axes of each variable); use a smaller patch"
            )
        if self.origin is not None and any(
            o + s > g for o, s, g in zip(self.origin, self.size, grid, strict=True)
        ):
            raise ValueError(
                f"the region of size {self.size} at {self.origin} reaches past the grid "
                f"{grid}: move it or make it smaller"
            )

    def tile_origins(self, grid: tuple[int, ...]) -> np.ndarray:
        """(tiles, axes) origins covering the grid, C order."""
        self.check_grid(grid)
        per_axis = []
        for g, s in zip(grid, self.size, strict=True):
            starts = list(range(0, g - s + 1, s))
            if starts[-1] + s < g:
                starts.append(g - s)
            per_axis.append(starts)
        return np.array(list(itertools.product(*per_axis)), dtype=np.int64).reshape(-1, len(grid))

    def samples_per_anchor(self, grid: tuple[int, ...]) -> int:
        return len(self.tile_origins(grid)) if self.mode == TILES else 1

    def origins(
        self, grid: tuple[int, ...], seed: int, epoch: int, anchors: np.ndarray, tiles: np.ndarray
    ) -> np.ndarray:
        """(n, axes) crop origins of samples (anchor, tile number)."""
        if self.mode == TILES:
            return self.tile_origins(grid)[tiles]
        self.check_grid(grid)
        if self.origin is not None:
            return np.tile(np.array(self.origin, dtype=np.int64), (len(anchors), 1))
        room = np.array([g - s + 1 for g, s in zip(grid, self.size, strict=True)], dtype=np.uint64)
        draws = np.stack(
            [_hash(seed, epoch, anchors, axis) for axis in range(len(grid))], axis=1
        ).reshape(-1, len(grid))
        return (draws % room[None, :]).astype(np.int64)

    def to_json(self) -> dict[str, Any]:
        if self.origin is not None:
            return {"size": list(self.size), "mode": self.mode, "origin": list(self.origin)}
        return {"size": list(self.size), "mode": self.mode}


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def _hash(seed: int, epoch: int, anchors: np.ndarray, axis: int) -> np.ndarray:
    """A 64-bit hash of (seed, epoch, anchor, axis) per anchor, vectorised."""
    key = _splitmix64(np.array([seed, epoch, axis], dtype=np.uint64))
    with np.errstate(over="ignore"):
        mixed = _splitmix64(np.uint64(key[0]) ^ _splitmix64(np.asarray(anchors, dtype=np.uint64)))
        mixed = _splitmix64(mixed ^ key[1])
        return _splitmix64(mixed ^ key[2])


def touched_chunks(
    origins: np.ndarray,
    size: tuple[int, ...],
    chunks: tuple[int, ...],
    grid: tuple[int, ...],
    positions: Sequence[np.ndarray | None] = (),
    stored_grid: tuple[int, ...] | None = None,
) -> np.ndarray:
    """(n, m) flat C-order indices into the stored grid's chunk grid of the chunks each
    crop touches; -1 pads rows that touch fewer than m chunks.

    Args:
        origins: (n, axes) each crop's origin on `grid`.
        size: the crop's length along each axis.
        chunks: the stored chunk length along each axis.
        grid: the grid crops are cut from (an area's, when `positions` map it).
        positions: per axis, the stored position of each of `grid`'s positions (an area's
            rows or columns, `core.area`), or None where the grid is the stored axis;
            empty for none.
        stored_grid: the stored axes' lengths, which number the chunks (default `grid`:
            needed where `positions` map an axis).
    """
    stored_grid = grid if stored_grid is None else stored_grid
    per_axis = []
    counts = []
    for axis, (s, c, g) in enumerate(zip(size, chunks, stored_grid, strict=True)):
        counts.append(math.ceil(g / c))
        stored = positions[axis] if axis < len(positions) else None
        if stored is None:
            first = origins[:, axis] // c
            last = (origins[:, axis] + s - 1) // c
            along = first[:, None] + np.arange(math.ceil(s / c) + 1)[None, :]  # (n, m)
            per_axis.append(np.where(along <= last[:, None], along, -1))
        else:
            per_axis.append(_mapped_chunks(origins[:, axis], s, np.asarray(stored) // c))
    flat = np.zeros((origins.shape[0], 1), dtype=np.int64)
    valid = np.ones((origins.shape[0], 1), dtype=bool)
    for along, n in zip(per_axis, counts, strict=True):
        ok = along >= 0
        flat = (flat[:, :, None] * n + np.maximum(along, 0)[:, None, :]).reshape(len(flat), -1)
        valid = (valid[:, :, None] & ok[:, None, :]).reshape(len(valid), -1)
    return np.where(valid, flat, -1)


def _mapped_chunks(origins: np.ndarray, size: int, chunk_of: np.ndarray) -> np.ndarray:
    """(n, m) the stored chunks a crop of `size` at each origin touches along one axis
    whose grid positions lie in stored chunks `chunk_of` (runs of equal chunks, one entry
    per run, -1 padded): vectorised over the crops."""
    ids = chunk_of[origins[:, None] + np.arange(size)[None, :]]  # (n, size)
    starts = np.ones(ids.shape, dtype=bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    slot = np.cumsum(starts, axis=1) - 1
    out = np.full((ids.shape[0], int(slot[:, -1].max(initial=0)) + 1), -1, dtype=np.int64)
    rows, _ = np.nonzero(starts)
    out[rows, slot[starts]] = ids[starts]
    return out

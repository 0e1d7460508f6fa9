"""Static fields: variables without a time dimension (a land-sea mask, the surface
geopotential), read once and given to every sample.

A weather model takes them beside the time-varying fields at every step (GraphCast feeds
them as input channels each step). They are not sampled: a loader reads each whole
static once, decodes it as `xr.open_zarr` shows it, keeps it in memory (counted in the
budget) and puts it in every batch as `(batch, *grid)`, a broadcast of the one array
wherever nothing forces a copy. This module holds the rules, stated once:

- where a static appears: under its own name without a spec; with a spec, under
  `group/name` in each group that names it (a group carries its statics beside its
  time-varying variables, and must hold at least one of those);
- its shape: unstacked, `(batch, *grid)` with no steps axis whatever the group's window
  (the field is the same at every step); stacked, it is one more channel of its group,
  after the group's variables and levels, repeated along the group's steps axis (so the
  stacked tensor is what GraphCast is fed: the static at every step);
- what it costs: the decoded array, once; and where batches hold real copies (stacked,
  or cropped at each sample's patch), those copies per sample. A crop that is the same
  for every sample (`mode="region"`, the Dataset route's region) is cut once instead
  (`region_cut`): a view of the one array, broadcast like the whole of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.patches import REGION, PatchSpec
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan
from insitubatch_nodes.core.sample_spec import SampleSpec, VariableGroup, batch_key


@dataclass(frozen=True)
class StaticPlacement:
    """Where one static field appears in a batch.

    Args:
        key: the batch key it is put under (`name`, or `group/name` with a spec).
        name: the static variable.
        steps: the steps axis of its group when stacked (a window's length), or None for
            a batch without one (spec-less).
        group: the stacked tensor it joins with `stack=True` (a spec's group, or the
            spec-less `fields`), or None when it is named by no group of a spec (it then
            stays a key of its own).
    """

    key: str
    name: str
    steps: int | None
    group: str | None


def fields_spec(spec: SampleSpec | None, statics: Sequence[str]) -> SampleSpec | None:
    """`spec` without its static variables: the spec the time-varying read path samples.
    A group naming only statics is refused (its steps would sample nothing).

    Args:
        spec: the user's sample spec, or None.
        statics: the selected static variables.
    """
    if spec is None or not statics:
        return spec
    groups = {}
    for name, group in spec.groups.items():
        kept = tuple(v for v in group.variables if v not in statics)
        if not kept:
            raise ValueError(
                f"sample spec group {name!r} names only static fields {list(group.variables)}: "
                f"a group is sampled along time, so it needs a time-varying variable; put "
                f"the static fields in a group beside time-varying ones (they then appear "
                f"in it at every step)"
            )
        groups[name] = VariableGroup(kept, group.offsets)
    return SampleSpec(groups)


def static_placements(
    spec: SampleSpec | None, statics: Sequence[str], stack_key: str
) -> list[StaticPlacement]:
    """Where each static appears (see the module), in order: a group's statics in the
    order the group names them.

    Args:
        spec: the user's sample spec (with its statics), or None.
        statics: the selected static variables, in the order selected.
        stack_key: the batch key of the spec-less stacked tensor.
    """
    if spec is None:
        return [StaticPlacement(name, name, None, stack_key) for name in statics]
    found = []
    named = set()
    for group_name, group in spec.groups.items():
        for variable in group.variables:
            if variable in statics:
                key = batch_key(group_name, variable)
                found.append(StaticPlacement(key, variable, group.steps, group_name))
                named.add(variable)
    found += [StaticPlacement(n, n, None, None) for n in statics if n not in named]
    return found


def static_nbytes(shapes_and_dtypes: Mapping[str, tuple[tuple[int, ...], str]]) -> int:
    """Bytes the decoded statics hold, once.

    Args:
        shapes_and_dtypes: static name -> (its shape, the dtype it is kept in).
    """
    return sum(
        math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes_and_dtypes.values()
    )


def static_copy_nbytes(
    placements: Sequence[StaticPlacement],
    shapes_and_dtypes: Mapping[str, tuple[tuple[int, ...], str]],
    *,
    stacked: bool,
    patch_size: tuple[int, ...] | None,
) -> int:
    """Bytes one sample's statics take as real copies in a host batch: stacked channels
    (repeated over the group's steps), or crops at each sample's patch; 0 where batches
    hold a broadcast view of the one array.

    Args:
        placements: where each static appears (`static_placements`).
        shapes_and_dtypes: static name -> (its shape, the dtype it is kept in).
        stacked: whether the batch stacks channels on the host.
        patch_size: the patch size when samples are cropped, else None.
    """
    total = 0
    for placement in placements:
        shape, dtype = shapes_and_dtypes[placement.name]
        joins_stack = stacked and placement.group is not None
        if not joins_stack and patch_size is None:
            continue
        cells = math.prod(shape)
        if patch_size is not None:
            kept = shape[: len(shape) - len(patch_size)]
            cells = math.prod(kept) * math.prod(patch_size)
        steps = placement.steps if joins_stack and placement.steps is not None else 1
        total += steps * cells * np.dtype(dtype).itemsize
    return total


def sample_layout(layout: VariableLayout) -> VariableLayout:
    """A static's layout as one sample of it: a sample axis of one step before its grid,
    what the channel checks (`core.channels`) compare with the fields' samples.

    Args:
        layout: the static array's layout (its axes are all grid).
    """
    return VariableLayout((1, *layout.shape), (1, *layout.chunks), layout.dtype)


def whole_array_plan(layouts: Mapping[str, VariableLayout]) -> ReadPlan:
    """A read plan of every chunk of each of `layouts`, laid out as the arrays are: what
    reads a static whole through the loader's own readers (verified, decoded into one
    buffer per array), once. Its axis 0 is the array's first grid axis, not time: the
    plan only places chunks, and a block buffer of all of axis 0 is the array.

    Args:
        layouts: the static arrays' layouts, by name.
    """
    none = np.zeros(0, dtype=np.int64)
    assignment = EpochAssignment(
        seed=0,
        epoch=0,
        rank=0,
        world_size=1,
        units=none,
        rank_samples=0,
        min_rank_samples=0,
        max_rank_samples=0,
        evaluation=True,
    )
    reads = {}
    for name, layout in layouts.items():
        ranges = [range(math.ceil(s / c)) for s, c in zip(layout.shape, layout.chunks, strict=True)]
        grid = np.stack(np.meshgrid(*map(np.array, ranges), indexing="ij"), -1)
        reads[name] = tuple(
            ChunkRead(tuple(int(i) for i in coords), int(coords[0]) * layout.chunks[0])
            for coords in grid.reshape(-1, len(ranges))
        )
    return ReadPlan(
        assignment=assignment,
        block_index=0,
        units=none,
        sample_index=none,
        reads=reads,
        rows={},
        offsets={name: (0,) for name in layouts},
        buffer_rows={name: layout.shape[0] for name, layout in layouts.items()},
        segment_starts={
            name: np.arange(0, layout.shape[0], layout.chunks[0], dtype=np.int64)
            for name, layout in layouts.items()
        },
    )


def crop_positions(
    origins: Any, size: tuple[int, ...], arange: Callable[[int], Any] = np.arange
) -> list[Any]:
    """Per cropped axis, the positions each sample's crop keeps, shaped to broadcast to
    `(samples, *size)`: `static[(..., *crop_positions(origins, size))]` is every sample's
    crop in one advanced index, `(*uncropped axes, samples, *size)`. Written once for numpy
    and torch (`arange` makes the positions where `origins` live).

    Args:
        origins: `(samples, len(size))` integer crop origins (a batch's `patch_origin`).
        size: the crop's length along each cropped axis (the grid's last ones).
        arange: `np.arange`, or torch's on the origins' device.
    """
    index = []
    for axis, length in enumerate(size):
        shape = [-1] + [1] * len(size)
        shape[1 + axis] = length
        index.append((origins[:, axis, None] + arange(length)[None, :]).reshape(shape))
    return index


def sample_crop_size(patches: PatchSpec | None) -> tuple[int, ...] | None:
    """The crop a static takes at each sample's own patch origin, or None where there is
    none to take per sample: no patches, or one region for every sample (cut once,
    `region_cut`).

    Args:
        patches: the loader's patches, or None.
    """
    if patches is None or patches.mode == REGION:
        return None
    return patches.size


def region_shape(shape: tuple[int, ...], patches: PatchSpec | None) -> tuple[int, ...]:
    """A static's shape in batches after `region_cut`.

    Args:
        shape: the static's stored shape (its grid last).
        patches: the loader's patches, or None.
    """
    if patches is None or patches.mode != REGION:
        return shape
    return (*shape[: len(shape) - len(patches.size)], *patches.size)


def region_cut(values: np.ndarray, patches: PatchSpec | None) -> np.ndarray:
    """`values` (a static, its grid last) cut to `patches`' region when every sample has
    that one crop: a view, so nothing is copied; `values` itself otherwise.

    Args:
        values: the static's values.
        patches: the loader's patches, or None.
    """
    if patches is None or patches.mode != REGION:
        return values
    assert patches.origin is not None  # a region has one (`PatchSpec`)
    cut = tuple(slice(o, o + s) for o, s in zip(patches.origin, patches.size, strict=True))
    return values[(Ellipsis, *cut)]

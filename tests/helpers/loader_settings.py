"""Loader settings drawn valid for the split they load, for property tests of loaders.

A split too small for the settings is refused (more ranks than units; `drop_last` with a
batch the smallest rank's share cannot fill). A property test that drew such settings
and caught the refusal would test nothing with them, so these strategies draw only the
settings the split can serve, and the refusals are tested on their own
(tests/nodes/test_small_splits.py, tests/end_to_end/test_bad_input.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from insitubatch_nodes.builder.split_anchors import split_anchors
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.rank_shares import rank_shares
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.io.zarr_source import ZarrSource


def dealt_anchors(
    url: str, spec: SampleSpec | None = None, unit_length: int | None = None
) -> AnchorSet:
    """The anchors of split "all" that `build_loader(url, spec=spec)` deals, and
    `build_stage` with a spec naming every variable (or none): known before a graph is
    built, so that a strategy can draw settings they fit.

    Args:
        url: the store.
        spec: the sample spec, or None for one step per sample.
        unit_length: steps per unit (a fine grid, as `build_stage(unit_length=)` takes), or
            None for the store's grid.
    """
    opened = ZarrSource.open(url, None if spec is None else spec.variables())
    grid = None if unit_length is None else SampleGeometry(opened.geometry.variables, unit_length)
    return split_anchors(opened, "all", spec, geometry=grid)


def world_sizes(anchors: AnchorSet, most: int = 3) -> st.SearchStrategy[int]:
    """Numbers of ranks, up to `most`, that the split of `anchors` can serve: every rank
    needs one of its units.

    Args:
        anchors: the split's anchors (`dealt_anchors`).
        most: the largest number of ranks to draw.
    """
    return st.integers(1, min(most, int(anchors.units.size)))


def batch_sizes(
    anchors: AnchorSet, ranks: Iterable[int], drop_last: bool, most: int = 12
) -> st.SearchStrategy[int]:
    """Batch sizes up to `most`; with `drop_last`, only those that the smallest rank's
    share fills once under each number of `ranks` (a run resumed on another number of
    ranks must suit both).

    Args:
        anchors: the split's anchors (`dealt_anchors`).
        ranks: the numbers of ranks the batch size must suit (each from `world_sizes`).
        drop_last: whether only full batches are yielded.
        most: the largest batch size to draw.
    """
    if drop_last:
        for world_size in ranks:
            shares = rank_shares(
                anchors,
                anchors.units,
                rank=0,
                world_size=world_size,
                partitions=None,
                evaluation=False,
            )
            most = min(most, shares.min_rank_samples)
    return st.integers(1, most)


def draw_rank_and_batch(
    data: st.DataObject, anchors: AnchorSet, drop_last: bool
) -> tuple[int, int, int]:
    """A number of ranks, one rank of them and a batch size the split of `anchors` serves,
    drawn in that order (each bound depends on the one before).

    Args:
        data: the test's `st.data()` object.
        anchors: the split's anchors (`dealt_anchors`).
        drop_last: whether only full batches are yielded.
    """
    world_size = data.draw(world_sizes(anchors), label="world_size")
    rank = data.draw(st.integers(0, world_size - 1), label="rank")
    batch_size = data.draw(batch_sizes(anchors, [world_size], drop_last), label="batch_size")
    return world_size, rank, batch_size

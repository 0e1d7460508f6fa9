"""The order in which a rank's samples leave the shuffle window, as a pure function.

The rank's units are grouped into blocks of `block_chunks` consecutive units (in epoch
order); the samples of each block are drawn in a permutation keyed on (seed, epoch, rank,
block). Blocks follow one another, so a batch may take the tail of one block and the head
of the next. When a rank must pad to the common per-rank count it keeps drawing from its
last block, cyclically, in that block's order: no extra reads, bounded memory. An
evaluation share (`EpochAssignment.evaluation`) is drawn in order and never padded.

`rank_epoch_order` spells the whole epoch out at once; the shuffle node reproduces it
incrementally, and the tests hold one against the other.
"""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.seeding import rng_for

BLOCK_ORDER = "block"  # the name a state records this order by (`build_loader(shuffle=)`)
BLOCK_ORDER_VERSION = 1


def block_units(units: np.ndarray, block_chunks: int) -> list[np.ndarray]:
    """Consecutive groups of `block_chunks` units (the last group may be shorter)."""
    return [units[i : i + block_chunks] for i in range(0, len(units), block_chunks)]


def block_draw(seed: int, epoch: int, rank: int, block_index: int, size: int) -> np.ndarray:
    """Local positions of a block's samples in the order they are drawn."""
    return rng_for(seed, "block-draw", epoch, rank, block_index).permutation(size)


def block_order(assignment: EpochAssignment, block_index: int, size: int) -> np.ndarray:
    """Local positions of a block's samples in the order they leave the window: the block's
    seeded permutation in training, its own order in evaluation (a fixed order, so that
    evaluation batches are the same every epoch and on every run).

    Args:
        assignment: the rank's assignment for the epoch.
        block_index: the block's index in the rank's epoch.
        size: the samples the block holds.
    """
    if assignment.evaluation:
        return np.arange(size)
    return block_draw(assignment.seed, assignment.epoch, assignment.rank, block_index, size)


def padding_positions(block_size: int, count: int, draw: np.ndarray) -> np.ndarray:
    """Local positions repeated from the last block to pad a rank: its draw, cycled."""
    return draw[np.arange(count) % block_size]


def rank_epoch_order(
    geometry: UnitSamples,
    assignment: EpochAssignment,
    *,
    block_chunks: int,
    batch_size: int,
    drop_last: bool,
) -> np.ndarray:
    """Global sample indices one rank yields in one epoch, in order (batches are slices)."""
    target = assignment.samples_per_rank(batch_size, drop_last)
    pieces = []
    last_samples = last_draw = None
    for j, units in enumerate(block_units(assignment.units, block_chunks)):
        samples = geometry.unit_samples(units)
        draw = block_order(assignment, j, samples.size)
        pieces.append(samples[draw])
        last_samples, last_draw = samples, draw
    order = np.concatenate(pieces)
    if order.size < target:
        assert last_samples is not None and last_draw is not None
        pad = padding_positions(last_samples.size, target - order.size, last_draw)
        order = np.concatenate([order, last_samples[pad]])
    return order[:target]

"""How mixed this epoch's batches are, against a uniform global shuffle of the split.

The tally (`core.quality.MixingTally`) counts each batch's sample ids and the units they
lie in; here is what feeds it: the draw each batch was gathered from (read off its blocks'
plans, one search per block), and the figures a uniform shuffle of the split gives, made
once, when figures are first asked for (they need the whole split's anchors). It is kept
apart from the gather, which only hands it each draw, so that gathering stays one
concept; the `Loader` reads the figures through its link to the gather
(`nodes.links.MixingReport`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from insitubatch_nodes.core.quality import MixingTally, UniformMixing
from insitubatch_nodes.nodes.items import BatchDraw


class BatchMixing:
    """This epoch's batches, tallied for mixing (see the module).

    Args:
        uniform_mixing: what a uniform global shuffle of the split gives (called once,
            when figures are first asked for).
    """

    def __init__(self, uniform_mixing: Callable[[], UniformMixing]) -> None:
        self._uniform_mixing = functools.cache(uniform_mixing)
        self.tally = MixingTally()

    def restart(self) -> None:
        """Begin a new epoch's tally."""
        self.tally = MixingTally()

    def count(self, draw: BatchDraw) -> None:
        """Tally one batch (O(batch) numpy work, and one search per block).

        Args:
            draw: the batch's rows, by block.
        """
        self.tally.add(*draw_samples_and_units(draw))

    def count_samples(self, samples: np.ndarray, units: np.ndarray) -> None:
        """Tally one batch whose sample ids and units are known already: what the host
        gather reads off its index tables with the batch's rows, instead of a search per
        block the batch draws from (tens of them in a pool batch).

        Args:
            samples: the batch's sample ids, in batch order.
            units: the unit each lies in (`draw_samples_and_units`'s second array).
        """
        self.tally.add(samples, units)

    def figures(self) -> dict[str, float]:
        """This epoch's mixing so far against a uniform global shuffle's
        (`MixingTally.figures`: distinct units per batch, time distance, gap score)."""
        return self.tally.figures(self._uniform_mixing())


def draw_samples_and_units(draw: BatchDraw) -> tuple[np.ndarray, np.ndarray]:
    """The draw's sample ids in batch order, and the unit each lies in: one search per
    block, vectorised.

    Args:
        draw: the batch's rows, by block.
    """
    samples, units = [], []
    for block, rows in draw.parts:
        plan = block.plan
        samples.append(plan.sample_index[rows])
        if plan.unit_starts is None:
            units.append(np.full(rows.size, plan.block_index, dtype=np.int64))
        else:
            at = np.searchsorted(plan.unit_starts, rows, side="right") - 1
            units.append(plan.units[at])
    if draw.order is None:
        return np.concatenate(samples), np.concatenate(units)
    return np.concatenate(samples)[draw.order], np.concatenate(units)[draw.order]

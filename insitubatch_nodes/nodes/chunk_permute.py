"""ChunkPermuteNode: this rank's units of the split, in the order of the current epoch."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import (
    EpochAssignment,
    assign_epoch,
    check_rank,
    rank_sample_counts,
    samples_per_rank,
)
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    FINGERPRINT_KEY,
    check_cursor,
    check_fingerprint,
    check_node_state,
    check_saved_config,
    named_state,
)


class ChunkPermuteNode(BaseNode[UnitTicket]):
    """Yields one `UnitTicket` per unit; the order is a pure function of (seed, epoch, rank).

    `geometry` says how many samples each unit holds: a `SampleGeometry` (every time step)
    or a `core.anchors.AnchorSet` (the anchors of a windowed sample spec, with
    `split_units=anchors.units`).

    `reset(None)` after iteration began moves to the next epoch, so a `Loader` sees a fresh
    order every `iter()`. State is (epoch, position) plus the settings it is only valid for,
    and, given `fingerprint`, the data it was counted on.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units (with a sample spec, `AnchorSet.units`).
        seed: the seed of every random order (an int >= 0).
        rank: this process's rank, in [0, world_size).
        world_size: how many ranks share the split.
        initial_epoch: the epoch the first iteration is.
        fingerprint: what the graph reads (`ZarrSource.fingerprint(split)`), recorded in
            the state, so that a graph over other data (another store, variables, split or
            snapshot, or the store edited since) refuses the state instead of resuming it
            into other batches; None records and checks nothing.
    """

    EPOCH_KEY = "epoch"
    POSITION_KEY = "position"

    def __init__(
        self,
        geometry: UnitSamples,
        split_units: np.ndarray,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        initial_epoch: int = 0,
        fingerprint: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        seed = as_int("seed", seed, minimum=0)
        rank = as_int("rank", rank)
        world_size = as_int("world_size", world_size)
        initial_epoch = as_int("initial_epoch", initial_epoch, minimum=0)
        check_rank(rank, world_size)
        self.geometry = geometry
        self.split_units = np.sort(np.asarray(split_units, dtype=np.int64))
        if self.split_units.size == 0:
            raise ValueError("the split has no units: nothing to load")
        empty = self.split_units[geometry.unit_sizes(self.split_units) == 0]
        if empty.size:
            raise ValueError(
                f"units {empty[:5].tolist()} hold no sample (no anchor whose window stays in "
                f"the split): pass AnchorSet.units as split_units"
            )
        self.num_samples = int(geometry.unit_sizes(self.split_units).sum())
        counts = rank_sample_counts(geometry, self.split_units, world_size)
        self.min_rank_samples = int(counts.min())
        self.max_rank_samples = int(counts.max())
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.fingerprint = None if fingerprint is None else copy.deepcopy(dict(fingerprint))
        self._epoch = initial_epoch
        self._position = 0
        self._started = False
        self._assignment: EpochAssignment | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is None:
            if self._started:
                self._epoch += 1
            self._position = 0
            self._started = False
            self._assignment = self._assign(self._epoch)
            return
        state = check_node_state(self, initial_state, (self.EPOCH_KEY, self.POSITION_KEY))
        check_fingerprint(state, self.fingerprint)
        check_saved_config(self, state, self._config())
        epoch = check_cursor(self, state, self.EPOCH_KEY, 0)
        assignment = self._assign(epoch)
        self._position = check_cursor(self, state, self.POSITION_KEY, 0, assignment.units.size)
        self._epoch, self._assignment = epoch, assignment
        self._started = True  # a restored run is under way, even at position 0

    def _assign(self, epoch: int) -> EpochAssignment:
        return assign_epoch(
            self.geometry,
            self.split_units,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world_size=self.world_size,
        )

    @property
    def assignment(self) -> EpochAssignment:
        """This epoch's assignment (resets the node first if it never was)."""
        if self._assignment is None:
            self.reset(None)
        assert self._assignment is not None
        return self._assignment

    def check_full_batch(self, batch_size: int, drop_last: bool, split: str) -> None:
        """Refuse, before anything is read, a `batch_size` and `drop_last` under which the
        smallest rank's share of the split fills no batch: this node knows every rank's
        share now, `ShuffleBlockNode` (whose settings they are) only once its first block
        is read.

        Args:
            batch_size: samples per batch (an int >= 1).
            drop_last: whether only full batches are yielded (True or False).
            split: the split's name, for the message.
        """
        batch_size = as_int("batch_size", batch_size, minimum=1)
        drop_last = as_bool("drop_last", drop_last)
        if samples_per_rank(self.min_rank_samples, self.max_rank_samples, batch_size, drop_last):
            return
        raise ValueError(
            f"batch_size={batch_size} with drop_last=True leaves no full batch: the smallest "
            f"rank holds {self.min_rank_samples} samples of split {split!r}; lower "
            f"batch_size or set drop_last=False"
        )

    def next(self) -> UnitTicket:
        assignment = self.assignment
        if self._position >= assignment.units.size:
            raise StopIteration
        self._started = True
        ticket = UnitTicket(assignment, self._position, int(assignment.units[self._position]))
        self._position += 1
        return ticket

    def _config(self) -> dict[str, int]:
        return {
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "units": int(self.split_units.size),
            "samples": self.num_samples,
        }

    def get_state(self) -> dict[str, Any]:
        entries: dict[str, Any] = {
            self.EPOCH_KEY: self._epoch,
            self.POSITION_KEY: self._position,
            CONFIG_KEY: self._config(),
        }
        if self.fingerprint is not None:
            entries[FINGERPRINT_KEY] = copy.deepcopy(self.fingerprint)
        return named_state(self, entries)

"""ChunkPermuteNode: this rank's units of the split, in the order of the current epoch."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.canonical_partitions import default_partition_count
from insitubatch_nodes.core.elastic import (
    RestShare,
    full_permutation,
    share_samples,
    share_units,
)
from insitubatch_nodes.core.evaluation_shares import assign_evaluation
from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment, assign_epoch, check_rank
from insitubatch_nodes.core.rank_shares import RankShares, check_full_batch, rank_shares
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.core.short_unit_deal import DEAL_VERSION, deals_like_version_1
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.chunk_permute_state import (
    POSITION_KEY,
    SavedRest,
    permute_config,
    restore_state,
    saved_state,
)
from insitubatch_nodes.nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import check_cursor
from insitubatch_nodes.nodes.state_views import snapshot


class ChunkPermuteNode(BaseNode[UnitTicket]):
    """Yields one `UnitTicket` per unit; the order is a pure function of (seed, epoch, rank).

    `geometry` says how many samples each unit holds: a `SampleGeometry` (every time step)
    or a `core.anchors.AnchorSet` (the anchors of a windowed sample spec, with
    `split_units=anchors.units`).

    `reset(None)` after iteration began moves to the next epoch, so a `Loader` sees a fresh
    order every `iter()`. State is (epoch, position) plus the settings it is only valid for,
    and, given `fingerprint`, the data it was counted on (`nodes.chunk_permute_state`).
    A training node deals short units by `core.short_unit_deal.DEAL_VERSION` until it takes up a
    state made under another version, and by that one from then on (`deal`), so a run
    resumed from an older state yields the batches it would have.

    With `evaluation=True` the rank's share is a fixed contiguous run of the split's units
    in increasing order (`core.evaluation_shares.assign_evaluation`), the same every epoch: with
    `ShuffleBlockNode` after it, every sample of the split is yielded once across the ranks,
    in order, without padding.

    After `begin_rest` (what a `Loader` given the states of another number of ranks calls,
    `loader.elastic_resume`) the next epoch is this rank's share of the rest of an epoch cut on
    other ranks: its units, each with the samples it gave before (`EpochAssignment.starts`);
    the state records the share under `rest` while that epoch lasts.

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
        evaluation: a fixed order with each sample once across the ranks (validation and
            test), instead of a shuffled epoch with ranks padded to equal counts.
        follow_process_group: `rank` and `world_size` were not chosen but found before any
            process group existed: if `torch.distributed` is initialised by the time the
            node is first reset (or asked for its epoch's size), its rank and world size
            are taken instead. A framework that starts the process group after the loader
            was built (Lightning's DDP, given the loader in `Trainer.fit`) is followed so.
        unit_grid: the unit grid the units are on, as plain ints (`build_loader` records
            `{"unit_steps", "revisits"}`), kept in the state's config so that a state made
            on another grid is refused by name; None records nothing.
        canonical_partitions: C, the canonical partitions a training epoch's units are
            dealt to before ranks take them (`core.canonical_partitions`), in [world_size, the
            split's units]; None takes `default_partition_count`. Recorded in the state.
    """

    STATE_NAME = state_names.CHUNK_PERMUTE

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
        evaluation: bool = False,
        follow_process_group: bool = False,
        unit_grid: Mapping[str, int] | None = None,
        canonical_partitions: int | None = None,
    ) -> None:
        super().__init__()
        seed = as_int("seed", seed, minimum=0)
        rank = as_int("rank", rank)
        world_size = as_int("world_size", world_size)
        initial_epoch = as_int("initial_epoch", initial_epoch, minimum=0)
        self.evaluation = as_bool("evaluation", evaluation)
        self._following = as_bool("follow_process_group", follow_process_group)
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
        if canonical_partitions is None:
            self.partitions = default_partition_count(int(self.split_units.size))
        else:
            self.partitions = as_int("canonical_partitions", canonical_partitions, minimum=1)
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.deal = DEAL_VERSION
        self._count_shares()
        self.fingerprint = None if fingerprint is None else copy.deepcopy(dict(fingerprint))
        self.unit_grid = None if unit_grid is None else {k: int(v) for k, v in unit_grid.items()}
        self._epoch = initial_epoch
        self._position = 0
        self._started = False
        self._assignment: EpochAssignment | None = None
        self._full_batch_check: tuple[int, bool, str] | None = None
        self._next_epoch: int | None = None
        self._rest: SavedRest | None = None  # the epoch re-dealt from other ranks' states
        self._next_rest: SavedRest | None = None

    def _count_shares(self) -> None:
        """Every rank's share of the split (the same every epoch): this rank's, the
        smallest and the largest; and whether the state must say which deal made them."""
        self._shares = rank_shares(
            self.geometry,
            self.split_units,
            rank=self.rank,
            world_size=self.world_size,
            partitions=self.partitions,
            evaluation=self.evaluation,
            deal=self.deal,
        )
        self.rank_samples = self._shares.rank_samples
        self.min_rank_samples = self._shares.min_rank_samples
        self.max_rank_samples = self._shares.max_rank_samples
        self._deal_recorded = not self.evaluation and not deals_like_version_1(
            self.geometry, self.split_units, self.world_size, self.partitions, self.deal
        )

    def _follow_process_group(self) -> None:
        """Take torch.distributed's rank and world size if the node follows the process
        group and one now exists (see the class); after the first reset the node's rank is
        fixed."""
        if not (self._following and torch.distributed.is_available()):
            return
        if not torch.distributed.is_initialized():
            return
        self._following = False
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        if (rank, world_size) == (self.rank, self.world_size):
            return
        check_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        self._count_shares()
        self._assignment = None
        if self._full_batch_check is not None:
            self.check_full_batch(*self._full_batch_check)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._follow_process_group()
        self._following = False  # the rank is fixed once iteration (or a restore) begins
        next_epoch, self._next_epoch = self._next_epoch, None
        next_rest, self._next_rest = self._next_rest, None
        if initial_state is None:
            if next_epoch is not None:
                self._epoch = next_epoch
            elif self._started:
                self._epoch += 1
            if next_rest is not None:
                self._rest = next_rest
            if self._rest is not None and self._rest.epoch != self._epoch:
                self._rest = None  # the re-dealt epoch is over: epochs deal as usual
            self._position = 0
            self._started = False
            self._assignment = self._assign(self._epoch)
            return
        state, epoch, self._rest, deal = restore_state(
            self, initial_state, self._config(), self.fingerprint
        )
        if deal is not None and deal != self.deal:
            self._take_deal(deal)
        assignment = self._assign(epoch)
        self._position = check_cursor(self, state, POSITION_KEY, 0, assignment.units.size)
        self._epoch, self._assignment = epoch, assignment
        self._started = True  # a restored run is under way, even at position 0

    def _take_deal(self, deal: int) -> None:
        """Deal by version `deal` from now on (a state made under it was taken up): the
        shares, and the batch check made on them, follow."""
        self.deal = deal
        self._count_shares()
        if self._full_batch_check is not None:
            self.check_full_batch(*self._full_batch_check)

    def _assign(self, epoch: int) -> EpochAssignment:
        if self._rest is not None and self._rest.epoch == epoch:
            return self._assign_rest(self._rest)
        if self.evaluation:
            return assign_evaluation(
                self.geometry,
                self.split_units,
                seed=self.seed,
                epoch=epoch,
                rank=self.rank,
                world_size=self.world_size,
            )
        return assign_epoch(
            self.geometry,
            self.split_units,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world_size=self.world_size,
            partitions=self.partitions,
            deal=self.deal,
        )

    def _assign_rest(self, rest: SavedRest) -> EpochAssignment:
        """This rank's share of an epoch's rest re-dealt from another number of ranks
        (`core.elastic`): units partly drawn at the cut start where they stopped."""
        permutation = full_permutation(self.geometry, self.split_units, self.seed, rest.epoch)
        units, starts = share_units(self.geometry, rest.share, permutation, self.split_units)
        return EpochAssignment(
            seed=self.seed,
            epoch=rest.epoch,
            rank=self.rank,
            world_size=self.world_size,
            units=units,
            rank_samples=share_samples(self.geometry, units, starts),
            min_rank_samples=rest.least,
            max_rank_samples=rest.most,
            partitions=self.partitions,
            starts=starts,
        )

    def process_rank(self) -> tuple[int, int]:
        """This node's (rank, world size), after taking torch.distributed's if the node
        follows the process group and one exists now (see the class)."""
        self._follow_process_group()
        return self.rank, self.world_size

    def begin_rest(self, epoch: int, share: RestShare, least: int, most: int) -> None:
        """Make the next `reset(None)` begin the rest of `epoch` as re-dealt to this rank
        from another number of ranks' states (`loader.elastic_resume`), instead of a whole
        epoch; the epochs after it deal as usual.

        Args:
            epoch: the epoch of the cut.
            share: this rank's share of its rest (`core.elastic.redeal`).
            least: the smallest new rank's share of the rest, in samples.
            most: the largest new rank's share of the rest, in samples.
        """
        if share.stride != self.world_size or share.offset != self.rank:
            raise ValueError(
                f"this share of an epoch's rest is rank {share.offset}'s of {share.stride}, "
                f"and this node is rank {self.rank} of {self.world_size}"
            )
        self._next_epoch = as_int("epoch", epoch, minimum=0)
        self._next_rest = SavedRest(self._next_epoch, share, least, most)

    @property
    def epoch(self) -> int:
        """The epoch the node is in (or, before its first reset, begins with)."""
        return self._epoch

    def begin_epoch(self, epoch: int) -> None:
        """Make the next `reset(None)` begin `epoch` rather than the epoch after this one
        (a `reset(state)` drops the request: the state says where to be). What
        `Loader.set_epoch` uses when a framework tells the loader which epoch it is in.

        Args:
            epoch: the epoch to begin (an int >= 0).
        """
        self._next_epoch = as_int("epoch", epoch, minimum=0)

    @property
    def assignment(self) -> EpochAssignment:
        """This epoch's assignment (resets the node first if it never was)."""
        if self._assignment is None:
            self.reset(None)
        assert self._assignment is not None
        return self._assignment

    def samples_per_epoch(self, batch_size: int, drop_last: bool) -> int:
        """Samples this rank yields per epoch under the batch settings downstream, the same
        every epoch and known before anything is read (`len(loader)` counts batches with it).
        The rest of an epoch re-dealt from another number of ranks (`begin_rest`) has its
        own count, said from `begin_rest` until the next epoch's first reset.

        Args:
            batch_size: samples per batch (an int >= 1).
            drop_last: whether only full batches are yielded (True or False).
        """
        self._follow_process_group()
        return self._epoch_shares().samples_per_epoch(
            as_int("batch_size", batch_size, minimum=1), as_bool("drop_last", drop_last)
        )

    def _epoch_shares(self) -> RankShares:
        """The shares the coming epoch deals: the split's, or those of the rest of an
        epoch re-dealt from another number of ranks (from `begin_rest` until the next
        epoch's first reset)."""
        rest = self._next_rest  # begun by the next reset(None)
        if rest is None and self._rest is not None and self._rest.epoch == self._epoch:
            rest = self._rest
        if rest is None:
            return self._shares
        a = self._assign_rest(rest)
        return RankShares(
            a.rank_samples, a.min_rank_samples, a.max_rank_samples, self.partitions, self.evaluation
        )

    def check_full_batch(self, batch_size: int, drop_last: bool, split: str) -> None:
        """Refuse, before anything is read, a `batch_size` and `drop_last` under which the
        smallest rank's share of the split fills no batch, and `drop_last` in evaluation
        (which yields every sample): this node knows every rank's share now,
        `ShuffleBlockNode` (whose settings they are) only once its first block is read.
        Checked again if the node takes a process group's rank and world size later.

        Args:
            batch_size: samples per batch (an int >= 1).
            drop_last: whether only full batches are yielded (True or False).
            split: the split's name, for the message.
        """
        batch_size = as_int("batch_size", batch_size, minimum=1)
        drop_last = as_bool("drop_last", drop_last)
        self._full_batch_check = (batch_size, drop_last, split)
        self._follow_process_group()
        check_full_batch(self._epoch_shares(), batch_size, drop_last, split)

    def next(self) -> UnitTicket:
        assignment = self.assignment
        if self._position >= assignment.units.size:
            raise StopIteration
        self._started = True
        ticket = UnitTicket(assignment, self._position, int(assignment.units[self._position]))
        self._position += 1
        return ticket

    def _config(self) -> dict[str, Any]:
        return permute_config(
            seed=self.seed,
            rank=self.rank,
            world_size=self.world_size,
            units=int(self.split_units.size),
            samples=self.num_samples,
            unit_grid=self.unit_grid,
            evaluation=self.evaluation,
            partitions=self.partitions,
            deal=self.deal if self._deal_recorded else None,
        )

    def get_state(self) -> dict[str, Any]:
        return snapshot(self.state_view())

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        self._follow_process_group()
        rest = self._rest if self._rest is not None and self._rest.epoch == self._epoch else None
        return saved_state(
            self,
            epoch=self._epoch,
            position=self._position,
            config=self._config(),
            fingerprint=self.fingerprint,
            rest=rest,
        )

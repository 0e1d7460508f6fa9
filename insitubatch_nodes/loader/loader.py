"""A torchdata `Loader` that stops the graph's IO when a for-loop over it stops, and whose
state stays right across chained resumes.

torchdata's Loader hands out one long-lived iterator, so nothing tells the graph that the
user broke out of a loop or that the loop body raised; the fetch threads would idle on.
This subclass iterates through a generator that closes every node that can be closed on
`break`, an exception (KeyboardInterrupt included) or garbage collection, and at the end
of an epoch all but the nodes that read across epochs (`read_across_epochs=True`: they
are reading the next epoch's first blocks, and stop on `close()` or the next epoch).

It also keeps its own iterator (`loader.peeking_iterator`: with torchdata 0.11's, a checkpoint
taken after a restored state turned out to be an epoch's end would resume at the wrong
place, meta-pytorch/data#1552). `state_dict()` has the same layout as torchdata's.

For the training frameworks: `len(loader)` is the batches an epoch yields on this rank,
known before anything is read (from the graph's shuffle node). Lightning fetches a
batch ahead of the training step only when an iterable has no length, so with it the
state Lightning saves is the state after the step's batch. `all_ranks_state=True` makes
`state_dict()` one state holding every rank's (`loader.rank_states`), since Lightning and
accelerate write rank 0's checkpoint only.

What the loader asks of its graph (the epoch keeper, the batch counter, the stages'
counters, the stages to stop) it holds as links resolved once, when it is built
(`loader.graph_links`), which also hands a graph composed by hand the links between its
nodes that it lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import torchdata.nodes
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.area import AreaSelection
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.core.stage_report import EpochActivity, epoch_stats
from insitubatch_nodes.loader.elastic_resume import resume_rest
from insitubatch_nodes.loader.graph_links import GraphLinks, resolve_links
from insitubatch_nodes.loader.peeking_iterator import PeekingIterator
from insitubatch_nodes.loader.rank_states import (
    gather_rank_states,
    is_rank_states,
    own_rank_state,
    process_rank,
    rank_state_entries,
)
from insitubatch_nodes.nodes.state_checks import (
    check_cursor,
    check_node_state,
    check_state_digest,
    with_digest,
)

T = TypeVar("T")


class Loader(torchdata.nodes.Loader[T]):
    """torchdata's `Loader` over a graph, closing the graph when a loop over it stops
    (see the module).

    Args:
        root: the graph's last node.
        restart_on_stop_iteration: begin the next epoch at the next `iter()` once an
            epoch ran out (torchdata's meaning).
        all_ranks_state: `state_dict()` gathers every rank's state into one (a collective
            call over torch.distributed: every rank must make it at the same point, as
            Lightning's and accelerate's checkpointing do), so that the one checkpoint
            those frameworks write (rank 0's) resumes every rank. `load_state_dict` takes
            either kind of state.
        channels: what `loader.channels` says: with `stack=True`, each stacked batch key
            -> its channels' names in order (`{"fields": ["t2m", "temperature_500", ...,
            "land_sea_mask"]}`: variables and levels, then static fields), so that a model
            (and its checkpoint) can name its inputs; None for unstacked batches, whose
            keys name them.
        area: the grid points an area keeps (`core.area.AreaSelection`: the batch's
            latitudes and longitudes, in its order, and the picks that read them), or None
            for the whole grid: `build_loader(area=...)` sets it, so that a model or a
            later stage knows where its grid lies.

    Raises:
        ValueError: the graph's links cannot be told apart (`loader.graph_links`: two
            epoch keepers, two batch counters, two planners upstream of a pool shuffle).
    """

    STATE_NAME = "Loader"  # named in refusals; its state, torchdata's layout, names no node

    def __init__(
        self,
        root: BaseNode[T],
        restart_on_stop_iteration: bool = True,
        *,
        all_ranks_state: bool = False,
        channels: Mapping[str, Sequence[str]] | None = None,
        area: AreaSelection | None = None,
    ) -> None:
        super().__init__(root, restart_on_stop_iteration)
        self.all_ranks_state = as_bool("all_ranks_state", all_ranks_state)
        # with stack=True: each stacked batch key -> its channels' names, in order
        self.channels = None if channels is None else {k: list(v) for k, v in channels.items()}
        self.area = area
        self._links: GraphLinks = resolve_links(root)
        self._iterator: PeekingIterator[T] | None = None
        self._state_to_load: dict[str, Any] | None = None
        self._started_for_state_dict = False
        self._fresh = False  # the latest iter() has handed nothing out yet
        self._next_epoch: int | None = None  # set_epoch's, for the next iter()
        self._stats_hook: tuple[Callable[[dict[str, float]], None], int] | None = None

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        if (
            self._iterator is None
            or not self._started_for_state_dict
            or self._state_to_load is not None
        ):
            self._start()
        self._started_for_state_dict = False
        assert self._iterator is not None
        return self._closing(self._iterator)

    def _start(self) -> None:
        """The epoch a new `iter()` begins: the loaded state's, else the next one."""
        if self._iterator is None:
            self._iterator = PeekingIterator(self.root)
        self._fresh = True
        next_epoch, self._next_epoch = self._next_epoch, None
        if self._state_to_load is None:
            self._iterator.reset(None)
            if next_epoch is not None:
                self._move_to_epoch(next_epoch)
            return
        state, self._state_to_load = self._state_to_load, None  # a state says the epoch
        self._iterator.reset(state)
        ended = self.restart_on_stop_iteration and not self._iterator.has_next()
        # After the nodes took up their parts (so a cursor out of range is named as such):
        # an edit that left every cursor in range still does not match the digest. By then
        # the fetch loop runs (it read for has_next), so a refused state stops it: a caller
        # that catches the error must not keep threads reading for a state it refused.
        try:
            check_state_digest(state)
        except BaseException:
            self._links.close()
            raise
        if ended:
            self._iterator.reset(None)  # the state was an epoch's end: begin the next one

    def _closing(self, iterator: Iterator[T]) -> Iterator[T]:
        handed = 0
        try:
            for item in iterator:
                self._fresh = False
                yield item
                handed += 1
                if self._stats_hook is not None and handed % self._stats_hook[1] == 0:
                    self._stats_hook[0](self.scalar_stats())
        except BaseException:  # break (GeneratorExit), an error, or garbage collection
            self.close()
            raise
        self._links.end_epoch()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from `state_dict` at the next `iter()`. Its own layout is checked now;
        each node checks its part when it takes it up, at that `iter()`. A state of every
        rank (`all_ranks_state=True`, or `loader.rank_states.gather_rank_states`) resumes from
        this process's entry; one of another number of ranks than this loader's resumes
        the rest of its epoch re-dealt to this loader's ranks (`loader.elastic_resume`: every
        not-yet-seen sample once; the pool shuffle only).

        Args:
            state_dict: what `state_dict()` returned (through a checkpoint file or not).
        """
        if is_rank_states(state_dict):
            keeper = self._links.epoch_keeper
            rank, world_size = process_rank() if keeper is None else keeper.process_rank()
            entries = rank_state_entries(state_dict)
            if len(entries) != world_size and keeper is not None:
                resume_rest(keeper, entries)
                self._state_to_load = None
                self._started_for_state_dict = False  # the next iter() starts the rest
                return
            state_dict = own_rank_state(state_dict, rank, world_size)
        keys = (PeekingIterator.ROOT_KEY, PeekingIterator.NUM_YIELDED_KEY)
        state = check_node_state(self, state_dict, keys, named=False)
        check_cursor(self, state, PeekingIterator.NUM_YIELDED_KEY, 0)
        self._state_to_load = state_dict

    def state_dict(self) -> dict[str, Any]:
        """Where the latest `iter()` stands; before any, where the first would start.
        With `all_ranks_state`, every rank's, gathered (see the class)."""
        if self._iterator is None:
            self._start()
            self._started_for_state_dict = True
        assert self._iterator is not None
        state = with_digest(self._iterator.state_dict())
        return gather_rank_states(state) if self.all_ranks_state else state

    def stats(self) -> dict[str, Any]:
        """This epoch so far, as plain numbers (`core.stage_report.epoch_stats`): batches,
        samples per second, the share of time the consumer waited for data, chunks and
        bytes read, reads in flight (mean, max, target), read latency quantiles, retries,
        decode CPU, gather time, read amplification, block memory held, the share of time
        the fetch loop worked (`fetch_loop_busy_fraction`), the `limiting_stage` with its
        `evidence`, and how mixed the batches are against a
        uniform global shuffle of the split (`distinct_units_per_batch`, `time_distance`,
        each with `_uniform` and `_ratio`, and `gap_score`; `core.quality.MixingTally`).
        Cheap enough to call every step; counting costs two clock reads and O(batch)
        numpy work per batch, and the stages' counters are kept anyway."""
        counters: dict[str, Any] = {}
        for stage in self._links.counted:
            counters.update(stage.stage_counters())
        if self._iterator is not None:
            counters.update(self._iterator.stage_counters())
        stats = epoch_stats(EpochActivity(**counters))
        for stage in self._links.mixing:
            stats.update(stage.mixing_figures())
        return stats

    def scalar_stats(self) -> dict[str, float]:
        """`stats()`'s numbers as floats, for a metrics logger (the verdict and its
        evidence, which are words, left out)."""
        return {
            key: float(value)
            for key, value in self.stats().items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }

    def log_stats_every(self, batches: int, hook: Callable[[dict[str, float]], None]) -> None:
        """Call `hook(loader.scalar_stats())` after every `batches` batches an iteration
        hands out, in the consumer's thread, between batches: e.g. `lambda s: [writer
        .add_scalar(f"loader/{k}", v, step) for k, v in s.items()]` for TensorBoard.

        Args:
            batches: how many batches apart (an int >= 1).
            hook: what takes the figures.
        """
        self._stats_hook = (hook, as_int("batches", batches, minimum=1))

    def __len__(self) -> int:
        """Batches one epoch yields on this rank (the last may be short), computed without
        reading: what the graph's batch counter (`ShuffleBlockNode.batches_per_epoch`)
        says, the nodes after it handing on one item per batch (gather, stack, device
        copy, normalise, a torchdata Mapper). Training frameworks size progress bars and
        schedules with it, and Lightning fetches no batch ahead of the step when it has it.

        Raises:
            TypeError: the graph has no batch counter (no shuffle node), or its counter
                has no epoch keeper, so it cannot say (the error `len()` of an unsized
                object raises).
        """
        counter = self._links.batch_counter
        if counter is None:
            raise TypeError(
                "this Loader's graph has no node that counts an epoch's batches (a "
                "ShuffleBlockNode or PoolShuffleNode does), so it has no len()"
            )
        return counter.batches_per_epoch()

    def set_epoch(self, epoch: int) -> None:
        """Make `epoch` the epoch this loader yields: the current `iter()`'s if it has
        handed nothing out yet (it starts again there), else the next `iter()`'s (instead
        of the epoch after this one; a state loaded before it says the epoch instead).
        What `DistributedSampler.set_epoch` means to a DataLoader: Lightning calls it at
        every epoch's start (through `sampler`), and resumes a checkpoint saved at an
        epoch's end this way rather than with the loader's state. A bare loop does not
        need it: each `iter()` moves one epoch on.

        Args:
            epoch: the epoch (an int >= 0).

        Raises:
            TypeError: the graph has no epoch keeper (`ChunkPermuteNode`) to set it on.
        """
        epoch = as_int("epoch", epoch, minimum=0)
        if self._links.epoch_keeper is None:
            raise TypeError(
                "this Loader's graph has no node that deals epochs (a ChunkPermuteNode "
                "does) to set the epoch on"
            )
        if self._iterator is not None and self._fresh and self._state_to_load is None:
            self._move_to_epoch(epoch)
        else:
            self._next_epoch = epoch

    def _move_to_epoch(self, epoch: int) -> None:
        """Start the current iteration, which has handed nothing out, again at `epoch`."""
        keeper = self._links.epoch_keeper
        assert self._iterator is not None and keeper is not None
        if keeper.epoch != epoch:
            keeper.begin_epoch(epoch)
            self._iterator.reset(None)

    @property
    def sampler(self) -> EpochSetter | None:
        """What Lightning calls `set_epoch` on at every epoch's start, as on a DataLoader's
        sampler: an `EpochSetter` for this loader, or None for a graph without a
        `ChunkPermuteNode`. The loader is like a `DataLoader(batch_size=None)` there: its
        items are whole batches, so it has no `batch_sampler` (None)."""
        return EpochSetter(self) if self._links.epoch_keeper is not None else None

    batch_sampler: None = None

    @property
    def dataset(self) -> NoReturn:
        """Not there: asking for it is refused with an `AttributeError` that says why.
        accelerate's `skip_first_batches` starts by asking for it; on this loader it would
        skip the batches that `load_state_dict` already resumed after a second time.
        (`hasattr(loader, "dataset")` stays False, as for any object without one.)"""
        raise AttributeError(
            "insitubatch_nodes.Loader has no dataset: it reads, shards and shuffles by "
            "itself and resumes from load_state_dict(). Do not call accelerate's "
            "skip_first_batches on it: after a load the loader already starts at the "
            "batch after the saved one, and skipping would skip those batches twice"
        )

    def close(self) -> None:
        """Stop all background IO now; iterating again picks up where it stopped."""
        self._links.close()

    def __enter__(self) -> Loader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class EpochSetter:
    """`Loader.sampler`: what a framework that handles the loader like a DataLoader calls
    `set_epoch` on at each epoch's start (Lightning does, as for a `DistributedSampler`).

    Args:
        loader: the loader whose epoch it sets.
    """

    def __init__(self, loader: Loader[Any]) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        """`Loader.set_epoch`.

        Args:
            epoch: the epoch (an int >= 0).
        """
        self.loader.set_epoch(epoch)

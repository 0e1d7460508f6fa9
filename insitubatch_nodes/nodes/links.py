"""What the nodes of a graph offer each other, as runtime-checkable `Protocol`s.

A few nodes must talk past the stages between them: a restored pool shuffle tells the
planner upstream which units it drained (so that a resume reads none of them), a shuffle
node counts its epoch's batches from the share the epoch keeper upstream deals, and the
`Loader` sets the epoch, counts batches, reads the stages' counters and mixing figures,
and stops every stage that runs threads. Each of those is a typed reference, handed over
once, when the graph is built: a node takes its peer as a constructor argument
(`build_loader` passes them), and for a graph composed by hand the `Loader` resolves the
links it lacks when it is built (`loader.graph_links`) and hands them over. Nothing
searches the graph at run time, and nothing decides by a class's name: a node offers a
link by having the members its Protocol lists, which `isinstance` checks, once.

The Protocols say what is offered, not which class offers it (a `ChunkPermuteNode` is the
library's `EpochKeeper`), so a stage written by hand can take a node's place by offering
the same members.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from insitubatch_nodes.core.drained_units import DrainedUnits
from insitubatch_nodes.core.elastic import RestShare
from insitubatch_nodes.core.geometry import UnitSamples

L = TypeVar("L")


@runtime_checkable
class EpochKeeper(Protocol):
    """Deals this rank its units, epoch by epoch (`ChunkPermuteNode`): which epoch, which
    rank, how many samples an epoch yields, and the split and settings an elastic resume
    re-deals the rest of an epoch from (`loader.elastic_resume`)."""

    geometry: UnitSamples
    split_units: np.ndarray
    seed: int
    partitions: int
    fingerprint: Mapping[str, Any] | None
    evaluation: bool

    @property
    def epoch(self) -> int: ...

    def begin_epoch(self, epoch: int) -> None: ...

    def samples_per_epoch(self, batch_size: int, drop_last: bool) -> int: ...

    def process_rank(self) -> tuple[int, int]: ...

    def begin_rest(self, epoch: int, share: RestShare, least: int, most: int) -> None: ...


@runtime_checkable
class BlockPlanner(Protocol):
    """Decides what each block reads (`ReadPlanNode`), so it can leave out the units a
    restored pool shuffle drained before its state was saved."""

    def leave_out_drained(self, drained: DrainedUnits | None) -> None: ...


@runtime_checkable
class BatchCounter(Protocol):
    """Knows how many batches an epoch yields on this rank before anything is read (the
    shuffle nodes): what `len(loader)` returns."""

    def batches_per_epoch(self) -> int: ...


@runtime_checkable
class CountedStage(Protocol):
    """Keeps counters of this epoch's work that `Loader.stats()` reports (the fetch
    node's reads, the gather's time)."""

    def stage_counters(self) -> dict[str, Any]: ...


@runtime_checkable
class MixingReport(Protocol):
    """Says how mixed this epoch's batches are against a uniform global shuffle (the
    gather, through `nodes.batch_mixing`)."""

    def mixing_figures(self) -> dict[str, float]: ...


@runtime_checkable
class Interruptible(Protocol):
    """Can be told to stop waiting at once (the fetch node), before anything is closed."""

    def interrupt(self) -> None: ...


@runtime_checkable
class Closeable(Protocol):
    """Runs threads or holds memory that `close()` lets go of (the fetch and device
    nodes)."""

    def close(self) -> None: ...


@runtime_checkable
class EpochSpanning(Protocol):
    """Keeps what the next epoch reuses: ended with `end_epoch()` rather than closed at an
    epoch's end, and left running then if it reads across epochs (the fetch node)."""

    read_across_epochs: bool

    def end_epoch(self) -> None: ...


@runtime_checkable
class NeedsEpochKeeper(Protocol):
    """Counts its batches from an `EpochKeeper` upstream (the shuffle nodes): given to its
    constructor, or linked by the `Loader` (None until then)."""

    @property
    def epoch_keeper(self) -> EpochKeeper | None: ...

    def link_epoch_keeper(self, keeper: EpochKeeper) -> None: ...


@runtime_checkable
class NeedsBlockPlanner(Protocol):
    """Tells a `BlockPlanner` upstream which units a resume leaves out (the pool shuffle):
    given to its constructor, or linked by the `Loader` (None: a graph without one reads
    the drained units and drops them)."""

    @property
    def block_planner(self) -> BlockPlanner | None: ...

    def link_block_planner(self, planner: BlockPlanner) -> None: ...


def checked_link(node: object, argument: str, peer: L | None, offers: type[L]) -> L | None:
    """`peer` if it offers what `offers` lists (or is None), else an error naming the
    argument: a link is checked where it is handed over, not where it is first used.

    Args:
        node: the node the peer is handed to (named in the error).
        argument: the constructor argument the peer is handed as.
        peer: the peer, or None.
        offers: the Protocol it must satisfy.

    Raises:
        TypeError: `peer` lacks a member of `offers`.
    """
    if peer is None or isinstance(peer, offers):
        return peer
    raise TypeError(
        f"{type(node).__name__}'s {argument} must be a node that offers {offers.__name__} "
        f"(nodes.links), got a {type(peer).__name__}"
    )

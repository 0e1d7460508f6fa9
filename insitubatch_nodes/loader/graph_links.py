"""The links a `Loader` talks to its graph through, resolved once when it is built.

The loader sets the epoch and resumes ranks through the graph's epoch keeper, answers
`len()` through its batch counter, sums the counters and mixing figures of the stages that
keep them for `stats()`, and stops the stages that run threads on `close()` and at an
epoch's end. It finds them here, in one walk over the graph when it is built, by what each
node offers (the `Protocol`s of `nodes.links`), and keeps them: nothing is looked up again
at `len()`, `stats()` or `close()`.

The same walk completes a graph composed by hand: a shuffle node given no epoch keeper is
linked to the one upstream of it, and a pool shuffle given no block planner to the one
upstream of it (none: it reads drained units and drops them). `build_loader` hands every
link over itself. A link that cannot be told apart is refused here, naming what to pass:
two epoch keepers or two batch counters in one graph (which epoch would `set_epoch` set,
which count would `len()` say?), two planners upstream of a pool shuffle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from torchdata.nodes import BaseNode

from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.links import (
    BatchCounter,
    BlockPlanner,
    Closeable,
    CountedStage,
    EpochKeeper,
    EpochSpanning,
    Interruptible,
    MixingReport,
    NeedsBlockPlanner,
    NeedsEpochKeeper,
)

L = TypeVar("L")


@dataclass(frozen=True)
class StageStops:
    """What stopping a graph's stages calls: every `interrupt`, then every `close` (or
    `end_epoch`). Interrupting first lets a producer thread that waits on a slow read stop
    at once, before its node waits for it. Every stage is stopped even if one fails to;
    the first failure is raised after.

    Args:
        interrupts: the stages' `interrupt` methods, in graph order.
        closes: the stages' `close` (or `end_epoch`) methods, in graph order.
    """

    interrupts: tuple[Callable[[], None], ...]
    closes: tuple[Callable[[], None], ...]

    def __call__(self) -> None:
        for interrupt in self.interrupts:
            interrupt()
        failure: Exception | None = None
        for close in self.closes:
            try:
                close()
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure


@dataclass(frozen=True)
class GraphLinks:
    """What a `Loader` talks to in its graph (see the module).

    Args:
        epoch_keeper: the node that deals the epochs, or None (no `set_epoch`, `sampler`
            or elastic resume).
        batch_counter: the node that counts an epoch's batches, or None (no `len()`).
        counted: the stages whose counters `stats()` sums.
        mixing: the stages whose mixing figures `stats()` reports.
        close: stops every stage (`Loader.close()`, or a loop left early).
        end_epoch: stops the stages at an epoch's end: those that read across epochs are
            left running, and those that keep memory for the next epoch end it with
            `end_epoch()` rather than `close()`.
    """

    epoch_keeper: EpochKeeper | None
    batch_counter: BatchCounter | None
    counted: tuple[CountedStage, ...]
    mixing: tuple[MixingReport, ...]
    close: StageStops
    end_epoch: StageStops


def _offering(nodes: Sequence[BaseNode[Any]], offers: type[L]) -> list[L]:
    return [node for node in nodes if isinstance(node, offers)]


def _names(nodes: Sequence[object]) -> str:
    return ", ".join(type(node).__name__ for node in nodes)


def _one_or_none(nodes: Sequence[BaseNode[Any]], offers: type[L], what: str, why: str) -> L | None:
    """The one node of `nodes` that offers `offers`, None for none, refused for more."""
    found = _offering(nodes, offers)
    if len(found) > 1:
        raise ValueError(
            f"this Loader's graph has {len(found)} nodes that {what} ({_names(found)}), "
            f"where {why}: build one Loader for each pipeline"
        )
    return found[0] if found else None


def _link_upstream(nodes: Sequence[BaseNode[Any]]) -> None:
    """Hand each node that lacks a link the one peer upstream of it (see the module)."""
    for node in nodes:
        lacks_keeper = isinstance(node, NeedsEpochKeeper) and node.epoch_keeper is None
        lacks_planner = isinstance(node, NeedsBlockPlanner) and node.block_planner is None
        if not (lacks_keeper or lacks_planner):
            continue
        upstream = [n for n in graph_nodes(node) if n is not node]
        if lacks_keeper:
            keepers = _offering(upstream, EpochKeeper)
            if len(keepers) == 1:
                node.link_epoch_keeper(keepers[0])
        if lacks_planner:
            planners = _offering(upstream, BlockPlanner)
            if len(planners) > 1:
                name = type(node).__name__
                raise ValueError(
                    f"the {name} has {len(planners)} nodes upstream that plan blocks "
                    f"({_names(planners)}), and tells one which units a resume leaves out: "
                    f"pass it as {name}(..., block_planner=...)"
                )
            if planners:
                node.link_block_planner(planners[0])


def _stops(nodes: Sequence[BaseNode[Any]], *, epoch_ended: bool) -> StageStops:
    """What stopping the stages calls, now or at an epoch's end (see `GraphLinks`)."""
    if epoch_ended:
        nodes = [n for n in nodes if not (isinstance(n, EpochSpanning) and n.read_across_epochs)]
    closes: list[Callable[[], None]] = []
    for node in nodes:
        if epoch_ended and isinstance(node, EpochSpanning):
            closes.append(node.end_epoch)  # keeps what the next epoch reuses
        elif isinstance(node, Closeable):
            closes.append(node.close)
    interrupts = tuple(node.interrupt for node in _offering(nodes, Interruptible))
    return StageStops(interrupts, tuple(closes))


def resolve_links(root: BaseNode[Any]) -> GraphLinks:
    """The links of the graph ending at `root`, with the missing links of nodes composed
    by hand handed over (see the module).

    Args:
        root: the graph's last node.

    Raises:
        ValueError: a link cannot be told apart (two epoch keepers, two batch counters, or
            two planners upstream of a pool shuffle).
    """
    nodes = graph_nodes(root)
    keeper = _one_or_none(
        nodes, EpochKeeper, "deal epochs", "set_epoch and a resume need the one to deal them"
    )
    counter = _one_or_none(
        nodes, BatchCounter, "count an epoch's batches", "len() says the one count"
    )
    _link_upstream(nodes)
    return GraphLinks(
        epoch_keeper=keeper,
        batch_counter=counter,
        counted=tuple(_offering(nodes, CountedStage)),
        mixing=tuple(_offering(nodes, MixingReport)),
        close=_stops(nodes, epoch_ended=False),
        end_epoch=_stops(nodes, epoch_ended=True),
    )

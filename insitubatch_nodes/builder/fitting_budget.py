"""A budget that `build_loader`'s defaults fit in, for when they are refused: what
`insitubatch inspect` suggests. Found by asking the choosing function itself
(`builder.loader_choices`) at trial budgets, so the suggestion is what a loader would take.
"""

from __future__ import annotations

from collections.abc import Mapping

from insitubatch_nodes.builder.loader_choices import choose_loader_settings
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.memory_bound import NO_STATICS, StaticCost, least_fitting
from insitubatch_nodes.io.host.host_resources import HostResources


def defaults_fit(
    budget: int,
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    batches_held: int,
    statics: StaticCost = NO_STATICS,
) -> bool:
    """Whether `build_loader`'s defaults (the default shuffle's pool included) fit in
    `budget` given.

    Args:
        budget: the budget, in bytes.
        anchors: the split's samples.
        layouts: the selected arrays.
        batch_size: samples per batch.
        batches_held: gathered batches alive at once.
        statics: what the static fields hold (`core.memory_bound.StaticCost`).
    """
    try:
        choose_loader_settings(
            anchors,
            layouts,
            HostResources(memory_bytes=budget, cores=1),  # the budget is given: unused
            batch_size=batch_size,
            block_chunks=None,
            max_inflight=None,
            memory_budget=budget,
            decode_threads=1,
            batches_held=batches_held,
            statics=statics,
        )
    except ValueError:
        return False
    return True


def budget_that_fits(
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    batches_held: int,
    above: int,
    statics: StaticCost = NO_STATICS,
) -> int | None:
    """A budget above `above` that `build_loader`'s defaults fit in, and one byte less
    does not: found by bisection, since the default block grows with the budget (so the
    need is not a formula of the settings alone). Fitting is not quite monotone in the
    budget (where the default block gains a unit, a byte more can need more than it
    gives), so a somewhat smaller budget may fit too; None when nothing up to
    `LARGEST_BUDGET` fits.

    Args:
        anchors: the split's samples.
        layouts: the selected arrays.
        batch_size: samples per batch.
        batches_held: gathered batches alive at once.
        above: a budget known not to fit.
        statics: what the static fields hold (`core.memory_bound.StaticCost`).
    """
    return least_fitting(
        lambda budget: defaults_fit(
            budget,
            anchors,
            layouts,
            batch_size=batch_size,
            batches_held=batches_held,
            statics=statics,
        ),
        above=above,
    )

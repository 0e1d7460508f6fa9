"""The resume check every stage and loader must pass, shared by the test modules.

A brand-new graph loaded with a state saved after any number of items yields exactly
what the uninterrupted run yields from there: the rest of that epoch, then the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes import Loader
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from tests.helpers.batches import torch_roundtrip
from tests.helpers.graphs import fingerprint
from tests.helpers.profiles import spread

MakeGraph = Callable[[], BaseNode[Any]]


def uninterrupted(make: MakeGraph, epochs: int) -> list[list[Any]]:
    """Fingerprints of `epochs` whole epochs of one loader over `make()`."""
    loader = Loader(make())
    return [[fingerprint(x) for x in loader] for _ in range(epochs)]


def check_every_cut(
    make: MakeGraph, cuts: list[int] | None = None, *, epochs_differ: bool = True
) -> None:
    """Cut an epoch after each of `cuts` items (by default all of them, end included:
    under the "dev" profile a spread of them, `tests.helpers.profiles.spread`), save the
    state through a checkpoint round trip, load it into a fresh graph, and check what it
    yields against an uninterrupted run: the items before the cut, the rest of the epoch
    and the whole next epoch (an end-of-epoch state goes straight on with the next one).

    One loader takes every cut's state on its way through the epoch, as a run saving a
    checkpoint every step does: a loader per cut would yield the same items before it.
    """
    epoch0, epoch1, epoch2 = uninterrupted(make, 3)
    assert epoch0
    if epochs_differ:  # not so for degenerate shares (e.g. one unit of two samples per rank)
        assert epoch0 != epoch1
    states = _states_at(make, cuts if cuts is not None else spread(len(epoch0) + 1), epoch0)
    for cut, state in states.items():
        fresh = Loader(make())
        fresh.load_state_dict(state)
        rest = [fingerprint(x) for x in fresh]
        following = [fingerprint(x) for x in fresh]
        if cut < len(epoch0):
            assert rest == epoch0[cut:], f"cut {cut}: the rest of the epoch differs"
            assert following == epoch1, f"cut {cut}: the next epoch differs"
        else:  # an end-of-epoch state goes straight on with the next epoch
            assert rest == epoch1
            assert following == epoch2


def _states_at(make: MakeGraph, cuts: list[int], epoch: list[Any]) -> dict[int, Any]:
    """States of one loader over `make()` after each of `cuts` items of its first epoch,
    through a checkpoint round trip; the items it yields on the way must be `epoch`'s."""
    loader = Loader(make())
    iterator = iter(loader)
    states = {}
    taken: list[Any] = []
    for cut in sorted(set(cuts)):
        taken += [fingerprint(next(iterator)) for _ in range(cut - len(taken))]
        assert taken == epoch[:cut], f"cut {cut}: the items before it differ"
        states[cut] = torch_roundtrip(loader.state_dict())
    del iterator, loader
    return states


def cut_and_resume(
    make: MakeGraph, cut: int, before_reading: Callable[[], None] | None = None
) -> tuple[dict[str, Any], list[np.ndarray], Loader[Any]]:
    """Draw `cut` batches of a fresh loader, save its state through JSON (a state must be
    plain) and close it (nothing it read ahead is counted after), then resume a fresh loader
    from the state: the state, the resumed loader's batches (their sample ids) and the
    resumed loader.

    Args:
        make: builds the graph.
        cut: batches drawn before the state is saved.
        before_reading: called once the state is loaded, before the resumed loader reads
            (a test counting its reads starts the count there), or None.
    """
    loader = Loader(make())
    iterator = iter(loader)
    for _ in range(cut):
        next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    del iterator, loader
    fresh = Loader(make())
    fresh.load_state_dict(state)
    if before_reading is not None:
        before_reading()
    got = [np.asarray(batch[SAMPLE_INDEX_KEY]).copy() for batch in fresh]
    return state, got, fresh


def check_resumed_at(make: MakeGraph, cut: int, epochs: list[list[np.ndarray]]) -> None:
    """A loader resumed from a state saved after `cut` batches (`cut_and_resume`) yields
    the rest of the first of `epochs`, or the whole second when `cut` ends the first.

    Args:
        make: builds the graph.
        cut: batches drawn before the state is saved, at most `len(epochs[0])`.
        epochs: the sample ids of two uninterrupted epochs' batches.
    """
    _, rest, _ = cut_and_resume(make, cut)
    expected = epochs[0][cut:] if cut < len(epochs[0]) else epochs[1]
    assert len(rest) == len(expected), f"cut {cut}: {len(rest)} batches, not {len(expected)}"
    assert all(np.array_equal(x, y) for x, y in zip(rest, expected, strict=True)), (
        f"cut {cut}: the batches after it differ"
    )

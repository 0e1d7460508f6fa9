"""What inspect says the pool's ramp costs (`core.pool_ramp`) is what the pure order
(`core.pool_order.pool_draw`, `pool_epoch_order`) does: as many batches drawn from a pool
still filling, as many distinct units in them, and the same units read before the first
batch, with the ramp and with the pool filled first."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import pool_epoch_order
from insitubatch_nodes.core.pool_ramp import pool_ramp
from tests.helpers.pool_cursors import distinct_units, filling_batches, first_wait
from tests.helpers.strategies import geometries


@settings(max_examples=60, deadline=None)
@given(
    geometries(max_samples=120),
    st.integers(1, 16),
    st.integers(1, 12),
    st.integers(0, 3),
    st.integers(0, 2),
)
# one-step units leave the pool as they are drawn: P counts the units still in it
@example(SampleGeometry.from_layouts({"a": VariableLayout((60,), (1,), "float32")}), 20, 8, 2, 0)
def test_the_ramp_is_the_pure_orders(
    geometry: SampleGeometry, pool_size: int, batch_size: int, ramp: int, epoch: int
) -> None:
    a = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=3, epoch=epoch, rank=0, world_size=1
    )
    got = pool_ramp(
        geometry, a, pool_size=pool_size, batch_size=batch_size, drop_last=False, ramp=ramp
    )
    assert got.followed_all
    assert got.batches == filling_batches(geometry, a, pool_size, batch_size, ramp)
    if ramp == 0:
        assert got.batches == 0
    order = pool_epoch_order(
        geometry, a, pool_size=pool_size, batch_size=batch_size, drop_last=False, ramp=ramp
    )
    head = order[: got.batches * batch_size].reshape(got.batches, batch_size)
    expected = distinct_units(geometry, a, head)
    assert got.distinct_units == (np.mean(expected) if expected else 0.0)
    sizes = geometry.unit_sizes(a.units)
    waited = first_wait(geometry, a, pool_size, batch_size, ramp)
    assert (got.first_units, got.first_samples) == (waited, int(sizes[:waited].sum()))
    filled = first_wait(geometry, a, pool_size, batch_size, 0)
    assert (got.filled_units, got.filled_samples) == (filled, int(sizes[:filled].sum()))


def test_a_ramp_too_long_to_follow_is_reported_as_at_least_what_was_followed() -> None:
    """One-step units, a pool larger than the split: the ramp lasts until every unit has
    entered. With room to follow only part of it, the batches followed are a prefix of
    the whole ramp, mixing as the pure order's first batches do."""
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((2000,), (1,), "float32")})
    a = assign_epoch(geometry, np.arange(2000), seed=0, epoch=0, rank=0, world_size=1)
    kw = {"pool_size": 10**6, "batch_size": 8, "drop_last": False, "ramp": 2}
    whole = pool_ramp(geometry, a, **kw)
    cut = pool_ramp(geometry, a, followed_units=20_000, **kw)
    assert whole.followed_all and not cut.followed_all
    assert 0 < cut.batches < whole.batches
    order = pool_epoch_order(geometry, a, **kw)
    head = order[: cut.batches * 8].reshape(cut.batches, 8)
    assert cut.distinct_units == np.mean(distinct_units(geometry, a, head))
    assert (cut.first_units, cut.filled_units) == (whole.first_units, whole.filled_units)

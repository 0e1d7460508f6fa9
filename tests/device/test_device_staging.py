"""The staging ring, the batch layout, the copier and the node's prefetch and resume,
checked on the CPU: the same code the CUDA path runs, with events complete at once."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.nodes import BaseNode

from insitubatch_nodes import (
    GatherNode,
    Loader,
    PatchSpec,
    PinToDeviceNode,
    StackChannelsNode,
    ZarrSource,
)
from insitubatch_nodes.device.batch_copy import BatchCopier
from insitubatch_nodes.device.batch_layout import ALIGNMENT, BatchLayout
from insitubatch_nodes.device.staging_ring import StagingRing
from insitubatch_nodes.nodes.items import Batch
from tests.helpers.batches import batch_key
from tests.helpers.graphs import build_stage
from tests.helpers.resume_check import check_every_cut
from tests.helpers.threads import our_threads


class _PendingEvent:
    """A copy still running until someone waits for it."""

    def __init__(self) -> None:
        self.done = False
        self.waited = 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True


def _allocate(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def _bytes(n: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {"x": ((n,), np.dtype(np.uint8))}


def test_ring_reuses_its_buffers_in_turn() -> None:
    ring = StagingRing(3, _allocate)
    pointers = [ring.stage(_bytes(1000)).host.data_ptr() for _ in range(9)]
    assert pointers[:3] == pointers[3:6] == pointers[6:]
    assert len(set(pointers[:3])) == 3
    assert ring.stats.allocations == 3 and ring.stats.held == 0


def test_ring_waits_for_the_last_copy_before_handing_a_slot_out_again() -> None:
    ring = StagingRing(2, _allocate)
    events = []
    for _ in range(2):
        event = _PendingEvent()
        ring.stage(_bytes(64)).release_after(event)
        events.append(event)
    assert [e.waited for e in events] == [0, 0]  # fresh slots: nothing to wait for
    first_again = ring.stage(_bytes(64))
    assert [e.waited for e in events] == [1, 0]  # slot 0 again: its copy is waited for
    assert ring.stats.waits == 1
    finished = _PendingEvent()
    finished.done = True
    first_again.release_after(finished)
    events[1].done = True
    ring.stage(_bytes(64))  # slot 1: its copy already finished, no wait
    assert ring.stats.waits == 1 and events[1].waited == 0


def test_ring_grows_a_slot_only_for_a_larger_batch() -> None:
    ring = StagingRing(1, _allocate)
    first = ring.stage(_bytes(1000)).host.data_ptr()  # sizes round up to ALIGNMENT
    smaller = ring.stage(_bytes(400)).host
    assert smaller.numel() == 512 and smaller.data_ptr() == first
    larger = ring.stage(_bytes(5000)).host
    assert larger.numel() == 5120 and ring.stats.allocations == 2


def test_ring_refuses_zero_slots() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        StagingRing(0, _allocate)


def test_ring_never_writes_a_slot_something_still_views() -> None:
    """A batch kept (as its arrays, a view of them or a tensor made from one) keeps its
    memory: the ring leaves the slot to it and allocates anew; once dropped, the slot
    is reused."""
    ring = StagingRing(2, _allocate)
    kept = []
    for i in range(6):
        staged = ring.stage({"a": ((3, 2), np.dtype(np.float32))})
        staged.arrays["a"][...] = i
        kept.append(torch.from_numpy(staged.arrays["a"][1:]))  # a view of a view, wrapped
        del staged
    assert [float(t.sum()) for t in kept] == [4.0 * i for i in range(6)]  # none overwritten
    assert ring.stats.held == 4 and ring.stats.allocations == 6
    kept.clear()
    pointers = [ring.stage({"a": ((3, 2), np.dtype(np.float32))}).host.data_ptr()]
    pointers += [ring.stage({"a": ((3, 2), np.dtype(np.float32))}).host.data_ptr()]
    pointers += [ring.stage({"a": ((3, 2), np.dtype(np.float32))}).host.data_ptr()]
    assert pointers[0] == pointers[2] != pointers[1]
    assert ring.stats.held == 4 and ring.stats.allocations == 6  # the two slots, reused


_dtypes = st.sampled_from(["float32", "float64", "int16", "int8", "uint8", "int64", "float16"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(_dtypes, st.lists(st.integers(0, 5), min_size=1, max_size=3)),
        min_size=1,
        max_size=5,
    )
)
def test_layout_packs_arrays_aligned_and_apart_and_views_them_back(spec: Any) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        f"v{i}": rng.integers(-100, 100, size=shape).astype(dtype)
        for i, (dtype, shape) in enumerate(spec)
    }
    layout = BatchLayout.of_spec({name: (a.shape, a.dtype) for name, a in arrays.items()})
    spans = sorted((f.offset, f.offset + f.nbytes) for f in layout.fields)
    assert all(f.offset % ALIGNMENT == 0 for f in layout.fields)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert spans[-1][1] <= layout.nbytes
    buffer = torch.zeros(layout.nbytes, dtype=torch.uint8)
    for name, view in layout.host_views(buffer.numpy()).items():
        np.copyto(view, arrays[name], casting="no")
    for name, tensor in layout.views(buffer).items():
        assert tensor.numpy().dtype == arrays[name].dtype
        assert np.array_equal(tensor.numpy(), arrays[name])


def test_copier_batches_stay_intact_after_their_ring_slot_is_reused() -> None:
    copier = BatchCopier(torch.device("cpu"), slots=2)
    batches = [
        {"a": np.full((4, 3), i, dtype=np.float32), "b": np.arange(i, i + 5, dtype=np.int16)}
        for i in range(7)
    ]
    in_flight = [copier.submit(batch) for batch in batches]  # all submitted, none delivered
    for batch, pending in zip(batches, in_flight, strict=True):
        delivered = copier.deliver(pending)
        for name, array in batch.items():
            assert np.array_equal(delivered[name].numpy(), array)
    assert copier.ring.stats.allocations == 2  # sized once from the batch, then reused
    assert copier.packed == 7


def test_staged_batches_are_copied_from_where_they_were_written_without_packing() -> None:
    ring = StagingRing(2, _allocate)
    copier = BatchCopier(torch.device("cpu"), slots=2)
    spec = {"a": ((3, 2), np.dtype(np.float32)), "b": ((3,), np.dtype(np.int16))}
    delivered = []
    for i in range(5):
        staged = ring.stage(spec)
        staged.arrays["a"][...] = i
        staged.arrays["b"][...] = -i
        delivered.append(copier.deliver(copier.submit(staged.arrays, staged)))
    assert copier.packed == 0 and copier.ring.stats.allocations == 0
    assert ring.stats.allocations == 2 and ring.stats.held == 0
    for i, batch in enumerate(delivered):
        assert (batch["a"] == i).all() and (batch["b"] == -i).all()
    staged = ring.stage(spec)
    replaced = {**staged.arrays, "a": np.ones_like(staged.arrays["a"])}  # a stage swapped one
    batch = copier.deliver(copier.submit(replaced, staged))  # not the staged arrays: packed
    assert copier.packed == 1 and (batch["a"] == 1).all()


def test_a_pinned_gather_writes_each_batch_into_its_ring_and_says_so(memory_url: Any) -> None:
    """`GatherNode(pin_memory=True)` writes every array but `sample_index` into the slot
    the batch carries (`Batch.staged`), and a copier copies that slot as it is."""
    url, _ = memory_url()
    plain = [batch_key(b) for b in Loader(build_stage(url, "gather", batch_size=6))]
    gathered = GatherNode(build_stage(url, "shuffle", batch_size=6), pin_memory=True)
    assert gathered.staging is not None
    copier = BatchCopier(torch.device("cpu"), slots=2)
    got = []
    for batch in Loader(gathered):
        assert isinstance(batch, Batch) and batch.staged is not None and batch.device is None
        host = {k: v for k, v in batch.items() if k != "sample_index"}
        assert all(host[k] is v for k, v in batch.staged.arrays.items())
        assert batch.staged.holds(host)
        moved = copier.deliver(copier.submit(host, batch.staged))
        got.append(batch_key({**moved, "sample_index": batch["sample_index"]}))
    assert got == plain and copier.packed == 0
    assert gathered.staging.stats.allocations == gathered.staging.slots  # sized once


def test_a_pinned_gather_stages_patch_origins_with_the_fields(memory_url: Any) -> None:
    url, _ = memory_url({"t2m": ((40, 6, 8), (4, 3, 4), "float32")})
    patches = PatchSpec((2, 2))
    plain = [
        batch_key(b) for b in Loader(build_stage(url, "gather", batch_size=6, patches=patches))
    ]
    gathered = GatherNode(
        build_stage(url, "shuffle", batch_size=6, patches=patches), pin_memory=True
    )
    batches = list(Loader(gathered))  # all kept: the ring leaves their slots to them
    assert [batch_key(b) for b in batches] == plain
    for batch in batches:
        assert batch.staged is not None and set(batch.staged.arrays) == set(batch) - {
            "sample_index"
        }
    assert gathered.staging is not None and gathered.staging.stats.held > 0


@pytest.mark.parametrize("patches", [None, PatchSpec((2, 2))], ids=["whole", "patches"])
def test_a_pinned_stack_writes_the_stacked_batch_into_its_ring(
    memory_url: Any, patches: PatchSpec | None
) -> None:
    """With `StackChannelsNode(pin_memory=True)` the concatenation (levels flattened
    into channels) and the patch origins are written into the slot the batch carries, and
    a copier copies that slot as it is: a stacked batch is staged too."""
    url, _ = memory_url(
        {"a": ((40, 6, 8), (4, 3, 4), "float32"), "b": ((40, 2, 6, 8), (4, 2, 3, 4), "float32")}
    )
    layouts = ZarrSource.open(url).layouts

    def stacked(pin_memory: bool) -> StackChannelsNode:
        gathered = build_stage(url, "gather", batch_size=6, patches=patches)
        return StackChannelsNode(gathered, layouts, pin_memory=pin_memory)

    plain = [batch_key(b) for b in Loader(stacked(False))]
    copier = BatchCopier(torch.device("cpu"), slots=2)
    got = []
    for batch in Loader(stacked(True)):
        host = {k: v for k, v in batch.items() if k != "sample_index"}
        assert batch.staged is not None and batch.staged.holds(host)
        moved = copier.deliver(copier.submit(host, batch.staged))
        got.append(batch_key({**moved, "sample_index": batch["sample_index"]}))
    assert got == plain and copier.packed == 0


class _Counting(BaseNode[Any]):
    """Counts how far the node has pulled its source."""

    def __init__(self, source: BaseNode[Any]) -> None:
        super().__init__()
        self.source = source
        self.pulled = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)

    def next(self) -> Any:
        item = next(self.source)
        self.pulled += 1
        return item

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()


def _eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)
    return condition()


@pytest.mark.parametrize(
    ("prefetch", "background"), [(0, False), (1, False), (3, False), (1, True), (3, True)]
)
def test_node_keeps_prefetch_batches_ahead_and_yields_the_same_batches(
    memory_url: Any, prefetch: int, background: bool
) -> None:
    """In the consumer's thread exactly `prefetch` batches ahead; on a producer thread
    never more, and that many once it has caught up."""
    url, _ = memory_url()
    expected = [batch_key(b) for b in Loader(build_stage(url, "gather", batch_size=6))]
    counting = _Counting(build_stage(url, "gather", batch_size=6))
    node = PinToDeviceNode(counting, device="cpu", prefetch=prefetch, background=background)
    node.reset()
    got = []
    for handed_out in range(1, len(expected) + 1):
        got.append(batch_key(next(node)))
        ahead = min(handed_out + prefetch, len(expected))
        assert counting.pulled <= ahead
        if background:
            assert _eventually(lambda want=ahead: counting.pulled == want)
        else:
            assert counting.pulled == ahead
    with pytest.raises(StopIteration):
        next(node)
    assert got == expected
    assert not any(t.name == "insitubatch-pin" for t in our_threads())


def test_close_keeps_what_the_producer_pulled_and_goes_on_from_there(memory_url: Any) -> None:
    url, _ = memory_url()
    expected = [batch_key(b) for b in Loader(build_stage(url, "gather", batch_size=6))]
    node = PinToDeviceNode(build_stage(url, "gather", batch_size=6), device="cpu", prefetch=3)
    node.reset()
    got = [batch_key(next(node)) for _ in range(2)]
    node.close()
    assert not any(t.name == "insitubatch-pin" for t in our_threads())
    got += [batch_key(b) for b in _drain(node)]
    assert got == expected


def _drain(node: BaseNode[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(next(node))
        except StopIteration:
            return out


def test_a_source_error_reaches_the_consumer_and_stops_the_producer(memory_url: Any) -> None:
    url, _ = memory_url()

    class Failing(_Counting):
        def next(self) -> Any:
            if self.pulled == 2:
                raise OSError("the store went away")
            return super().next()

    node = PinToDeviceNode(
        Failing(build_stage(url, "gather", batch_size=6)), device="cpu", prefetch=2
    )
    node.reset()
    next(node), next(node)
    with pytest.raises(OSError, match="the store went away"):
        next(node)
    assert not any(t.name == "insitubatch-pin" for t in our_threads())


@pytest.mark.parametrize("prefetch", [1, 3])
def test_node_with_prefetch_resumes_exactly_at_every_cut(memory_url: Any, prefetch: int) -> None:
    url, _ = memory_url()

    check_every_cut(lambda: build_stage(url, "device", batch_size=7, prefetch=prefetch))


def test_negative_prefetch_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        PinToDeviceNode(build_stage(url, "gather"), device="cpu", prefetch=-1)

"""PinToDeviceNode: a zero-copy CPU path everywhere, and the CUDA path where there is CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torchdata.nodes import Mapper

from insitubatch_nodes import (
    AsyncFetchNode,
    ChunkPermuteNode,
    GatherNode,
    Loader,
    PinToDeviceNode,
    ReadPlanNode,
    ShuffleBlockNode,
    StackChannelsNode,
    ZarrSource,
    build_loader,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.items import Batch
from insitubatch_nodes.nodes.pin_to_device import resolve_device
from tests.helpers.batches import batch_key
from tests.helpers.graphs import build_stage

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cpu_path_yields_tensors_equal_to_the_gathered_arrays(memory_url: Any) -> None:
    url, _ = memory_url()
    gathered = list(Loader(build_stage(url, "gather", batch_size=6)))
    moved = list(Loader(PinToDeviceNode(build_stage(url, "gather", batch_size=6), device="cpu")))
    assert len(gathered) == len(moved)
    for arrays, tensors in zip(gathered, moved, strict=True):
        assert set(arrays) == set(tensors)
        for name, array in arrays.items():
            assert isinstance(tensors[name], torch.Tensor)
            assert tensors[name].device.type == "cpu"
            assert np.array_equal(tensors[name].numpy(), array)


def test_auto_device_is_cpu_without_cuda() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(None).type == expected


@needs_cuda
def test_cuda_batches_match_the_cpu_batches(memory_url: Any) -> None:
    url, _ = memory_url()
    on_cpu = list(build_loader(url, split="all", batch_size=6, device="cpu"))
    on_gpu = list(build_loader(url, split="all", batch_size=6, device="cuda"))
    assert len(on_cpu) == len(on_gpu)
    for cpu_batch, gpu_batch in zip(on_cpu, on_gpu, strict=True):
        assert gpu_batch["sample_index"].device.type == "cpu"  # host metadata stays on host
        for name, tensor in gpu_batch.items():
            if name != "sample_index":
                assert tensor.device.type == "cuda"
            assert torch.equal(tensor.cpu(), cpu_batch[name])


@needs_cuda
def test_cuda_copy_is_ordered_before_work_on_the_consumer_stream(memory_url: Any) -> None:
    url, _ = memory_url()
    on_cpu = list(build_loader(url, split="all", batch_size=8, device="cpu"))
    loader = build_loader(url, split="all", batch_size=8, device="cuda")
    consumer = torch.cuda.Stream()
    doubled = []
    with torch.cuda.stream(consumer):
        for batch in loader:
            doubled.append(batch["t2m"] * 2)  # queued on the consumer stream, no sync
    torch.cuda.synchronize()
    assert len(doubled) == len(on_cpu)
    for got, cpu_batch in zip(doubled, on_cpu, strict=True):
        assert torch.equal(got.cpu(), cpu_batch["t2m"] * 2)


@needs_cuda
def test_cuda_staging_is_pinned_sized_once_and_reused(memory_url: Any) -> None:
    url, _ = memory_url()
    node = PinToDeviceNode(build_stage(url, "gather", batch_size=6), device="cuda", prefetch=2)
    batches = list(Loader(node))
    assert len(batches) > 3 * (node.prefetch + 1)  # the ring went round several times
    assert node.copier is not None
    assert node.copier.ring.slots == node.prefetch + 1
    assert node.copier.ring.stats.allocations == node.copier.ring.slots
    assert node.copier.ring.stats.held == 0
    assert node.copier.ring.stage({"x": ((1,), np.dtype(np.uint8))}).host.is_pinned()


@needs_cuda
def test_cuda_batches_are_right_when_the_consumer_stream_lags(memory_url: Any) -> None:
    """The consumer's stream is held up before each read while the node copies ahead and
    reuses its ring: without the event wait or record_stream, reads would see other data."""
    url, _ = memory_url()
    expected = list(Loader(build_stage(url, "gather", batch_size=4)))
    node = PinToDeviceNode(build_stage(url, "gather", batch_size=4), device="cuda", prefetch=2)
    consumer = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(consumer):
        for batch in Loader(node):
            torch.cuda._sleep(2_000_000)  # a long kernel ahead of the read, on the consumer
            sums.append(batch["t2m"].double().sum())
            del batch  # freed now: only record_stream keeps the memory from early reuse
    torch.cuda.synchronize()
    assert len(sums) == len(expected)
    for got, arrays in zip(sums, expected, strict=True):
        assert got.item() == float(arrays["t2m"].astype(np.float64).sum())


@needs_cuda
def test_cuda_resume_with_prefetch_is_exact(memory_url: Any) -> None:
    url, _ = memory_url()

    def make() -> Any:
        return build_stage(url, "device", batch_size=5, device="cuda", prefetch=3)

    epoch = [{k: v.cpu() for k, v in b.items()} for b in Loader(make())]
    for cut in (0, 1, len(epoch) // 2, len(epoch) - 1):
        loader = Loader(make())
        iterator = iter(loader)
        for _ in range(cut):
            next(iterator)
        state = loader.state_dict()
        del iterator, loader
        fresh = Loader(make())
        fresh.load_state_dict(state)
        rest = list(fresh)
        assert len(rest) == len(epoch) - cut
        for got, want in zip(rest, epoch[cut:], strict=True):
            for name, tensor in want.items():
                assert torch.equal(got[name].cpu(), tensor)


@needs_cuda
def test_build_loader_gathers_straight_into_the_pinned_ring(memory_url: Any) -> None:
    url, _ = memory_url()
    on_cpu = [batch_key(b) for b in build_loader(url, split="all", batch_size=6, device="cpu")]
    loader = build_loader(url, split="all", batch_size=6, device="cuda")
    assert [batch_key(b) for b in loader] == on_cpu
    node = loader.root
    assert isinstance(node, PinToDeviceNode) and node.copier is not None
    assert node.copier.packed == 0  # every batch was gathered in place, none copied over


def _composed_by_hand(
    url: str, *, device: str, pin_memory: bool, record: list[tuple[int, int]] | None = None
) -> tuple[GatherNode, PinToDeviceNode]:
    """The hand-built graph of Getting started: the builder's nodes, wired with nothing
    but their arguments. `record` gets the staging slot (address, bytes) of each batch the
    gather writes."""
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=0)
    plans = ReadPlanNode(units, source.geometry, block_chunks=2)
    draws = ShuffleBlockNode(AsyncFetchNode(plans, source.read_context()), batch_size=6)
    gathered = GatherNode(draws, pin_memory=pin_memory)

    def note_slot(batch: Batch) -> Batch:
        if record is not None and batch.staged is not None:
            record.append((batch.staged.host.data_ptr(), batch.staged.host.numel()))
        return batch

    return gathered, PinToDeviceNode(Mapper(gathered, note_slot), device=device)


def _built(url: str, device: str, **options: Any) -> Any:
    """The builder's loader with the hand-built graph's order (`ShuffleBlockNode`)."""
    return build_loader(
        url, split="all", batch_size=6, block_chunks=2, device=device, shuffle="block", **options
    )


def _node(loader: Any, kind: type) -> Any:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, kind))


def test_on_the_cpu_nothing_is_staged_and_a_hand_composed_graph_gives_the_builders_batches(
    memory_url: Any,
) -> None:
    """The CPU fallback: the builder stages nothing (a CPU batch is never copied), and the
    hand-built graph, which pins only where there is CUDA, gives exactly its batches."""
    url, _ = memory_url()
    built = _built(url, "cpu")
    expected = [batch_key(b) for b in built]
    assert _node(built, GatherNode).staging is None
    gathered, moved = _composed_by_hand(url, device="cpu", pin_memory=False)
    assert [batch_key(b) for b in Loader(moved)] == expected
    assert gathered.staging is None and moved.copier is None


def test_a_pinned_gather_on_the_cpu_fallback_hands_out_its_slots_and_never_overwrites_one(
    memory_url: Any,
) -> None:
    """`pin_memory=True` without CUDA: the same ring in plain memory. The gather writes
    each batch into the slot the batch carries, the CPU device node hands that memory out
    as it is (zero-copy), a loop that drops each batch lets the ring reuse its slots, and
    batches a caller keeps are left alone."""
    url, _ = memory_url()
    expected = [batch_key(b) for b in _built(url, "cpu")]
    slots: list[tuple[int, int]] = []
    gathered, moved = _composed_by_hand(url, device="cpu", pin_memory=True, record=slots)
    assert gathered.staging is not None
    got = []
    for i, batch in enumerate(Loader(moved)):
        start, nbytes = slots[i]
        for name, tensor in batch.items():
            if name != "sample_index":  # the tensor is the slot the gather wrote
                assert start <= tensor.data_ptr() < start + nbytes
        got.append(batch_key(batch))
        del batch
    assert got == expected and len(got) > 3 * gathered.staging.slots
    assert gathered.staging.stats.allocations == gathered.staging.slots
    assert gathered.staging.stats.held == 0
    kept = list(Loader(_composed_by_hand(url, device="cpu", pin_memory=True)[1]))
    assert [batch_key(b) for b in kept] == expected  # none written over while kept


@needs_cuda
def test_a_hand_composed_graph_stages_in_pinned_memory_as_the_builder_does(
    memory_url: Any,
) -> None:
    """The hand-built graph on CUDA: the gather writes every batch into its pinned ring and
    the device node copies each from there; no batch is packed, as in the builder's."""
    url, _ = memory_url()
    built = _built(url, "cuda")
    expected = [batch_key(b) for b in built]
    assert [batch_key(b) for b in _built(url, "cpu")] == expected
    assert _node(built, GatherNode).staging is not None
    assert _node(built, PinToDeviceNode).copier.packed == 0
    slots: list[tuple[int, int]] = []
    gathered, moved = _composed_by_hand(url, device="cuda", pin_memory=True, record=slots)
    assert [batch_key(b) for b in Loader(moved)] == expected
    assert moved.copier is not None and moved.copier.packed == 0
    assert moved.copier.ring.stats.allocations == 0  # the node's own ring was never needed
    assert gathered.staging is not None
    assert gathered.staging.stats.allocations == gathered.staging.slots
    assert len({start for start, _ in slots}) == gathered.staging.slots
    assert gathered.staging.stage({"x": ((1,), np.dtype(np.uint8))}).host.is_pinned()


@needs_cuda
def test_the_builder_stages_stacked_batches_in_the_stacking_node(memory_url: Any) -> None:
    url, _ = memory_url(
        {"a": ((40, 6, 8), (4, 3, 4), "float32"), "b": ((40, 2, 6, 8), (4, 2, 3, 4), "float32")}
    )
    on_cpu = [batch_key(b) for b in _built(url, "cpu", stack=True)]
    loader = _built(url, "cuda", stack=True)
    assert [batch_key(b) for b in loader] == on_cpu
    assert _node(loader, GatherNode).staging is None  # its batch is only read by the stack
    assert _node(loader, StackChannelsNode).staging is not None
    assert _node(loader, PinToDeviceNode).copier.packed == 0

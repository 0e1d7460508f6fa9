"""PinToDeviceNode: a zero-copy CPU path everywhere, and the CUDA path where there is CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from graphs import build_stage

from insitubatch_nodes import Loader, PinToDeviceNode, build_loader
from insitubatch_nodes.nodes.pin_to_device import resolve_device

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

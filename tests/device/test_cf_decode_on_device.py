"""CF decoding where the batches are tensors: blocks decoded on a device (`decode="gpu"`,
stood in for on the CPU by `decode_on=torch.device("cpu")`) and batches copied to a GPU.
Every batch equals what `xr.open_zarr` shows (NaN == NaN), within 1 ulp where a GPU
casts to float32."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import insitubatch_nodes as ib
from insitubatch_nodes import CFDecodeNode, Loader, StackChannelsNode, ZarrSource
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from tests.helpers.batches import as_numpy, batch_key
from tests.helpers.cf_stores import write_encoded
from tests.helpers.graphs import build_stage

xr = pytest.importorskip("xarray")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _shown(url: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(url)["v"].values


def _decoded_graph(url: str, stack: bool, **options: Any) -> Any:
    source = ZarrSource.open(url)
    node: Any = CFDecodeNode(build_stage(url, "gather", **options), source.decodings)
    if stack:
        decoded = {
            n: ib.VariableLayout(lay.shape, lay.chunks, source.decodings[n].decoded_dtype)
            for n, lay in source.layouts.items()
        }
        node = StackChannelsNode(node, decoded)
    return node


@pytest.mark.parametrize("stack", [False, True], ids=["fields", "stacked"])
def test_device_blocks_decode_to_the_host_batches(tmp_path: Path, stack: bool) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    expected = [batch_key(b) for b in Loader(_decoded_graph(url, stack))]
    batches = list(Loader(_decoded_graph(url, stack, decode_on=torch.device("cpu"))))
    assert [batch_key(b) for b in batches] == expected
    key = "fields" if stack else "v"
    shown = _shown(url)
    for batch in batches:
        assert isinstance(batch[key], torch.Tensor)
        values = as_numpy(batch[key])[:, 0] if stack else as_numpy(batch[key])
        assert np.array_equal(values, shown[as_numpy(batch[SAMPLE_INDEX_KEY])], equal_nan=True)


def _within_one_ulp(got: torch.Tensor, expected: np.ndarray) -> None:
    got_host = got.cpu().numpy()
    assert got_host.dtype == expected.dtype
    assert np.array_equal(np.isnan(got_host), np.isnan(expected))
    finite = ~np.isnan(expected)
    spacing = np.spacing(np.abs(expected[finite]))
    assert (np.abs(got_host[finite] - expected[finite]) <= spacing).all()


@needs_cuda
@pytest.mark.parametrize("stack", [False, True], ids=["fields", "stacked"])
@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_batches_on_a_gpu_are_what_xarray_shows(tmp_path: Path, stack: bool, dtype: Any) -> None:
    url = write_encoded(tmp_path / "s.zarr", "uint16_packed_fill", zarr_format=3)
    shown = _shown(url)
    loader = ib.build_loader(
        url, ["v"], "all", batch_size=5, device="cuda", stack=stack, dtype=dtype
    )
    for batch in loader:
        got = batch["fields"][:, 0] if stack else batch["v"]
        assert got.is_cuda
        expected = shown[as_numpy(batch[SAMPLE_INDEX_KEY])]
        _within_one_ulp(got, expected if dtype is None else expected.astype(np.float32))


@needs_cuda
@pytest.mark.parametrize("stack", [False, True], ids=["fields", "stacked"])
def test_gpu_decode_with_decoding_on_is_what_xarray_shows(tmp_path: Path, stack: bool) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    shown = _shown(url)
    loader = ib.build_loader(
        url, ["v"], "all", batch_size=5, device="cuda", decode="gpu", stack=stack
    )
    for batch in loader:
        got = batch["fields"][:, 0] if stack else batch["v"]
        _within_one_ulp(got, shown[as_numpy(batch[SAMPLE_INDEX_KEY])])

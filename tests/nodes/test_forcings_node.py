"""`ForcingsNode` built by hand: before the device copy (`device=None`) it yields the same
forcings as after it, as numpy arrays on the host in a `Batch` that says so, cropped at
each sample's `patch_origin` alike; its state is its source's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import xarray as xr
from torchdata.nodes import IterableWrapper

from insitubatch_nodes import ZarrSource
from insitubatch_nodes.builder.forcing_plan import plan_forcings
from insitubatch_nodes.core.forcing_names import FORCINGS
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.nodes.forcings import ForcingsNode
from insitubatch_nodes.nodes.items import Batch


def _store(tmp_path: Path) -> str:
    times = np.datetime64("2020-12-30T00", "ns") + np.arange(16) * np.timedelta64(3, "h")
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), np.zeros((16, 7, 10), np.float32))},
        coords={"time": times, "lat": np.linspace(-60, 60, 7), "lon": np.arange(-180, 180, 36.0)},
    )
    url = str(tmp_path / "s.zarr")
    ds.to_zarr(url, zarr_format=3, consolidated=False)
    return url


def test_before_the_copy_the_forcings_are_the_same_numbers_on_the_host(tmp_path: Path) -> None:
    opened = ZarrSource.open(_store(tmp_path), ["t2m"])
    names = tuple(FORCINGS)
    patches = PatchSpec((3, 4))
    plan = plan_forcings(names, opened, None, spatial_dims=2, patches=patches)
    assert plan is not None
    index = np.array([0, 5, 9, 15])
    origin = np.array([[0, 0], [4, 6], [2, 3], [1, 5]])
    host_batch = Batch({"sample_index": index, "patch_origin": origin})
    host = ForcingsNode(IterableWrapper([host_batch]), plan)
    device = ForcingsNode(
        IterableWrapper([{"sample_index": torch.from_numpy(index), "patch_origin": origin}]),
        plan,
        "cpu",
    )
    host.reset()
    device.reset()
    on_host, on_device = next(host), next(device)
    assert isinstance(on_host, Batch) and on_host.device is None
    for name in names:
        assert isinstance(on_host[name], np.ndarray), name
        assert on_host[name].shape == (4, 3, 4) and on_host[name].dtype == np.float32
        np.testing.assert_array_equal(on_host[name], on_device[name].numpy(), err_msg=name)
    whole = plan_forcings(names, opened, None, spatial_dims=2, patches=None)
    assert whole is not None
    full = ForcingsNode(IterableWrapper([{"sample_index": torch.from_numpy(index)}]), whole, "cpu")
    full.reset()
    uncropped = next(full)
    for row, (y, x) in enumerate(origin):
        for name in names:
            # the whole grid's sun is computed by rows and columns, a crop's point by
            # point: the same numbers within float32 rounding
            scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
            np.testing.assert_allclose(
                on_host[name][row],
                uncropped[name][row, y : y + 3, x : x + 4].numpy(),
                atol=5e-6 * scale,
                rtol=0,
            )


def test_torch_where_batches_go_to_an_accelerator_computes_what_numpy_does(
    tmp_path: Path,
) -> None:
    """The accelerator's path (torch on the batch's device), run here on the CPU, against
    the host's (numpy), patches cropped on both."""
    opened = ZarrSource.open(_store(tmp_path), ["t2m"])
    names = tuple(FORCINGS)
    plan = plan_forcings(names, opened, None, spatial_dims=2, patches=PatchSpec((3, 4)))
    assert plan is not None
    node = ForcingsNode(IterableWrapper([]), plan, "cpu")
    index = np.array([1, 4, 13])
    origin = np.array([[0, 6], [4, 0], [2, 2]])
    by_numpy = node.forcings_of(index, origin, None, tensors=False)
    by_torch = node.forcings_of(index, torch.from_numpy(origin), torch.device("cpu"), tensors=True)
    for name in names:
        assert by_torch[name].shape == (3, 3, 4) and by_torch[name].dtype == torch.float32
        scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
        np.testing.assert_allclose(
            by_torch[name].numpy(), by_numpy[name], atol=2e-6 * scale, err_msg=name
        )


def test_the_planned_bytes_hold_what_a_host_batch_makes(tmp_path: Path) -> None:
    """`ForcingPlan.sample_nbytes` bounds the memory a host batch's forcings hold (their
    compact arrays; views add nothing), with and without patches."""
    opened = ZarrSource.open(_store(tmp_path), ["t2m"])
    names = tuple(FORCINGS)
    index = np.array([1, 4, 13])
    for patches, origin in ((None, None), (PatchSpec((3, 4)), np.array([[0, 6], [4, 0], [2, 2]]))):
        plan = plan_forcings(names, opened, None, spatial_dims=2, patches=patches)
        assert plan is not None
        node = ForcingsNode(IterableWrapper([]), plan)
        made = node.forcings_of(index, origin, None, tensors=False)
        held = sum(_compact_nbytes(array) for array in made.values())
        assert held <= len(index) * plan.sample_nbytes()
        assert plan.resident_nbytes() >= plan.seconds.nbytes + 7 * 8 + 10 * 8


def _compact_nbytes(array: np.ndarray) -> int:
    """The bytes a view holds: its length along the axes it does not broadcast."""
    kept = [n for n, stride in zip(array.shape, array.strides, strict=True) if stride != 0]
    return int(np.prod(kept)) * array.itemsize


def test_the_host_reuses_the_memory_of_dropped_batches_forcings(tmp_path: Path) -> None:
    """A whole-grid forcing of a batch the consumer dropped lends its memory to the next
    batch's (fresh pages cost a first touch as large as the arithmetic); one still held
    never does, and the numbers are the same."""
    opened = ZarrSource.open(_store(tmp_path), ["t2m"])
    names = ("toa_incident_solar_radiation",)
    plan = plan_forcings(names, opened, None, spatial_dims=2, patches=None)
    assert plan is not None
    node = ForcingsNode(IterableWrapper([]), plan)
    index = np.array([1, 4, 13])
    first = node.forcings_of(index, None, None, tensors=False)[names[0]]
    second = node.forcings_of(index, None, None, tensors=False)[names[0]]
    assert node.reused_arrays == 0 and not np.shares_memory(first, second)  # both held
    expected = second.copy()
    del first, second
    third = node.forcings_of(index, None, None, tensors=False)[names[0]]
    assert node.reused_arrays == 1
    np.testing.assert_array_equal(third, expected)

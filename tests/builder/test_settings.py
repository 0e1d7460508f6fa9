"""Settings are plain data, checked where the user passes them: numpy scalars become Python
ints and bools; floats, strings, bools where an int is meant, sizes out of range, and
environment variables that are not ints are refused with the value and what is accepted;
so is a variable whose dtype torch cannot hold, when the loader is built."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import zarr

from insitubatch_nodes import (
    ChunkPermuteNode,
    PatchSpec,
    PinToDeviceNode,
    SampleSpec,
    ShuffleBlockNode,
    VariableGroup,
    ZarrSource,
    build_loader,
    leads,
    memory_store,
    window,
)
from insitubatch_nodes.builder.loader_settings import check_join_sources
from insitubatch_nodes.core.settings import int_from_environment
from tests.helpers.graphs import build_stage
from tests.helpers.paths import RECIPES

WHOLE = "pass a whole number (a Python or numpy integer)"

BAD_LOADER_SETTINGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"batch_size": 3.5}, TypeError, f"batch_size must be an int >= 1, got 3.5 (float); {WHOLE}"),
    ({"batch_size": "32"}, TypeError, f"batch_size must be an int >= 1, got '32' (str); {WHOLE}"),
    ({"batch_size": True}, TypeError, f"batch_size must be an int >= 1, got True (bool); {WHOLE}"),
    (
        {"batch_size": np.float32(8)},
        TypeError,
        f"batch_size must be an int >= 1, got np.float32(8.0) (float32); {WHOLE}",
    ),
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
    ({"seed": 1.5}, TypeError, f"seed must be an int >= 0, got 1.5 (float); {WHOLE}"),
    ({"seed": "0"}, TypeError, f"seed must be an int >= 0, got '0' (str); {WHOLE}"),
    ({"seed": None}, TypeError, f"seed must be an int >= 0, got None (NoneType); {WHOLE}"),
    ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
    (
        {"block_chunks": 2.0},
        TypeError,
        f"block_chunks must be an int >= 1, got 2.0 (float); {WHOLE}",
    ),
    ({"block_chunks": 0}, ValueError, "block_chunks must be >= 1, got 0"),
    (
        {"max_inflight": "64"},
        TypeError,
        f"max_inflight must be an int >= 1, got '64' (str); {WHOLE}",
    ),
    ({"prefetch_blocks": 0}, ValueError, "prefetch_blocks must be >= 1, got 0"),
    (
        {"prefetch_blocks": 1.5},
        TypeError,
        f"prefetch_blocks must be an int >= 1, got 1.5 (float); {WHOLE}",
    ),
    ({"decode_threads": 0}, ValueError, "decode_threads must be >= 1, got 0"),
    (
        {"memory_budget": 1e9},
        TypeError,
        f"memory_budget must be an int >= 1, got 1000000000.0 (float); {WHOLE}",
    ),
    ({"memory_budget": 0}, ValueError, "memory_budget must be >= 1, got 0"),
    ({"device_prefetch": -1}, ValueError, "device_prefetch must be >= 0, got -1"),
    (
        {"device_prefetch": 1.0},
        TypeError,
        f"device_prefetch must be an int >= 0, got 1.0 (float); {WHOLE}",
    ),
    ({"spatial_dims": -1}, ValueError, "spatial_dims must be >= 0, got -1"),
    (
        {"spatial_dims": 2.0},
        TypeError,
        f"spatial_dims must be an int >= 0, got 2.0 (float); {WHOLE}",
    ),
    ({"rank": 0.0, "world_size": 1}, TypeError, f"rank must be an int, got 0.0 (float); {WHOLE}"),
    (
        {"rank": 0, "world_size": "2"},
        TypeError,
        f"world_size must be an int, got '2' (str); {WHOLE}",
    ),
    (
        {"rank": False, "world_size": 1},
        TypeError,
        f"rank must be an int, got False (bool); {WHOLE}",
    ),
    ({"rank": 2, "world_size": 2}, ValueError, "rank must be in [0, 2), got 2"),
    ({"drop_last": "false"}, TypeError, "drop_last must be True or False, got 'false' (str)"),
    ({"drop_last": 1}, TypeError, "drop_last must be True or False, got 1 (int)"),
    ({"stack": "yes"}, TypeError, "stack must be True or False, got 'yes' (str)"),
    ({"read_across_epochs": 1}, TypeError, "read_across_epochs must be True or False, got 1 (int)"),
]


@pytest.mark.parametrize(
    ("option", "kind", "message"),
    BAD_LOADER_SETTINGS,
    ids=[f"{next(iter(o))}={list(o.values())[-1]!r}" for o, _, _ in BAD_LOADER_SETTINGS],
)
def test_a_bad_loader_setting_is_refused(
    memory_url: Any, option: dict[str, Any], kind: type[Exception], message: str
) -> None:
    url, _ = memory_url()
    with pytest.raises(kind) as raised:
        build_loader(url, device="cpu", **option)
    assert str(raised.value) == message


SPECS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: window(["t2m"], steps=2.0),
        TypeError,
        f"window steps must be an int >= 1, got 2.0 (float); {WHOLE}",
    ),
    (lambda: window(["t2m"], steps=2, stride=0), ValueError, "window stride must be >= 1, got 0"),
    (
        lambda: leads(["t2m"], [1.5]),
        TypeError,
        f"each entry of leads must be an int, got 1.5 (float); {WHOLE}",
    ),
    (lambda: leads(["t2m"], 1), TypeError, "leads must be a sequence of ints, got 1 (int)"),
    (
        lambda: leads(["t2m"], [0]),
        ValueError,
        "leads are steps after the anchor and must be >= 1, got [0]",
    ),
    (
        lambda: VariableGroup(("t2m",), (-0.5, 0)),
        TypeError,
        f"each entry of time offsets must be an int, got -0.5 (float); {WHOLE}",
    ),
    (
        lambda: PatchSpec((4.5, 8)),
        TypeError,
        f"each entry of patch size must be an int, got 4.5 (float); {WHOLE}",
    ),
    (lambda: PatchSpec(4), TypeError, "patch size must be a sequence of ints, got 4 (int)"),
    (lambda: PatchSpec((0, 8)), ValueError, "patch size must be positive lengths, got (0, 8)"),
]


@pytest.mark.parametrize(("make", "kind", "message"), SPECS, ids=[m for _, _, m in SPECS])
def test_a_bad_sample_spec_or_patch_is_refused(
    make: Callable[[], Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as raised:
        make()
    assert str(raised.value) == message


def test_bad_node_settings_are_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    source = ZarrSource.open(url)
    units = source.split_units("train")
    with pytest.raises(ValueError, match=r"^initial_epoch must be >= 0, got -1$"):
        ChunkPermuteNode(source.geometry, units, initial_epoch=-1)
    with pytest.raises(TypeError, match=r"^initial_epoch must be an int >= 0, got 1.5 \(float\)"):
        ChunkPermuteNode(source.geometry, units, initial_epoch=1.5)  # type: ignore[arg-type]
    gathered = build_stage(url, "gather")
    with pytest.raises(TypeError, match=r"^prefetch must be an int >= 0, got 1.5 \(float\)"):
        PinToDeviceNode(gathered, device="cpu", prefetch=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^background must be True or False, got 'yes' \(str\)$"):
        PinToDeviceNode(gathered, device="cpu", prefetch=1, background="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^fast_path must be True or False, got 0 \(int\)$"):
        build_stage(url, "fetch", fast_path=0)  # type: ignore[arg-type]


def test_numpy_scalars_become_python_ints_and_bools(memory_url: Any) -> None:
    url, _ = memory_url()
    source = ZarrSource.open(url)
    permute = ChunkPermuteNode(
        source.geometry,
        source.split_units("train"),
        seed=np.int64(3),
        rank=np.int32(0),
        world_size=np.uint8(1),
        initial_epoch=np.int16(2),
    )
    assert [type(v) for v in (permute.seed, permute.rank, permute.world_size)] == [int] * 3
    shuffle = ShuffleBlockNode(
        build_stage(url, "fetch"), batch_size=np.int64(4), drop_last=np.bool_(True)
    )
    assert type(shuffle.batch_size) is int and type(shuffle.drop_last) is bool
    spec = SampleSpec(
        {
            "inputs": window(["t2m"], steps=np.int64(3), stride=np.int32(2)),
            "targets": leads(["t2m"], np.array([1, 2])),
        }
    )
    offsets = [o for group in spec.groups.values() for o in group.offsets]
    assert offsets == [-4, -2, 0, 1, 2] and all(type(o) is int for o in offsets)
    patches = PatchSpec(np.array([2, 2]))
    assert patches.size == (2, 2) and all(type(s) is int for s in patches.size)
    assert json.loads(json.dumps([spec.to_json(), patches.to_json()]))
    loader = build_loader(url, split="all", spec=spec, patches=patches, batch_size=np.int64(4))
    assert next(iter(loader))["inputs/t2m"].shape == (4, 3, 2, 2)


# --- RANK, WORLD_SIZE and LOCAL_RANK


@pytest.mark.parametrize(("variable", "value"), [("RANK", "abc"), ("WORLD_SIZE", "2.0")])
def test_a_rank_variable_that_is_not_an_int_is_refused(
    memory_url: Any, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    url, _ = memory_url()
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as raised:
        build_loader(url)
    assert str(raised.value) == (
        f"the environment variable {variable} is {value!r}, which is not an int; set it to a "
        f"whole number (torchrun sets it for each process) or unset it"
    )


def test_rank_variables_that_are_ints_are_used(
    memory_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = memory_url()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    both = [build_loader(url, split="all", batch_size=4) for _ in range(2)]
    monkeypatch.setenv("RANK", "0")
    first = build_loader(url, split="all", batch_size=4)
    assert [b["sample_index"].tolist() for b in both[0]] != [
        b["sample_index"].tolist() for b in first
    ]
    assert int_from_environment({}, "LOCAL_RANK", 0) == 0
    assert int_from_environment({"LOCAL_RANK": "3"}, "LOCAL_RANK", 0) == 3


def test_the_recipes_refuse_a_world_size_that_is_not_an_int(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(RECIPES))
    monkeypatch.setenv("WORLD_SIZE", "two")
    train_loop = pytest.importorskip("train_loop")
    run = train_loop.distributed(argparse.Namespace(device="cpu"))
    with pytest.raises(ValueError, match=r"^the environment variable WORLD_SIZE is 'two'"):
        run.__enter__()


# --- Variables torch cannot hold


def _with_array(url: str, name: str, dtype: Any) -> None:
    group = zarr.open_group(memory_store(url.removeprefix("memory://")), mode="r+")
    group.create_array(name, shape=(88, 2), chunks=(2, 2), dtype=dtype)


@pytest.mark.parametrize(
    ("dtype", "shown"),
    [
        ("datetime64[ns]", "datetime64[ns]"),
        ("timedelta64[s]", "timedelta64[s]"),
        (str, "StringDType()"),
        ("<U3", "<U3"),
        ("S3", "|S3"),
    ],
    ids=["datetime64", "timedelta64", "vlen-str", "unicode", "bytes"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_variable_torch_cannot_hold_is_refused(memory_url: Any, dtype: Any, shown: str) -> None:
    url, _ = memory_url()
    _with_array(url, "when", dtype)
    expected = (
        f"variable 'when' has dtype {shown}, which torch cannot hold (it takes bool, "
        f"integers, floats and complex); leave it out with variables=[...], or cast it to a "
        f"numeric dtype in the store (e.g. dates as int64 seconds)"
    )
    for variables in (["t2m", "when"], None):  # named, or in the default selection
        with pytest.raises(TypeError) as raised:
            build_loader(url, variables)
        assert str(raised.value) == expected
    assert next(iter(build_loader(url, ["t2m", "u10"], batch_size=2)))["t2m"].shape[0] == 2


def test_a_one_dimensional_coordinate_torch_cannot_hold_is_not_selected(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    group = zarr.open_group(memory_store(url.removeprefix("memory://")), mode="r+")
    group.create_array("time", shape=(88,), chunks=(8,), dtype="datetime64[s]")
    assert sorted(ZarrSource.open(url).layouts) == ["t2m", "u10"]


def test_complex_variables_load(memory_url: Any) -> None:
    url, _ = memory_url()
    group = zarr.open_group(memory_store(url.removeprefix("memory://")), mode="r+")
    values = (np.arange(176) + 1j * np.arange(176)).astype("complex64").reshape(88, 2)
    group.create_array("wave", shape=(88, 2), chunks=(2, 2), dtype="complex64")[...] = values
    for batch in build_loader(url, ["wave"], split="all", batch_size=8, device="cpu"):
        index = batch["sample_index"].numpy()
        np.testing.assert_array_equal(batch["wave"].numpy(), values[index])


def test_a_join_is_refused_decoding_on_a_device() -> None:
    """A join's blocks are read store by store on the CPU; decoding on the GPU is refused
    by name (it needs no GPU to be refused: the device is only named)."""
    check_join_sources(["a.zarr", "b.zarr"], None)
    with pytest.raises(ValueError, match="decode='cuda' decodes chunks on the device"):
        check_join_sources(["a.zarr", "b.zarr"], torch.device("cuda"))

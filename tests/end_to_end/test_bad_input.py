"""Each wrong input a user can give gets an error that names it and says what to do."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr

from insitubatch_nodes import (
    PatchSpec,
    SampleSpec,
    ZarrSource,
    build_loader,
    compute_stats,
    leads,
    make_manifest,
    open_icechunk,
    window,
)
from insitubatch_nodes.loader.elastic_resume import find_node_state
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.state_checks import with_digest
from tests.helpers.area_stores import write_grid_store
from tests.helpers.cf_stores import write_attributes
from tests.helpers.joined_stores import LATITUDE, dates, pressure_levels, surface, write
from tests.helpers.paths import REPO
from tests.helpers.stores import write_store
from tests.helpers.time_stores import calendar_times, hourly, write_calendar


def test_unknown_variable(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError, match=r"unknown variable\(s\) \['z500'\].*\['t2m', 'u10'\]"):
        build_loader(url, ["t2m", "z500"])


def test_variables_with_different_sample_axes(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((20, 2), (2, 2), "float32"), "b": ((21, 1), (3, 1), "float32")})
    with pytest.raises(ValueError, match=r"same length along the sample axis.*a=20, b=21"):
        build_loader(url, ["a", "b"])
    with pytest.raises(ValueError, match=r"differ in length along axis 0.*variables=\["):
        build_loader(url)  # the default selection refuses to guess


def test_fractions_not_summing_to_one(memory_url: Any) -> None:
    url, _ = memory_url()
    geometry = ZarrSource.open(url).geometry
    with pytest.raises(ValueError, match="must sum to 1"):
        make_manifest(geometry, {"train": 0.7, "val": 0.1})


def test_an_empty_split(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((12, 2), (4, 2), "float32")})  # 3 units: no room for a test split
    with pytest.raises(ValueError, match="split 'test' is empty"):
        build_loader(url, split="test")
    with pytest.raises(ValueError, match="unknown split 'holdout'"):
        build_loader(url, split="holdout")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"block_chunks": 0}, "block_chunks must be >= 1"),
        ({"max_inflight": 0}, "max_inflight must be >= 1"),
        ({"rank": 2, "world_size": 2}, r"rank must be in \[0, 2\)"),
    ],
)
def test_bad_sizes(memory_url: Any, option: dict[str, int], message: str) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError, match=message):
        build_loader(url, **option)


def test_more_ranks_than_units(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((8, 1), (4, 1), "float32")})
    with pytest.raises(ValueError, match="fewer than world_size=3"):
        build_loader(url, split="all", rank=0, world_size=3)


def test_drop_last_with_no_full_batch(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((8, 1), (4, 1), "float32")})
    with pytest.raises(ValueError, match="leaves no full batch"):
        build_loader(url, split="all", batch_size=9, drop_last=True)


def test_more_ranks_than_units_in_evaluation(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((8, 1), (4, 1), "float32")})
    build_loader(url, split="all", rank=1, world_size=2, evaluation=True)  # a unit each
    with pytest.raises(
        ValueError,
        match=r"^the split has 2 chunk-aligned units, fewer than world_size=3: every rank needs "
        r"at least one; use fewer ranks or a larger split$",
    ):
        build_loader(url, split="all", rank=0, world_size=3, evaluation=True)


def test_drop_last_with_no_full_batch_on_the_smallest_rank(memory_url: Any) -> None:
    """5 units of 2 samples over 2 ranks: shares of 6 and 4. Refused on building, on the
    rank with the larger share too, naming the smallest share."""
    url, _ = memory_url({"a": ((10, 1), (2, 1), "float32")})
    settings: dict[str, Any] = {"split": "all", "world_size": 2, "drop_last": True}
    for rank in range(2):
        build_loader(url, rank=rank, batch_size=4, **settings)
        with pytest.raises(
            ValueError,
            match=r"^batch_size=5 with drop_last=True leaves no full batch: the smallest rank "
            r"holds 4 samples of split 'all'; lower batch_size or set drop_last=False$",
        ):
            build_loader(url, rank=rank, batch_size=5, **settings)


def test_a_manifest_from_another_store(memory_url: Any) -> None:
    url, _ = memory_url()
    other_url, _ = memory_url({"t2m": ((60, 3, 4), (3, 3, 2), "float32")})
    manifest = ZarrSource.open(other_url).manifest
    with pytest.raises(ValueError, match=r"does not match this store.*'t2m' is now shape=\(88"):
        build_loader(url, ["t2m"], manifest=manifest)


def test_manifest_round_trips_through_a_json_file(memory_url: Any, tmp_path: Path) -> None:
    url, _ = memory_url()
    path = tmp_path / "splits.json"
    path.write_text(
        make_manifest(ZarrSource.open(url).geometry, {"train": 0.5, "val": 0.5}).dumps()
    )
    first = [b["sample_index"].tolist() for b in build_loader(url, split="val", manifest=path)]
    second = [
        b["sample_index"].tolist() for b in build_loader(url, split="val", manifest=str(path))
    ]
    assert first == second and sum(len(b) for b in first) > 0


def test_unsupported_url_scheme() -> None:
    with pytest.raises(ValueError, match=r"unsupported URL scheme 'ftp'.*s3://"):
        build_loader("ftp://example.org/data.zarr")


def test_a_path_that_is_not_a_zarr_group(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not zarr")
    with pytest.raises(ValueError, match="is not a Zarr group"):
        build_loader(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        build_loader(str(tmp_path / "missing.zarr"))


def test_a_path_to_an_array_rather_than_a_group(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), dtype="float32")
    with pytest.raises(ValueError, match="is not a Zarr group"):
        build_loader(f"file://{tmp_path / 'a.zarr'}")


def test_unknown_memory_store() -> None:
    with pytest.raises(FileNotFoundError, match="no in-memory store named 'nope'"):
        build_loader("memory://nope")


def test_cuda_device_without_cuda(memory_url: Any) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error is for machines without it")
    url, _ = memory_url()
    with pytest.raises(ValueError, match="asks for CUDA"):
        build_loader(url, device="cuda")


def test_plain_path_and_file_url_read_the_same(tmp_path: Path) -> None:
    url, truth = write_store(tmp_path / "s.zarr")
    via_path = [b["sample_index"].tolist() for b in build_loader(str(tmp_path / "s.zarr"))]
    via_url = [b["sample_index"].tolist() for b in build_loader(url)]
    assert via_path == via_url
    assert np.asarray(truth["t2m"]).shape[0] == 88


# --- The "Bad input" table (docs/bad-input.md): every row is run here, and its error text must be
# exactly what the user gets ("…" stands for the parts that depend on paths and ports).


@dataclass
class Context:
    memory_url: Any
    tmp_path: Path
    s3: Any


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _s3_group(ctx: Context) -> str:
    url = f"s3://{ctx.s3.new_bucket()}/era5.zarr"
    write_store(ctx.s3.writable_store(url))
    return url


def _unsupported_scheme(ctx: Context) -> None:
    build_loader("ftp://host/era5.zarr")


def _missing_local_path(ctx: Context) -> None:
    build_loader(str(ctx.tmp_path / "missing.zarr"))


def _not_a_zarr_group(ctx: Context) -> None:
    (ctx.tmp_path / "notes.txt").write_text("not zarr")
    build_loader(str(ctx.tmp_path))


def _empty_bucket_prefix(ctx: Context) -> None:
    url = f"s3://{ctx.s3.new_bucket()}/nothing-here.zarr"
    build_loader(url, storage_options=ctx.s3.options())


def _missing_bucket(ctx: Context) -> None:
    build_loader("s3://no-such-bucket/era5.zarr", storage_options=ctx.s3.options())


def _unreachable_endpoint(ctx: Context) -> None:
    options = ctx.s3.options(endpoint=f"http://127.0.0.1:{_free_port()}")
    build_loader(f"s3://{ctx.s3.new_bucket()}/era5.zarr", storage_options=options)


def _missing_credentials(ctx: Context) -> None:
    options = ctx.s3.options(metadata_endpoint=f"http://127.0.0.1:{_free_port()}")
    del options["access_key_id"], options["secret_access_key"]
    build_loader(_s3_group(ctx), storage_options=options)


def _misspelled_option(ctx: Context) -> None:
    build_loader("s3://bucket/era5.zarr", storage_options={"acess_key_id": "AKIA..."})


def _wrong_variable(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, ["t2m", "z500"])


def _misaligned_arrays(ctx: Context) -> None:
    url, _ = ctx.memory_url(
        {"t2m": ((88, 3, 4), (3, 3, 2), "float32"), "tp": ((87, 3, 4), (3, 3, 2), "float32")}
    )
    build_loader(url, ["t2m", "tp"])


def _noleap_store(ctx: Context) -> str:
    times = calendar_times("noleap", "2014-12-20", 900)
    return write_calendar(ctx.tmp_path / "cmip6.zarr", times, zarr_format=3)


def _calendar_without_cftime(ctx: Context) -> None:
    url = _noleap_store(ctx)
    real_import = __import__

    def no_cftime(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cftime":
            raise ImportError("No module named 'cftime'")
        return real_import(name, *args, **kwargs)

    with mock.patch("builtins.__import__", no_cftime):
        build_loader(url, ["t2m"], splits={"train": "2015"})


def _date_outside_the_calendar(ctx: Context) -> None:
    build_loader(_noleap_store(ctx), ["t2m"], splits={"train": ("2015-02-29", "2015-12")})


def _era5_with_static_and_moved_fields(ctx: Context) -> str:
    """t2m (time, lat, lon), a land-sea mask (lat, lon), an orography on a coarser grid
    (lat2, lon2), tp (lat, time, lon): by to_zarr."""
    n = 88
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), np.zeros((n, 3, 4), np.float32)),
            "lsm": (("lat", "lon"), np.zeros((3, 4), np.float32)),
            "orog": (("lat2", "lon2"), np.zeros((2, 2), np.float32)),
            "tp": (("lat", "time", "lon"), np.zeros((3, n, 4), np.float32)),
        },
        coords={"time": hourly("2015-01-01", n), "lat": np.arange(3.0), "lon": np.arange(4.0)},
    )
    path = str(ctx.tmp_path / "era5.zarr")
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return path


def _static_on_another_grid(ctx: Context) -> None:
    build_loader(_era5_with_static_and_moved_fields(ctx), ["t2m", "orog"])


def _only_static_fields(ctx: Context) -> None:
    build_loader(_era5_with_static_and_moved_fields(ctx), ["lsm"])


def _spec_group_of_statics_only(ctx: Context) -> None:
    spec = SampleSpec({"inputs": window(["t2m"], 2), "consts": window(["lsm"], 1)})
    build_loader(_era5_with_static_and_moved_fields(ctx), spec=spec)


def _static_beside_a_field_naming_no_dimensions(ctx: Context) -> None:
    path = _era5_with_static_and_moved_fields(ctx)
    root = zarr.open_group(path, mode="a")
    root.create_array("plain", shape=(88, 3, 4), chunks=(8, 3, 4), dtype="f4")[...] = 0
    build_loader(path, ["plain", "lsm"])


def _static_named_sample_index(ctx: Context) -> None:
    path = _era5_with_static_and_moved_fields(ctx)
    root = zarr.open_group(path, mode="a")
    static = root.create_array(
        "sample_index", shape=(3, 4), chunks=(3, 4), dtype="f4", dimension_names=["lat", "lon"]
    )
    static[...] = 0
    build_loader(path, ["t2m", "sample_index"])


def _time_not_first(ctx: Context) -> None:
    build_loader(_era5_with_static_and_moved_fields(ctx), ["t2m", "tp"])


def _manifest_from_another_store(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    other, _ = ctx.memory_url({"t2m": ((60, 3, 4), (3, 3, 2), "float32")})
    build_loader(url, ["t2m"], manifest=ZarrSource.open(other).manifest)


def _store_changed_since_the_manifest(ctx: Context) -> None:
    path = ctx.tmp_path / "era5.zarr"
    url, _ = write_store(path)
    manifest = ZarrSource.open(url).manifest
    zarr.open_group(str(path), mode="r+")["t2m"].resize((96, 3, 4))  # new days appended
    build_loader(url, ["t2m"], manifest=manifest)


def _unknown_icechunk_tag(ctx: Context) -> None:
    import icechunk

    path = ctx.tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    zarr.open_group(session.store, mode="w").create_array("t2m", shape=(4, 2), dtype="f4")
    session.commit("first")
    open_icechunk(path, tag="v9")


def _overlapping_splits(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    manifest = ZarrSource.open(url).manifest.to_json()
    manifest["splits"] = {"train": [[0, 12]], "val": [[10, 15]]}
    build_loader(url, manifest=manifest)


def _manifest_range_past_the_end(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    manifest = ZarrSource.open(url).manifest.to_json()
    manifest["splits"] = {"train": [[0, 20]]}
    build_loader(url, manifest=manifest)


def _manifest_file_not_json(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    lines = ZarrSource.open(url).manifest.dumps().splitlines()
    lines[2] = lines[2].rstrip(",")  # a comma lost in a hand edit
    path = ctx.tmp_path / "splits.json"
    path.write_text("\n".join(lines))
    build_loader(url, manifest=path)


def _missing_manifest_file(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, manifest=str(ctx.tmp_path / "splits.json"))


def _manifest_of_the_wrong_type(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, manifest=[[0, 12]])  # type: ignore[arg-type]


def _state_from_another_store(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    other, _ = ctx.memory_url({"t2m": ((96, 3, 4), (3, 3, 2), "float32")})
    saved = build_loader(url, ["t2m"])
    next(iter(saved))
    loader = build_loader(other, ["t2m"])
    loader.load_state_dict(saved.state_dict())
    next(iter(loader))


def _state_from_a_graph_with_a_stage_more(ctx: Context) -> None:
    url, _ = ctx.memory_url({"t2m": ((88, 3, 4), (3, 3, 2), "float32")})
    saved = build_loader(url, stack=True)
    next(iter(saved))
    loader = build_loader(url)
    loader.load_state_dict(saved.state_dict())
    next(iter(loader))


def _state_cursor_out_of_range(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    loader = build_loader(url, device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    state["root"]["source"]["source"]["samples_yielded"] = 1000000  # the ShuffleBlockNode's
    loader.load_state_dict(state)
    next(iter(loader))


def _state_edited_by_hand(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    loader = build_loader(url, device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    shuffle = state["root"]["source"]["source"]  # the ShuffleBlockNode's
    assert shuffle["samples_yielded"] == 32
    shuffle["samples_yielded"] = 24  # in range: 8 samples would be drawn twice
    loader.load_state_dict(state)
    next(iter(loader))


def _state_not_a_dict(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url).load_state_dict([0, 1])  # type: ignore[arg-type]


def _training_state_in_an_evaluation_loader(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    training = build_loader(url, split="all")
    next(iter(training))
    loader = build_loader(url, split="all", evaluation=True)
    loader.load_state_dict(training.state_dict())
    next(iter(loader))


def _another_ranks_state(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    rank_0 = build_loader(url, split="all", rank=0, world_size=2)
    next(iter(rank_0))
    rank_1 = build_loader(url, split="all", rank=1, world_size=2)
    rank_1.load_state_dict(rank_0.state_dict())
    next(iter(rank_1))


def _state_of_a_later_deal(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    loader = build_loader(url, split="all")
    state = json.loads(json.dumps(loader.state_dict()))
    permute = find_node_state(state, ChunkPermuteNode.STATE_NAME)
    assert permute is not None
    permute["config"]["deal_version"] = 3
    loader.load_state_dict(with_digest({k: v for k, v in state.items() if k != "digest"}))
    next(iter(loader))


def _block_shuffle_states_on_fewer_ranks(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    states = [
        build_loader(url, split="all", rank=r, world_size=2, shuffle="block").state_dict()
        for r in range(2)
    ]
    build_loader(url, split="all", shuffle="block").load_state_dict({"rank_states": states})


def _evaluation_with_drop_last(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, split="val", evaluation=True, drop_last=True)


def _skip_first_batches(ctx: Context) -> None:
    from accelerate import Accelerator

    url, _ = ctx.memory_url()
    Accelerator(cpu=True).skip_first_batches(build_loader(url), 3)


def _batch_size_not_an_int(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, batch_size=32.0)  # type: ignore[arg-type]


def _seed_not_an_int(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, seed="42")  # type: ignore[arg-type]


def _rank_not_an_int(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    with mock.patch.dict(os.environ, {"RANK": "abc"}):
        build_loader(url)


def _dtype_torch_cannot_hold(ctx: Context) -> None:
    url, _ = ctx.memory_url(extra_arrays={"when": np.zeros((88, 2), dtype="datetime64[ns]")})
    build_loader(url, ["t2m", "when"])


def _chunk_cut_short(ctx: Context) -> None:
    url, _ = write_store(ctx.tmp_path / "era5.zarr")
    chunk = ctx.tmp_path / "era5.zarr" / "t2m" / "c" / "2" / "0" / "0"
    one_step = np.zeros((1, 3, 2), dtype="float32")  # of the chunk's 3 steps
    chunk.write_bytes(bytes(numcodecs.Zstd().encode(one_step)))
    list(build_loader(url, split="all"))


def _dtype_edited_in_the_metadata(ctx: Context) -> None:
    url, _ = write_store(ctx.tmp_path / "era5.zarr")
    metadata_file = ctx.tmp_path / "era5.zarr" / "t2m" / "zarr.json"
    metadata = json.loads(metadata_file.read_text())
    metadata["data_type"] = "float64"
    metadata_file.write_text(json.dumps(metadata))
    list(build_loader(url, ["t2m"], split="all"))


def _metadata_not_json(ctx: Context) -> None:
    url, _ = write_store(ctx.tmp_path / "era5.zarr")
    metadata_file = ctx.tmp_path / "era5.zarr" / "t2m" / "zarr.json"
    metadata_file.write_text(metadata_file.read_text().replace('"shape"', '"shape",', 1))
    build_loader(url)


def _shard_index_past_its_shard(ctx: Context) -> None:
    path = ctx.tmp_path / "sharded.zarr"
    sharding = zarr.codecs.ShardingCodec(
        chunk_shape=(2, 4), index_codecs=[zarr.codecs.BytesCodec()]
    )
    zarr.open_group(str(path), mode="w").create_array(
        "x", shape=(16, 4), chunks=(8, 4), dtype="float32", serializer=sharding, compressors=None
    )[...] = 1.0
    shard = path / "x" / "c" / "0" / "0"
    stored = bytearray(shard.read_bytes())
    stored[-16:-8] = struct.pack("<Q", len(stored) + 100)  # the last entry's offset
    shard.write_bytes(bytes(stored))
    list(build_loader(str(path), split="all"))


def _credentials_in_a_url(ctx: Context) -> None:
    url = "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@no-such-bucket/era5.zarr"
    build_loader(url, storage_options=ctx.s3.options())


def _signed_url_with_no_group(ctx: Context) -> None:
    host = ctx.s3.endpoint.removeprefix("http://")
    url = (
        f"http://{host}/{ctx.s3.new_bucket()}/nothing-here.zarr"
        f"?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE&X-Amz-Signature=0a1b2c3d4e5f"
    )
    build_loader(url, storage_options={"client_options": {"allow_http": True}})


def _unreachable_url_with_a_password(ctx: Context) -> None:
    url = f"http://reader:hunter2-s3cret@127.0.0.1:{_free_port()}/era5.zarr?sig=c2lnbmF0dXJl"
    options = {"client_options": {"allow_http": True}, "retry_config": {"max_retries": 0}}
    build_loader(url, storage_options=options)


def _cf_store(ctx: Context, attributes: dict[str, Any], dtype: str = "int16") -> str:
    """A store whose array `t2m` holds packed values with `attributes`."""
    stored = (np.arange(24 * 6) % 50).astype(dtype).reshape(24, 2, 3)
    return write_attributes(
        ctx.tmp_path / "era5.zarr", stored, attributes, zarr_format=3, fill_value=0, name="t2m"
    )


def _state_saved_on_stored_values(ctx: Context) -> None:
    url = _cf_store(ctx, {"_FillValue": -32767, "scale_factor": 0.01, "add_offset": 273.15})
    before = build_loader(url, ["t2m"], batch_size=4, decode_cf=False, device="cpu")
    next(iter(before))
    loader = build_loader(url, ["t2m"], batch_size=4, device="cpu")
    loader.load_state_dict(before.state_dict())
    next(iter(loader))


def _stats_of_stored_values(ctx: Context) -> None:
    url = _cf_store(ctx, {"_FillValue": -32767, "scale_factor": 0.01, "add_offset": 273.15})
    stats = compute_stats(url, ["t2m"], decode_cf=False)
    build_loader(url, ["t2m"], normalise=stats)


def _cast_to_integers(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, dtype="int32")


def _fill_nan_without_normalise(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, fill_nan=0.0)


def _scale_factor_as_text(ctx: Context) -> None:
    url = _cf_store(ctx, {"scale_factor": "0.01"})
    build_loader(url, ["t2m"])


def _masked_integers(ctx: Context) -> None:
    url = _cf_store(ctx, {"_FillValue": -32767, "scale_factor": 2})
    build_loader(url, ["t2m"])


def _variable_shown_as_dates(ctx: Context) -> None:
    url = _cf_store(ctx, {"units": "hours since 2000-01-01", "calendar": "standard"}, "int64")
    build_loader(url, ["t2m"])


def _unknown_forcing(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, forcings=["zenith"])


def _forcing_without_coordinates(ctx: Context) -> None:
    n = 88
    ds = xr.Dataset(
        {"t2m": (("time", "y", "x"), np.zeros((n, 3, 4), np.float32))},
        coords={"time": hourly("2015-01-01", n)},
    )
    path = str(ctx.tmp_path / "era5.zarr")
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    build_loader(path, ["t2m"], forcings=["cos_latitude"])


def _sun_on_a_models_calendar(ctx: Context) -> None:
    build_loader(
        _noleap_store(ctx), ["t2m"], forcings=["cos_solar_zenith_angle", "year_progress_sin"]
    )


def _forcings_by_group_without_a_spec(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    build_loader(url, forcings={"inputs": ["cos_latitude"]})


def _forcings_of_a_group_the_spec_lacks(ctx: Context) -> None:
    url, _ = ctx.memory_url()
    spec = SampleSpec({"inputs": window(["t2m"], 2), "targets": leads(["t2m"], [1])})
    build_loader(url, spec=spec, forcings={"input": ["year_progress_sin"]})


def _grid_store(ctx: Context) -> str:
    """A 10-degree global grid, latitudes 90 .. -90, longitudes 0 .. 350."""
    return write_grid_store(
        ctx.tmp_path / "era5.zarr", zarr_format=3, descending=True, signed=False
    )


def _area_north_of_south(ctx: Context) -> None:
    build_loader(_grid_store(ctx), area=(20, 0, 60, 30))


def _area_of_no_grid_point(ctx: Context) -> None:
    build_loader(_grid_store(ctx), area=(60, 1, 20, 9))


def _patches_larger_than_the_area(ctx: Context) -> None:
    build_loader(_grid_store(ctx), ["t2m"], area=(60, -30, 20, 40), patches=PatchSpec((8, 8)))


def _area_without_coordinates(ctx: Context) -> None:
    path = str(ctx.tmp_path / "xy.zarr")
    xr.Dataset(
        {"v": (("time", "y", "x"), np.zeros((8, 3, 4), np.float32))},
        coords={"time": np.arange(8)},
    ).to_zarr(path, consolidated=False)
    build_loader(path, ["v"], area=(60, -30, 20, 40))


def _area_on_a_curvilinear_grid(ctx: Context) -> None:
    path = str(ctx.tmp_path / "hrrr.zarr")
    plane = np.zeros((3, 4))
    xr.Dataset(
        {"v": (("time", "y", "x"), np.zeros((8, 3, 4), np.float32))},
        coords={
            "time": np.arange(8),
            "latitude": (("y", "x"), plane),
            "longitude": (("y", "x"), plane),
        },
    ).to_zarr(path, consolidated=False)
    build_loader(path, ["v"], area=(60, -30, 20, 40))


def _joined_stores(ctx: Context, first: int = 0) -> list[str]:
    """A pressure-level and a surface store, 30 six-hourly steps each, the surface
    store's from step `first`."""
    pl = write(pressure_levels(dates(0, 30)), ctx.tmp_path / "pl.zarr", 24, 3)
    sfc = write(surface(dates(first, 30)), ctx.tmp_path / "sfc.zarr", 1, 3)
    return [pl, sfc]


def _a_name_in_two_joined_stores(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    again = write(pressure_levels(dates(0, 30), seed=9), ctx.tmp_path / "again.zarr", 24, 3)
    build_loader([pl, again])


def _joined_dates_that_differ(ctx: Context) -> None:
    build_loader(_joined_stores(ctx, first=2))


def _joined_grids_that_differ(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    shifted = LATITUDE + np.array([0, 0, 0.01, 0, 0])
    other = write(surface(dates(0, 30), latitude=shifted), ctx.tmp_path / "other.zarr", 1, 3)
    build_loader([pl, other])


def _storage_options_not_one_per_store(ctx: Context) -> None:
    build_loader(_joined_stores(ctx), storage_options=[{}])


def _unknown_join(ctx: Context) -> None:
    build_loader(_joined_stores(ctx), join="outer")


def _datasets_beside_urls(ctx: Context) -> None:
    pl, sfc = _joined_stores(ctx)
    build_loader([xr.open_zarr(pl)[["t"]], sfc])


def _joined_datasets_whose_dates_differ(ctx: Context) -> None:
    pl, sfc = _joined_stores(ctx)
    times = dates(0, 30)
    build_loader([xr.open_zarr(pl).sel(time=slice(times[4], None))[["t"]], xr.open_zarr(sfc)])


def _joined_datasets_cropped_differently(ctx: Context) -> None:
    pl, sfc = _joined_stores(ctx)
    build_loader(
        [
            xr.open_zarr(pl).isel(latitude=slice(0, 3))[["t"]],
            xr.open_zarr(sfc).isel(latitude=slice(1, 4))[["msl"]],
        ]
    )


def _a_strided_dataset_in_a_join(ctx: Context) -> None:
    pl, sfc = _joined_stores(ctx)
    build_loader([xr.open_zarr(pl).isel(time=slice(0, 30, 2))[["t"]], xr.open_zarr(sfc)])


def _joined_datasets_whose_levels_differ(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    ds = xr.open_zarr(pl)
    build_loader([ds.sel(level=[500, 850])[["t"]], ds.sel(level=[850, 1000])[["z"]]])


def _joined_datasets_that_share_no_level(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    ds = xr.open_zarr(pl)
    build_loader([ds.sel(level=[500])[["t"]], ds.sel(level=[1000])[["z"]]], join="inner")


def _joined_stores_whose_levels_differ(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    other = pressure_levels(dates(0, 30))[["z"]].rename(z="q")
    other = other.assign_coords(level=[850, 500, 250])
    build_loader([pl, write(other, ctx.tmp_path / "q.zarr", 24, 3)], ["t", "q"])


def _a_variable_in_two_joined_datasets(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    ds = xr.open_zarr(pl)
    build_loader([ds[["t"]], ds[["t", "z"]]])


def _datasets_of_one_store_with_other_options(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    ds = xr.open_zarr(pl)
    build_loader([ds[["t"]], ds[["z"]]], storage_options=[None, {"mkdir": False}])


def _a_joined_store_without_dates(ctx: Context) -> None:
    pl, _ = _joined_stores(ctx)
    steps = surface(dates(0, 30)).drop_vars("time").rename(time="step")
    step = write(steps, ctx.tmp_path / "step.zarr", 1, 3)
    build_loader([pl, step], ["t", "t2m"])


def _state_of_a_join_cut_at_another_phase(ctx: Context) -> None:
    """A state of a misaligned inner join (the pressure store 8 steps early) as a release
    that cut its units from step 0 saved it: no phase in its fingerprint."""
    pl = write(pressure_levels(dates(0, 200)), ctx.tmp_path / "pl.zarr", 24, 3)
    sfc = write(surface(dates(8, 192)), ctx.tmp_path / "sfc.zarr", 1, 3)
    loader = build_loader([pl, sfc], join="inner", split="all")
    state = json.loads(json.dumps(loader.state_dict()))
    permute = find_node_state(state, ChunkPermuteNode.STATE_NAME)
    assert permute is not None
    del permute["fingerprint"]["split"]["phase"]
    loader.load_state_dict(with_digest({k: v for k, v in state.items() if k != "digest"}))
    next(iter(loader))


CASES = {
    "a URL with a scheme we do not read": _unsupported_scheme,
    "a local path that does not exist": _missing_local_path,
    "a directory that is not a Zarr group": _not_a_zarr_group,
    "a bucket prefix with no Zarr group": _empty_bucket_prefix,
    "a bucket that does not exist": _missing_bucket,
    "an endpoint that does not answer": _unreachable_endpoint,
    "no credentials": _missing_credentials,
    "a misspelled storage option": _misspelled_option,
    "a variable the store does not have": _wrong_variable,
    "variables of different lengths": _misaligned_arrays,
    "a calendar's dates without cftime": _calendar_without_cftime,
    "a date the store's calendar does not have": _date_outside_the_calendar,
    "a static field on another grid": _static_on_another_grid,
    "only static fields": _only_static_fields,
    "a sample spec group of static fields only": _spec_group_of_statics_only,
    "a static field beside a variable that names no dimensions": (
        _static_beside_a_field_naming_no_dimensions
    ),
    "a static field named sample_index": _static_named_sample_index,
    "a variable whose time dimension is not its first": _time_not_first,
    "a manifest made for another store": _manifest_from_another_store,
    "a store changed since its manifest was made": _store_changed_since_the_manifest,
    "an Icechunk tag that does not exist": _unknown_icechunk_tag,
    "a manifest whose splits overlap": _overlapping_splits,
    "a manifest range past the store's end": _manifest_range_past_the_end,
    "a manifest file that is not valid JSON": _manifest_file_not_json,
    "a manifest file that does not exist": _missing_manifest_file,
    "a manifest of another type": _manifest_of_the_wrong_type,
    "a loader state saved on another store": _state_from_another_store,
    "a loader state from a graph with a stage more or less": _state_from_a_graph_with_a_stage_more,
    "a loader state with a cursor out of range": _state_cursor_out_of_range,
    "a loader state edited by hand": _state_edited_by_hand,
    "a loader state that is not a dict": _state_not_a_dict,
    "a training state in an evaluation loader": _training_state_in_an_evaluation_loader,
    "another rank's state": _another_ranks_state,
    "a loader state from a release with a later deal": _state_of_a_later_deal,
    "a block-shuffle state of every rank, on fewer ranks": _block_shuffle_states_on_fewer_ranks,
    "drop_last in an evaluation loader": _evaluation_with_drop_last,
    "accelerate's skip_first_batches on the loader": _skip_first_batches,
    "a batch_size that is not an int": _batch_size_not_an_int,
    "a seed that is not an int": _seed_not_an_int,
    "a RANK that is not an int": _rank_not_an_int,
    "a variable whose dtype torch cannot hold": _dtype_torch_cannot_hold,
    "a chunk cut short in the store": _chunk_cut_short,
    "a dtype edited in an array's metadata": _dtype_edited_in_the_metadata,
    "an array's metadata file that is not valid JSON": _metadata_not_json,
    "a shard index that points past its shard": _shard_index_past_its_shard,
    "a URL with credentials in it": _credentials_in_a_url,
    "a signed URL with no Zarr group": _signed_url_with_no_group,
    "a URL with a password whose server does not answer": _unreachable_url_with_a_password,
    "a loader state saved on stored values, loaded where values are decoded": (
        _state_saved_on_stored_values
    ),
    "statistics of other values than the batches": _stats_of_stored_values,
    "a dtype to cast batches to that is not a float": _cast_to_integers,
    "fill_nan without normalise": _fill_nan_without_normalise,
    "a packing attribute that is not a number": _scale_factor_as_text,
    "masked values whose packing keeps integers": _masked_integers,
    "a variable xarray shows as dates": _variable_shown_as_dates,
    "a forcing the loader does not compute": _unknown_forcing,
    "a forcing of the place on a grid without coordinates": _forcing_without_coordinates,
    "the sun on a model's calendar": _sun_on_a_models_calendar,
    "forcings by group without a spec": _forcings_by_group_without_a_spec,
    "forcings for a group the spec does not have": _forcings_of_a_group_the_spec_lacks,
    "an area whose north lies south of its south": _area_north_of_south,
    "an area that holds no grid point": _area_of_no_grid_point,
    "patches larger than the area": _patches_larger_than_the_area,
    "an area on a store without latitude and longitude": _area_without_coordinates,
    "an area on a curvilinear grid": _area_on_a_curvilinear_grid,
    "a variable in two joined stores": _a_name_in_two_joined_stores,
    "joined stores whose dates differ": _joined_dates_that_differ,
    "joined stores on different grids": _joined_grids_that_differ,
    "storage_options that are not one per joined store": _storage_options_not_one_per_store,
    "a join the loader does not know": _unknown_join,
    "xarray Datasets beside URLs in a join": _datasets_beside_urls,
    "joined Datasets whose dates differ": _joined_datasets_whose_dates_differ,
    "joined Datasets cropped differently": _joined_datasets_cropped_differently,
    "a strided Dataset in a join": _a_strided_dataset_in_a_join,
    "joined Datasets whose levels differ": _joined_datasets_whose_levels_differ,
    "joined Datasets that share no level": _joined_datasets_that_share_no_level,
    "joined stores whose levels differ": _joined_stores_whose_levels_differ,
    "a variable in two joined Datasets": _a_variable_in_two_joined_datasets,
    "one store's Datasets with other storage_options": _datasets_of_one_store_with_other_options,
    "a joined store without dates": _a_joined_store_without_dates,
    "a state of a join whose units started elsewhere": _state_of_a_join_cut_at_another_phase,
}


BAD_INPUT = REPO / "docs" / "bad-input.md"


def _table_rows() -> dict[str, str]:
    """{what you pass: the error text} from the "Bad input" page's table."""
    page = BAD_INPUT.read_text()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("You pass", "") and not cells[0].startswith("-"):
            rows[cells[0]] = cells[2].strip("`").strip()
    return rows


def test_every_table_row_is_a_case_and_every_case_a_row() -> None:
    assert list(_table_rows()) == list(CASES)


@pytest.mark.parametrize(("row", "expected"), list(_table_rows().items()), ids=list(_table_rows()))
def test_bad_input_row(
    row: str,
    expected: str,
    memory_url: Any,
    tmp_path: Path,
    s3_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)  # credentials must come from storage_options only
    kind, _, text = expected.partition(": ")
    pattern = ".*".join(re.escape(part) for part in text.split("…"))
    with pytest.raises(Exception) as raised:
        CASES[row](Context(memory_url, tmp_path, s3_server))
    assert type(raised.value).__name__ == kind, str(raised.value)
    assert re.fullmatch(pattern, str(raised.value), flags=re.S), str(raised.value)

"""`insitubatch inspect` run as users run it (the CLI's `main`, and once the installed
script) on stores written by zarr-python: the synthetic ERA5 look-alike, a sharded Zarr
v3 array, a store in the S3 server, and groups with a CF time coordinate. Values are
checked against the files themselves and against what `build_loader` picks."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from inspect import signature as inspect_signature
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import insitubatch_nodes as ib
from insitubatch_nodes import AsyncFetchNode, ReadPlanNode, ZarrSource, build_loader, make_manifest
from insitubatch_nodes.builder.loader_plan import plan_loader
from insitubatch_nodes.builder.loader_settings import check_settings
from insitubatch_nodes.builder.split_anchors import split_anchors
from insitubatch_nodes.cli.main import main
from insitubatch_nodes.cli.report_text import format_report
from insitubatch_nodes.cli.store_report import inspect_store
from insitubatch_nodes.cli.synthetic import WB2_STATICS, write_era5_like, write_weatherbench2_like
from insitubatch_nodes.core import pool_ramp
from insitubatch_nodes.core.byte_sizes import nbytes_text, parse_nbytes, size_argument
from insitubatch_nodes.core.cf_time import cf_reference, decode_cf_times
from insitubatch_nodes.core.forcings import IDLE_BATCHES
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import POOL_RAMP
from insitubatch_nodes.core.quality import uniform_distinct_units
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from tests.helpers.area_stores import write_grid_store
from tests.helpers.pool_cursors import distinct_units, filling_batches, first_wait
from tests.helpers.s3_server import ACCESS_KEY, S3Server
from tests.helpers.time_stores import hourly, write_xarray

GRID = (16, 32)
STEPS = 96
STEPS_PER_CHUNK = 2
SECRET = "inspect-Secret-9f3kQ"  # a value no report could contain by chance
ZSTD_V2 = numcodecs.Zstd()


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = inspect(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line an error prints, after checking it is only that (exit status 2)."""
    code, out, err = inspect(capsys, *args)
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def era5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_era5_like(
        tmp_path_factory.mktemp("inspect") / "era5.zarr",
        time_steps=STEPS,
        steps_per_chunk=STEPS_PER_CHUNK,
        grid=GRID,
    )


def stored_sizes(array_dir: Path) -> list[int]:
    return [f.stat().st_size for f in (array_dir / "c").rglob("*") if f.is_file()]


def built_settings(url: str, **settings: Any) -> dict[str, Any]:
    """What a loader built with `settings` actually chose."""
    loader = build_loader(url, split="all", device="cpu", **settings)
    nodes = graph_nodes(loader.root)
    fetch = next(n for n in nodes if isinstance(n, AsyncFetchNode))
    plan = next(n for n in nodes if isinstance(n, ReadPlanNode))
    pools = [n.pool_size for n in nodes if isinstance(n, PoolShuffleNode)]
    context = fetch.context
    return {
        "block_chunks": plan.block_chunks,
        "read_ahead_bytes": fetch.memory_budget,
        "inflight_bytes": context.inflight.max_bytes,
        "blocks_alive_bytes": context.block_slots.capacity_bytes,
        "decode_threads": context.decode_threads,
        "pool_size": pools[0] if pools else None,
    }


def logged_budget(caplog: pytest.LogCaptureFixture) -> int:
    """The memory budget the last loader built logged it chose (`memory_budget=N (why)`)."""
    logged = [r.getMessage() for r in caplog.records if r.name == "insitubatch_nodes.builder"]
    found = re.search(r"memory_budget=(\d+) \(", logged[-1])
    assert found is not None, logged[-1]
    return int(found[1])


def test_the_synthetic_store_in_text(era5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = inspect(capsys, str(era5), "--device", "cpu")
    assert code == 0 and err == ""
    chunk_bytes = STEPS_PER_CHUNK * GRID[0] * GRID[1] * 4
    for name in ("t2m", "u10", "v10", "msl"):
        row = next(line for line in out.splitlines() if line.strip().startswith(f"{name} "))
        assert "time, latitude, longitude" in row and "96 x 16 x 32" in row
        assert "2 x 16 x 32" in row and "bytes+zstd(level=1)" in row
    assert f"{chunk_bytes / 1024:.1f} KiB" in out  # decoded bytes per chunk
    assert "others  latitude (16), longitude (32)" in out
    assert "time    no 1-D time coordinate" in out
    assert "block_chunks       32 (64 samples, 512.0 KiB per block at most" in out
    # the budget is half of what the host has available, as the report says it read it
    available = re.search(r"1/2 of (\d+) bytes available \(MemAvailable\)", out)
    assert available is not None, out
    budget = int(available[1]) // 2
    assert f"memory_budget      {nbytes_text(budget)} ({budget} bytes): 1/2 of" in out
    assert re.search(rf"\n    total +{nbytes_text(budget)}  \({budget} bytes\)\n", out), out
    assert "decode threads     " in out and " cores)" in out


def test_every_chunk_sampled_gives_the_files_sizes(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = inspect_json(capsys, str(era5), "--variables", "t2m", "msl", "--sample-chunks", "99")
    assert [a["name"] for a in report["arrays"]] == ["t2m", "msl"]
    others = {"latitude": [16], "longitude": [32], "u10": [96, 16, 32], "v10": [96, 16, 32]}
    assert report["others"] == others
    assert report["time"] is None and report["zarr_format"] == 3
    for array in report["arrays"]:
        assert array["dims"] == ["time", "latitude", "longitude"]
        assert array["shape"] == [STEPS, *GRID] and array["chunks"] == [STEPS_PER_CHUNK, *GRID]
        assert array["shards"] is None and array["dtype"] == "float32"
        assert array["steps_per_chunk"] == STEPS_PER_CHUNK
        assert array["decoded_chunk_bytes"] == STEPS_PER_CHUNK * GRID[0] * GRID[1] * 4
        files = stored_sizes(era5 / array["name"])
        stored = array["stored_chunk"]
        assert len(files) == stored["of"] == stored["sampled"] == STEPS // STEPS_PER_CHUNK
        assert stored["missing"] == 0 and stored["failed"] is None
        assert stored["mean"] == pytest.approx(np.mean(files))
        assert (stored["smallest"], stored["largest"]) == (min(files), max(files))


def test_a_few_chunks_sampled_are_some_of_the_files(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = inspect_json(capsys, str(era5), "--variables", "u10")["arrays"][0]["stored_chunk"]
    files = stored_sizes(era5 / "u10")
    assert (stored["sampled"], stored["of"]) == (3, len(files))
    assert stored["smallest"] in files and stored["largest"] in files
    assert min(files) <= stored["mean"] <= max(files)


@pytest.mark.parametrize(
    ("batch_size", "budget"),
    [(32, None), (8, "1MiB"), (4, "2MiB"), (32, "3000000"), (16, "8MiB"), (2, None)],
)
def test_the_settings_are_those_build_loader_picks(
    era5: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    batch_size: int,
    budget: str | None,
) -> None:
    args = [str(era5), "--device", "cpu", "--batch-size", str(batch_size)]
    args += [] if budget is None else ["--memory-budget", budget]
    loader = inspect_json(capsys, *args)["loader"]
    # the host the report planned for: what build_loader would read on this host then
    settings: dict[str, Any] = {"batch_size": batch_size, "host": HostResources(**loader["host"])}
    if budget is not None:
        settings["memory_budget"] = parse_nbytes(budget)
    caplog.set_level(logging.INFO, logger="insitubatch_nodes.builder")
    built = built_settings(str(era5), **settings)
    assert loader["memory_budget"] == logged_budget(caplog)
    assert loader["pool_size"] == built["pool_size"] is not None
    plan = loader["plan"]
    assert loader["refused"] is None and plan is not None
    assert loader["block_chunks"] == built["block_chunks"]
    assert loader["block_samples"] == built["block_chunks"] * STEPS_PER_CHUNK
    assert plan["read_ahead_bytes"] == built["read_ahead_bytes"]
    assert plan["inflight_bytes"] == built["inflight_bytes"]
    assert plan["window_bytes"] + plan["read_ahead_bytes"] == built["blocks_alive_bytes"]
    assert loader["decode_threads"] == built["decode_threads"]
    assert loader["split_samples"] == STEPS and loader["unit_steps"] == STEPS_PER_CHUNK
    parts = ("window_bytes", "batch_bytes", "inflight_bytes", "read_ahead_bytes")
    assert sum(plan[p] for p in parts) == loader["memory_budget"]


def test_a_budget_too_small_says_which_fits(era5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = inspect(capsys, str(era5), "--device", "cpu", "--memory-budget", "200KiB")
    assert code == 0
    with pytest.raises(ValueError) as too_small:
        build_loader(str(era5), split="all", device="cpu", memory_budget=200 * 1024)
    assert f"  refused: {too_small.value}" in out
    loader = inspect_json(capsys, str(era5), "--device", "cpu", "--memory-budget", "200KiB")
    least = loader["loader"]["fitting_budget"]
    assert loader["loader"]["plan"] is None and least > 200 * 1024
    built_settings(str(era5), memory_budget=least)  # fits
    with pytest.raises(ValueError, match="is too small"):
        build_loader(str(era5), split="all", device="cpu", memory_budget=least - 1)
    argument = loader["loader"]["fitting_argument"]
    assert f"--memory-budget {argument}" in out and f"memory_budget={least})" in out
    built_settings(str(era5), memory_budget=parse_nbytes(argument))  # the value shown fits


def test_the_host_is_shared_by_its_local_ranks(
    era5: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # as torchrun --nproc_per_node 8 sets it
    loader = inspect_json(capsys, str(era5), "--device", "cpu")["loader"]
    host = loader["host"]
    assert (host["local_ranks"], host["local_ranks_from"]) == (8, "LOCAL_WORLD_SIZE")
    assert loader["memory_budget"] == host["memory_bytes"] // 8 // 2
    assert "shared by 8 local ranks (LOCAL_WORLD_SIZE)" in loader["memory_from"]
    assert loader["decode_threads"] == max(1, host["cores"] // 8)
    assert loader["block_chunks"] == 32  # as on one rank: the block never follows the host


def test_a_host_too_small_is_reported_with_the_budget_that_fits(era5: Path) -> None:
    tiny = HostResources(memory_bytes=400 * 1024, cores=1)
    report = inspect_store(str(era5), device="cpu", host=tiny)
    loader = report.loader
    assert loader.plan is None and loader.refused is not None
    with pytest.raises(ValueError) as refused:
        build_loader(str(era5), split="all", device="cpu", host=tiny)
    assert loader.refused == str(refused.value)
    assert "this host has 409600 bytes available for this rank" in loader.refused
    least = loader.fitting_budget
    assert least is not None and least > 400 * 1024
    built = built_settings(str(era5), memory_budget=least, block_chunks=32)  # the need, exactly
    assert built["block_chunks"] == 32
    text = format_report(report)
    assert "host: 400.0 KiB available (given), 1 core, 1 local rank (given)" in text
    assert f"  refused: {loader.refused}" in text


def test_the_split_and_the_batch_are_planned_for(
    era5: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loader = inspect_json(capsys, str(era5), "--split", "train", "--device", "cuda")["loader"]
    train_units = int(0.8 * STEPS // STEPS_PER_CHUNK)
    assert loader["split"] == "train" and loader["split_samples"] == train_units * 2
    assert loader["device"] == "cuda" and loader["batches_held"] == 3  # the staging ring
    assert loader["plan"]["batch_bytes"] == 3 * 32 * 4 * GRID[0] * GRID[1] * 4
    source = ZarrSource.open(str(era5))
    halves = make_manifest(source.geometry, {"early": 0.25, "late": 0.75})
    (tmp_path / "manifest.json").write_text(halves.dumps())
    manifest = str(tmp_path / "manifest.json")
    loader = inspect_json(capsys, str(era5), "--manifest", manifest, "--split", "early")["loader"]
    assert loader["split_samples"] == STEPS // 4
    line = refused(capsys, str(era5), "--manifest", manifest, "--split", "train")
    assert "unknown split 'train'" in line and "early" in line


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_sharded_array(tmp_path: Path, capsys: pytest.CaptureFixture[str], location: str) -> None:
    group = zarr.open_group(tmp_path / "sharded.zarr", mode="w")
    array = group.create_array(
        "t2m",
        shape=(40, 8, 12),
        chunks=(4, 8, 6),
        shards={"shape": (16, 8, 12), "index_location": location},
        dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=3),
        dimension_names=("time", "lat", "lon"),
    )
    array[...] = np.random.default_rng(0).standard_normal((40, 8, 12), dtype=np.float32)
    report = inspect_json(capsys, str(tmp_path / "sharded.zarr"), "--sample-chunks", "99")
    (found,) = report["arrays"]
    assert found["chunks"] == [4, 8, 6] and found["shards"] == [16, 8, 12]
    assert found["steps_per_chunk"] == 4 and found["steps_per_shard"] == 16
    assert found["codecs"].startswith("sharding_indexed(bytes+zstd(level=3)")
    assert found["decoded_chunk_bytes"] == 4 * 8 * 6 * 4
    shard_files = [tmp_path / f"sharded.zarr/t2m/c/{i}/0/0" for i in range(3)]
    whole = [f.stat().st_size for f in shard_files[:2]]  # the third shard is ragged
    shard = found["stored_shard"]
    assert (shard["sampled"], shard["of"]) == (2, 3)
    assert (shard["smallest"], shard["largest"]) == (min(whole), max(whole))
    inner = found["stored_chunk"]
    per_shard = 4 * 2  # inner chunks in a shard
    assert inner["how"] == "shard indexes"
    assert (inner["sampled"], inner["missing"], inner["of"]) == (2 * per_shard, 0, 10 * 2)
    index_bytes = per_shard * 16 + 4  # (offset, nbytes) per inner chunk, and a crc32c
    assert inner["mean"] * inner["sampled"] == pytest.approx(sum(whole) - 2 * index_bytes)
    code, out, _ = inspect(capsys, str(tmp_path / "sharded.zarr"))
    assert code == 0
    assert "4 (16/shard)" in out and "(shard indexes)" in out and "t2m: stored per shard" in out
    built = built_settings(str(tmp_path / "sharded.zarr"))
    assert report["loader"]["block_chunks"] == built["block_chunks"]


def _s3_store(server: S3Server) -> tuple[str, zarr.Array]:
    url = f"s3://{server.new_bucket()}/data/era5.zarr"
    group = zarr.open_group(server.writable_store(url), mode="w")
    dims = ("time", "lat", "lon")
    array = group.create_array(
        "t2m", shape=(24, 4, 8), chunks=(4, 4, 8), dtype="float32", dimension_names=dims
    )
    array[...] = np.random.default_rng(1).standard_normal((24, 4, 8), dtype=np.float32)
    return url, array


def test_a_store_in_s3_with_options_as_json_and_as_a_file(
    s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _s3_store(s3_server)
    options = json.dumps(s3_server.json_options(secret_access_key=SECRET))
    code, out, err = inspect(capsys, url, "--storage-options", options)
    assert code == 0 and err == ""
    assert f"store   {url}  (Zarr v3)" in out and "24 x 4 x 8" in out
    assert SECRET not in out
    (tmp_path / "options.json").write_text(options)
    report = inspect_json(
        capsys, url, "--storage-options", str(tmp_path / "options.json"), "--sample-chunks", "9"
    )
    assert SECRET not in json.dumps(report)
    stored = report["arrays"][0]["stored_chunk"]
    sizes = s3_server.object_sizes(url, "t2m/c/")
    assert stored["sampled"] == stored["of"] == len(sizes) == 6
    assert stored["mean"] == pytest.approx(np.mean(sizes))
    built = built_settings(url, storage_options=json.loads(options))
    assert report["loader"]["block_chunks"] == built["block_chunks"]


def test_errors_on_s3_name_the_store_not_the_secret(
    s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _s3_store(s3_server)
    options = json.dumps(s3_server.json_options(secret_access_key=SECRET))
    line = refused(capsys, url, "--storage-options", options, "--variables", "z500")
    assert "unknown variable(s) ['z500']" in line and url in line and SECRET not in line
    in_url = url.replace("s3://", f"s3://{ACCESS_KEY}:{SECRET}@")
    code, out, err = inspect(capsys, in_url, "--storage-options", options)
    assert SECRET not in out + err
    assert code == 0 and "s3://***@" in out
    typo = json.dumps({**json.loads(options), "secret_acess_key": SECRET})
    line = refused(capsys, url, "--storage-options", typo)
    assert "secret_acess_key" in line and SECRET not in line


def test_anonymous_reads_are_unsigned(
    s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _s3_store(s3_server)
    bare = s3_server.json_options()
    del bare["access_key_id"], bare["secret_access_key"]
    line = refused(capsys, url, "--storage-options", json.dumps(bare), "--anonymous")
    assert "refused access" in line and "skip_signature" in line  # unsigned: private bucket
    bucket = url.removeprefix("s3://").partition("/")[0]
    client = s3_server.client()

    def allow(*actions: str) -> None:
        resources = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
        grant = {"Effect": "Allow", "Principal": "*", "Action": actions, "Resource": resources}
        policy = {"Version": "2012-10-17", "Statement": [grant]}
        client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))

    # moto grants HEAD only with s3:HeadObject (AWS with s3:GetObject): a store that
    # answers GET but not HEAD, so sizes go unmeasured and the rest is still reported
    allow("s3:GetObject", "s3:ListBucket")
    report = inspect_json(capsys, url, "--storage-options", json.dumps(bare), "--anonymous")
    stored = report["arrays"][0]["stored_chunk"]
    assert stored["failed"].startswith("PermissionDeniedError asking the size of 't2m/c/")
    assert stored["mean"] is None and report["loader"]["plan"] is not None
    allow("s3:GetObject", "s3:HeadObject", "s3:ListBucket")
    report = inspect_json(capsys, url, "--storage-options", json.dumps(bare), "--anonymous")
    assert report["arrays"][0]["stored_chunk"]["mean"] > 0


def _with_time(
    path: Path,
    values: np.ndarray,
    attrs: dict[str, Any],
    *,
    zarr_format: int = 3,
    name: str = "time",
) -> Path:
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    dims = (name, "lat", "lon")
    if zarr_format == 3:
        data = group.create_array(
            "t2m", shape=(values.size, 4, 8), chunks=(4, 4, 8), dtype="f4", dimension_names=dims
        )
        time = group.create_array(name, data=values, dimension_names=(name,))
    else:
        data = group.create_array(
            "t2m", shape=(values.size, 4, 8), chunks=(4, 4, 8), dtype="f4", compressors=ZSTD_V2
        )
        data.attrs["_ARRAY_DIMENSIONS"] = list(dims)
        time = group.create_array(name, data=values)
        time.attrs["_ARRAY_DIMENSIONS"] = [name]
    data[...] = 1.0
    time.attrs.update(attrs)
    return path


def test_a_cf_time_coordinate_in_hours(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hours = np.arange(40, dtype=np.int64) * 6 + 24  # 1979-01-02T00 onwards
    units = "hours since 1979-01-01 00:00:00"
    store = _with_time(tmp_path / "t.zarr", hours, {"units": units, "calendar": "standard"})
    time = inspect_json(capsys, str(store))["time"]
    assert time == {
        "name": "time",
        "count": 40,
        "units": units,
        "calendar": "standard",
        "decoded": True,
        "first": "1979-01-02T00:00",
        "last": "1979-01-11T18:00",
        "step": "6 h",
    }
    code, out, _ = inspect(capsys, str(store))
    assert code == 0
    assert "time    time: 1979-01-02T00:00 .. 1979-01-11T18:00, 40 steps, every 6 h" in out


def test_a_zarr_v2_time_coordinate_in_fractional_days(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    days = np.arange(12, dtype=np.float64) * 0.25
    units = {"units": "days since 2000-1-1"}
    store = _with_time(tmp_path / "t.zarr", days, units, zarr_format=2, name="valid_time")
    report = inspect_json(capsys, str(store))
    assert report["arrays"][0]["dims"] == ["valid_time", "lat", "lon"]
    time = report["time"]
    assert (time["name"], time["decoded"], time["calendar"]) == ("valid_time", True, None)
    assert (time["first"], time["last"], time["step"]) == (
        "2000-01-01T00:00",
        "2000-01-03T18:00",
        "6 h",
    )


def test_a_noleap_calendar_is_shown_in_its_own_dates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    days = np.arange(8, dtype=np.int64) + 100
    attrs = {"units": "days since 0001-01-01", "calendar": "noleap"}
    store = _with_time(tmp_path / "t.zarr", days, attrs)
    time = inspect_json(capsys, str(store))["time"]
    shown = (time["decoded"], time["first"], time["last"], time["step"])
    assert shown == (True, "0001-04-11", "0001-04-18", "1 d")  # day 100 of a 365-day year
    code, out, _ = inspect(capsys, str(store))
    assert code == 0
    assert "0001-04-11 .. 0001-04-18, 8 steps, every 1 d (units 'days since 0001-01-01', " in out


def test_a_calendar_cf_does_not_define_shows_the_stored_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    days = np.arange(8, dtype=np.int64) + 100
    attrs = {"units": "days since 0001-01-01", "calendar": "mars"}
    store = _with_time(tmp_path / "t.zarr", days, attrs)
    time = inspect_json(capsys, str(store))["time"]
    shown = (time["decoded"], time["first"], time["last"], time["step"])
    assert shown == (False, "100", "107", "1")
    code, out, _ = inspect(capsys, str(store))
    assert code == 0
    assert "100 .. 107, 8 steps, every 1 (stored values: units 'days since 0001-01-01', " in out


@pytest.mark.parametrize(
    ("units", "calendar", "expected"),
    [
        ("hours since 1900-01-01", None, ("h", "1900-01-01T00:00:00")),
        ("days since 1970-1-1 0:0:0", "proleptic_gregorian", ("D", "1970-01-01T00:00:00")),
        ("seconds since 2020-02-29T12:30:15Z", "gregorian", ("s", "2020-02-29T12:30:15")),
        ("minutes since 1000-01-01", "proleptic_gregorian", ("m", "1000-01-01T00:00:00")),
        ("minutes since 1000-01-01", "standard", None),  # Julian before 1582
        ("months since 2000-01-01", None, None),  # no fixed length
        ("hours since 2000-01-01", "360_day", None),
        ("hours since 2000-01-01 +05:00", None, None),  # not UTC
        ("hours since 2000-13-01", None, None),
        ("metres", None, None),
        (None, None, None),
    ],
)
def test_which_cf_units_are_decoded(
    units: str | None, calendar: str | None, expected: tuple[str, str] | None
) -> None:
    found = cf_reference(units, calendar)
    if expected is None:
        assert found is None
    else:
        assert found == (expected[0], np.datetime64(expected[1]))


def test_decoding_keeps_fractions_and_refuses_nan() -> None:
    decoded = decode_cf_times(np.array([0.0, 1.5, 2.25]), "hours since 2000-01-01", None)
    assert decoded is not None
    assert [str(d) for d in decoded.astype("M8[s]")] == [
        "2000-01-01T00:00:00",
        "2000-01-01T01:30:00",
        "2000-01-01T02:15:00",
    ]
    assert decode_cf_times(np.array([0.0, np.nan]), "hours since 2000-01-01", None) is None


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("1073741824", 1 << 30),
        ("8GiB", 8 << 30),
        ("8g", 8 << 30),
        ("2GB", 2 * 10**9),
        ("512MiB", 512 << 20),
        ("1.5GiB", 3 << 29),
        ("300KiB", 300 << 10),
    ],
)
def test_sizes_people_type(text: str, nbytes: int) -> None:
    assert parse_nbytes(text) == nbytes


@pytest.mark.parametrize("nbytes", [1, 5771427839, 1 << 30, 300 << 20, 10**12 + 1])
def test_a_suggested_size_is_never_below_the_need(nbytes: int) -> None:
    assert parse_nbytes(size_argument(nbytes)) >= nbytes


def test_errors_are_one_line_and_exit_2(
    era5: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.zarr"
    line = refused(capsys, str(missing))
    assert "no Zarr store at" in line and str(missing) in line
    (tmp_path / "empty").mkdir()
    assert "is not a Zarr group" in refused(capsys, str(tmp_path / "empty"))
    line = refused(capsys, str(era5), "--variables", "t2m", "sst")
    assert "unknown variable(s) ['sst']" in line and "'t2m'" in line
    line = refused(capsys, str(era5), "--storage-options", '{"region": us-west-2}')
    assert "--storage-options is not valid JSON" in line and "line 1, column 12" in line
    line = refused(capsys, str(era5), "--storage-options", "[1, 2]")
    assert "must be a JSON object of obstore client options, got an array" in line
    line = refused(capsys, str(era5), "--storage-options", str(tmp_path / "none.json"))
    assert "neither JSON text" in line
    assert "not a size" in refused(capsys, str(era5), "--memory-budget", "lots")
    assert "unknown split 'trian'" in refused(capsys, str(era5), "--split", "trian")
    assert "batch_size must be" in refused(capsys, str(era5), "--batch-size", "0")


def test_the_installed_command(era5: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "insitubatch"
    assert script.exists(), "pip install -e . installs the insitubatch command"
    done = subprocess.run(
        [str(script), "inspect", str(era5), "--json", "--variables", "t2m"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["arrays"][0]["shape"] == [STEPS, *GRID]
    failed = subprocess.run(
        [str(script), "inspect", str(tmp_path / "missing.zarr")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 2 and failed.stdout == ""
    assert failed.stderr.startswith("insitubatch inspect: no Zarr store at")
    assert failed.stderr.count("\n") == 1


def test_the_pool_and_its_mixing_are_predicted_before_any_read(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = inspect_json(capsys, str(era5), "--device", "cpu", "--split", "all")["loader"]
    built = build_loader(str(era5), split="all", device="cpu", host=HostResources(**report["host"]))
    pool = next(n for n in graph_nodes(built.root) if isinstance(n, PoolShuffleNode))
    assert report["pool_size"] == pool.pool_size
    predicted, uniform = report["mixing"]
    units = STEPS // STEPS_PER_CHUNK
    assert uniform == pytest.approx(uniform_distinct_units(np.full(units, STEPS_PER_CHUNK), 32))
    assert 0 < predicted <= uniform
    for _ in built:  # what the loader then measures
        pass
    measured = built.stats()
    assert measured["distinct_units_uniform"] == pytest.approx(uniform)
    assert measured["distinct_units_per_batch"] <= predicted + 1
    text = inspect(capsys, str(era5), "--device", "cpu", "--split", "all")[1]
    assert f"pool of {pool.pool_size} units" in text
    assert "distinct units per batch of 32" in text


def test_the_pools_ramp_is_predicted_as_the_loader_draws_it(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At a batch of 4 the 48 units of the store enter the pool over an epoch's first
    batches (ramp batches' samples more per batch): inspect says how many batches draw
    from a pool still filling, how many units they mix and what the first batch waits
    for, as the pure order has it and the loader's own batches then show."""
    args = [str(era5), "--device", "cpu", "--split", "all", "--batch-size", "4"]
    report = inspect_json(capsys, *args)["loader"]
    ramp, pool_size = report["ramp"], report["pool_size"]
    assert report["pool_ramp"] == POOL_RAMP
    anchors = split_anchors(ZarrSource.open(str(era5)), "all", None)
    a = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    assert ramp["batches"] == filling_batches(anchors, a, pool_size, 4, POOL_RAMP) > 1
    assert ramp["followed_all"]
    sizes = anchors.unit_sizes(a.units)
    waited = first_wait(anchors, a, pool_size, 4, POOL_RAMP)
    assert (ramp["first_units"], ramp["first_samples"]) == (waited, int(sizes[:waited].sum()))
    filled = first_wait(anchors, a, pool_size, 4, 0)
    assert (ramp["filled_units"], ramp["filled_samples"]) == (filled, int(sizes[:filled].sum()))
    assert ramp["first_units"] < ramp["filled_units"]
    built = build_loader(
        str(era5), split="all", device="cpu", batch_size=4, host=HostResources(**report["host"])
    )
    first = [batch["sample_index"].numpy() for batch in built][: ramp["batches"]]
    assert ramp["distinct_units"] == pytest.approx(np.mean(distinct_units(anchors, a, first)))
    assert ramp["distinct_units"] < report["mixing"][0]  # a pool still filling mixes less
    text = inspect(capsys, *args)[1]
    assert (
        f"pool_ramp={POOL_RAMP}: each epoch's first {ramp['batches']} batches draw from a pool "
        f"still filling, about {ramp['distinct_units']:.1f} distinct units per batch over them; "
        f"the first batch waits for {waited} units ({ramp['first_samples']} samples, 1 block) "
        f"to be read, where filling the pool first (pool_ramp=0) would wait for {filled} units"
    ) in " ".join(text.split())


def test_a_ramp_too_long_to_follow_is_printed_as_at_least_what_was_followed(
    era5: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [str(era5), "--device", "cpu", "--split", "all", "--batch-size", "4"]
    whole = inspect_json(capsys, *args)["loader"]["ramp"]
    monkeypatch.setattr(pool_ramp, "FOLLOWED_UNITS", 30)
    cut = inspect_json(capsys, *args)["loader"]["ramp"]
    assert not cut["followed_all"] and 0 < cut["batches"] < whole["batches"]
    text = " ".join(inspect(capsys, *args)[1].split())
    assert f"at least each epoch's first {cut['batches']} batches draw from a pool" in text


def test_windows_and_leads_are_planned_with_the_chunks_they_reach(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window reaching a step back and a lead a step ahead make each unit hold its
    neighbouring chunks: inspect plans the pool build_loader then builds for that spec,
    and says what one-step samples would have fitted."""
    import insitubatch_nodes as ib

    budget = ["--memory-budget", "8MiB", "--device", "cpu", "--split", "all"]
    report = inspect_json(capsys, str(era5), *budget, "--window", "2", "--lead", "1")["loader"]
    variables = sorted(zarr.open_group(str(era5), mode="r").array_keys())
    variables = [v for v in variables if v not in ("latitude", "longitude")]
    spec = ib.SampleSpec(
        {"inputs": ib.window(variables, steps=2), "targets": ib.leads(variables, [1])}
    )
    settings: dict[str, Any] = {"split": "all", "device": "cpu", "memory_budget": 8 << 20}
    with_windows = build_loader(str(era5), variables, spec=spec, **settings)
    plain = build_loader(str(era5), variables, **settings)
    pools = [
        next(n for n in graph_nodes(b.root) if isinstance(n, PoolShuffleNode)).pool_size
        for b in (with_windows, plain)
    ]
    assert report["pool_size"] == pools[0]
    assert report["pool_without_windows"] == pools[1]
    assert pools[0] < pools[1]  # the halo chunks take room in the window
    assert report["spec_span"] == [-1, 1]
    text = inspect(capsys, str(era5), *budget, "--window", "2", "--lead", "1")[1]
    assert f"holds {pools[0]} units where one-step samples would fit {pools[1]}" in text


def test_revisits_are_planned_as_the_loader_builds_them(
    era5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--revisits 2` plans build_loader(revisits=2): units of half the steps (each read
    twice per epoch), so the same window holds more of them and batches mix over more;
    the pool, its memory and the predicted mixing are the loader's."""
    args = [str(era5), "--device", "cpu", "--split", "all", "--memory-budget", "8MiB"]
    once = inspect_json(capsys, *args)["loader"]
    report = inspect_json(capsys, *args, "--revisits", "2")["loader"]
    settings: dict[str, Any] = {"split": "all", "device": "cpu", "memory_budget": 8 << 20}
    built = build_loader(str(era5), revisits=2, host=HostResources(**report["host"]), **settings)
    nodes = graph_nodes(built.root)
    pool = next(n for n in nodes if isinstance(n, PoolShuffleNode))
    fetch = next(n for n in nodes if isinstance(n, AsyncFetchNode))
    assert report["revisits"] == 2 and once["revisits"] == 1
    assert report["unit_steps"] == STEPS_PER_CHUNK // 2
    assert report["pool_size"] == pool.pool_size > once["pool_size"]
    assert report["pool_without_revisits"] == once["pool_size"]
    plan = report["plan"]
    assert plan["window_bytes"] + plan["read_ahead_bytes"] == (
        fetch.context.block_slots.capacity_bytes
    )
    assert plan["read_ahead_bytes"] == fetch.memory_budget
    predicted, uniform = report["mixing"]
    assert uniform == pytest.approx(uniform_distinct_units(np.full(STEPS, 1), 32))
    for _ in built:  # what the loader then measures
        pass
    assert built.stats()["distinct_units_uniform"] == pytest.approx(uniform)
    assert 0 < predicted <= uniform
    text = inspect(capsys, *args, "--revisits", "2")[1]
    assert f"pool of {pool.pool_size} units" in text
    assert f"where one visit per unit would fit {once['pool_size']}" in text


def test_a_stride_is_planned_in_the_units_the_loader_deals_it_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--stride 3` on an hourly store chunked 4 steps plans build_loader(stride=3): units
    of 12 steps, said why, with the loader's samples and pool; `--frequency 6h` is a stride
    of 6 there, longer than a unit; both at once are refused as build_loader refuses them."""
    hours = hourly("2015-01-01T00", 120)
    url = write_xarray(tmp_path / "h.zarr", hours, zarr_format=3, steps_per_chunk=4)
    args = [url, "--device", "cpu", "--split", "all", "--memory-budget", "8MiB"]
    report = inspect_json(capsys, *args, "--stride", "3", "--window", "2", "--lead", "1")
    loader = report["loader"]
    assert loader["unit_steps"] == 12 and loader["spec_span"] == [-3, 3]
    assert loader["stride_units"].startswith(
        "units of 12 steps: a stride of 3 steps does not divide units of 4 steps"
    )
    spec = ib.SampleSpec({"x": ib.window(["t2m", "z"], steps=2), "y": ib.leads(["t2m"], [1])})
    settings: dict[str, Any] = {"split": "all", "device": "cpu", "memory_budget": 8 << 20}
    built = build_loader(url, spec=spec, stride=3, **settings)
    pool = next(n for n in graph_nodes(built.root) if isinstance(n, PoolShuffleNode))
    assert loader["pool_size"] == pool.pool_size
    assert loader["split_samples"] == sum(b["sample_index"].numel() for b in built)
    text = inspect(capsys, *args, "--stride", "3")[1]
    assert "  stride: units of 12 steps: a stride of 3 steps" in text
    by_frequency = inspect_json(capsys, *args, "--frequency", "6h")["loader"]
    assert by_frequency["unit_steps"] == 4
    assert "each unit holds one anchor or none" in by_frequency["stride_units"]
    assert inspect_json(capsys, *args)["loader"]["stride_units"] is None
    err = refused(capsys, *args, "--stride", "3", "--frequency", "6h")
    assert "give stride= or frequency=, not both" in err


def test_revisits_must_divide_the_unit(era5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, str(era5), "--device", "cpu", "--revisits", "3")
    assert "revisits=3 must divide the unit length of 2 steps" in err


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_array_zarr_decodes_is_named_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zarr_format: int
) -> None:
    """An array whose codec the library does not decode itself is read through zarr, and
    inspect says so, in the text and the JSON; the library's own arrays are not named."""
    store = tmp_path / "mixed.zarr"
    group = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    if zarr_format == 2:
        codecs: dict[str, Any] = {"fast": numcodecs.Zstd(), "slow": numcodecs.BZ2(level=1)}
        unknown = "bz2"
    else:
        codecs = {"fast": zarr.codecs.ZstdCodec(), "slow": zarr.codecs.numcodecs.BZ2(level=1)}
        unknown = "numcodecs.bz2"
    for name, compressor in codecs.items():
        array = group.create_array(
            name, shape=(24, 4, 8), chunks=(4, 4, 8), dtype="float32", compressors=compressor
        )
        array[...] = np.random.default_rng(2).standard_normal((24, 4, 8), dtype=np.float32)
    reason = f"codec {unknown!r} is not one the library decodes itself"
    report = inspect_json(capsys, str(store))
    assert {a["name"]: a["read_through_zarr"] for a in report["arrays"]} == {
        "fast": None,
        "slow": reason,
    }
    code, out, _ = inspect(capsys, str(store))
    assert code == 0
    assert f"  slow: read through zarr, at more CPU per chunk ({reason})" in out.splitlines()
    assert "fast: read through zarr" not in out
    if zarr_format == 2:
        assert "bz2(level=1)" in out  # the settings of a codec zarr decodes, as before


def test_inspect_says_how_values_are_decoded_and_warns_of_a_v2_zero_fill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers.cf_stores import write_attributes

    stored = (np.arange(24 * 4) % 7).astype("int16").reshape(24, 2, 2)
    attributes = {"scale_factor": 0.5, "add_offset": 10.0}
    url = write_attributes(tmp_path / "s.zarr", stored, attributes, zarr_format=2, fill_value=0)
    report = inspect_json(capsys, url, "--device", "cpu")
    assert report["decoding"]["v"] == "decoded (0 -> NaN, * 0.5, + 10.0) as float64"
    (warning,) = report["warnings"]
    assert "fill_value is 0" in warning
    code, out, _ = inspect(capsys, url, "--device", "cpu")
    assert code == 0
    assert "v: batches hold its values decoded (0 -> NaN, * 0.5, + 10.0) as float64" in out
    assert "warning: variable 'v' is a Zarr v2 array whose fill_value is 0" in out


def test_stack_prints_the_channel_list_and_the_statics_on_the_memory_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = write_era5_like(
        tmp_path / "era5.zarr",
        time_steps=STEPS,
        steps_per_chunk=STEPS_PER_CHUNK,
        grid=GRID,
        statics=WB2_STATICS,
    )
    variables = ["t2m", "u10", *WB2_STATICS]
    code, out, err = inspect(
        capsys,
        str(url),
        "--device",
        "cpu",
        "--memory-budget",
        "64MiB",
        "--stack",
        "--variables",
        *variables,
    )
    assert code == 0 and err == ""
    resident = 2 * GRID[0] * GRID[1] * 4  # two float32 grids, once
    assert re.search(rf"\n    static fields +{nbytes_text(resident)}  \({resident} bytes\)\n", out)
    assert "statics land_sea_mask (16 x 32), geopotential_at_surface (16 x 32)" in out
    assert "land_sea_mask" not in out.split("\n")[1]  # not among the others
    assert (
        "channels of 'fields' (stack=True): t2m, u10, land_sea_mask, geopotential_at_surface" in out
    )
    loader = build_loader(str(url), variables, split="all", device="cpu", stack=True)
    assert loader.channels == {"fields": variables}


def test_an_area_shows_its_grid_and_the_chunks_it_touches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--area N,W,S,E` across the 0/360 seam of a 10-degree grid in chunks of 5 x 8: 5 x 8
    grid points, the latitude chunks of 60 .. 20 (two of four) times the longitude chunks
    of 330 .. 40 (the first and the last of five), in text and in JSON; a box of no grid
    point is one line on stderr."""
    url = write_grid_store(tmp_path / "grid.zarr", zarr_format=3, descending=True, signed=False)
    code, out, _ = inspect(capsys, url, "--area", "60,-30,20,40")
    assert code == 0
    assert "5 x 8 grid points (latitude 60 .. 20, longitude 330 .. 40 eastward)" in out
    assert "t2m: reads 4 of 20 chunks per time chunk (20.0% of the reads)" in out
    report = inspect_json(capsys, url, "--area", "60,-30,20,40", "--variables", "z")
    assert report["area"]["grid"] == [5, 8]
    assert report["area"]["chunks"] == {"z": [8, 40]}
    code, _, err = inspect(capsys, url, "--area", "60,1,20,9")
    assert code == 2
    assert "holds no grid point" in err


def test_forcings_have_their_own_line_on_the_memory_plan_and_their_channels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--forcings a,b` plans for `build_loader(forcings=[a, b])`: what they keep is on a
    "forcings" line of its own (not among the static fields), the number `build_loader`
    plans with; with `--stack` they are channels after the variables, before the statics;
    an unknown name is refused on one line, naming the known ones."""
    url = str(write_weatherbench2_like(tmp_path / "wb2.zarr", time_steps=16, grid=GRID))
    names = ["cos_solar_zenith_angle", "toa_incident_solar_radiation", "year_progress_sin"]
    variables = ["2m_temperature", *WB2_STATICS]
    given = ("--device", "cpu", "--memory-budget", "64MiB", "--batch-size", "4")
    common = (*given, "--variables", *variables, "--forcings", ",".join(names))
    report = inspect_json(capsys, url, *common)
    settings = {"split": "all", "batch_size": 4, "device": "cpu", "memory_budget": 64 << 20}
    bound = inspect_signature(build_loader).bind(url, variables, forcings=names, **settings)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["host"]
    planned = plan_loader(check_settings(arguments))
    plan, forcings = planned.choices.plan, planned.forcings
    assert forcings is not None  # kept: times, coordinates, 2 dropped batches' memory
    idle = IDLE_BATCHES * 4 * forcings.sample_nbytes()
    assert plan.forcing_bytes == forcings.resident_nbytes() + idle
    assert report["forcings"] == names
    assert report["loader"]["plan"]["forcing_bytes"] == plan.forcing_bytes > 0
    statics = 2 * GRID[0] * GRID[1] * 4  # two float32 grids: the statics alone
    assert report["loader"]["plan"]["static_bytes"] == plan.static_bytes == statics
    code, out, err = inspect(capsys, url, *common, "--stack")
    assert code == 0 and err == ""
    assert "forcings cos_solar_zenith_angle, toa_incident_solar_radiation, year_progress_sin" in out
    assert re.search(rf"\n    static fields +{nbytes_text(statics)}  \({statics} bytes\)\n", out)
    assert re.search(r"\n    forcings +[0-9.]+ [KM]iB  \([0-9]+ bytes\)\n", out)
    stacked = build_loader(url, variables, split="all", device="cpu", stack=True, forcings=names)
    expected = ", ".join(stacked.channels["fields"])
    assert expected == ", ".join(["2m_temperature", *names, *WB2_STATICS])
    assert f"channels of 'fields' (stack=True): {expected}" in out
    assert "unknown forcing 'sun'" in refused(capsys, url, "--forcings", "sun")

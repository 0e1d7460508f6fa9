"""`insitubatch inspect` and `insitubatch stats` on several stores joined as one (issue 37):
the reports name each store and what it gives, the steps an inner join leaves out of each
and how many steps one of its reads brings; the statistics are those of
`xr.merge([xr.open_zarr(u) ...], join=...)`; per-store options and refusals as for one
store (one line, exit status 2, no secret)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from insitubatch_nodes import ChannelStats, build_loader
from insitubatch_nodes.cli.main import main
from tests.helpers.joined_stores import (
    cds_named,
    dates,
    era5_join,
    merged,
    pressure_levels,
    s3_and_local_join,
    surface,
    write,
)
from tests.helpers.s3_server import S3Server

pytestmark = pytest.mark.filterwarnings("ignore")  # xarray's and zarr's notes on Zarr v3
SECRET = "join-Secret-7Gq2w"  # a value no report could contain by chance


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line a failed command prints (exit status 2, nothing on stdout)."""
    code, out, err = run(capsys, *args)
    assert code == 2, out + err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def inner(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The pressure store starts 10 steps before the surface store and ends 5 after it."""
    folder = tmp_path_factory.mktemp("joined")
    return era5_join(folder, pressure=(0, 72), surface_steps=(10, 57))


def test_inspect_names_each_store_and_what_it_gives(
    inner: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    pl, sfc, static = inner
    code, out, err = run(capsys, "inspect", *inner, "--join", "inner")
    assert code == 0, err
    lines = out.splitlines()
    # the default choice leaves a store of static fields only out, as build_loader does,
    # and says so
    assert lines[0] == f"store   the join of {pl} and {sfc}  (join='inner')"
    assert lines[1] == (
        f"  {pl} (Zarr v3): t, z; 72 steps, 15 left out (the joined axis starts at its "
        f"step 10); 24 steps per chunk"
    )
    assert lines[2] == f"  {sfc} (Zarr v3): msl, t2m; 57 steps; 1 step per chunk"
    assert lines[3] == (
        f"  {static} (Zarr v3): static fields only (lsm): joins by grid alone; none selected "
        f"(name them with --variables)"
    )
    reference = merged(inner, "inner")
    first, last = (str(d)[:16] for d in reference.time.values[[0, -1]])
    assert f"time    time: {first} .. {last}, 57 steps, every 6 h" in out


def test_inspect_json_of_a_join(inner: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    pl, sfc, static = inner
    code, out, err = run(
        capsys, "inspect", *inner, "--join", "inner", "--variables", "t", "msl", "lsm", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["join"] == "inner"
    assert report["store"] == f"the join of {pl} and {sfc} and {static}"
    assert [a["name"] for a in report["arrays"]] == ["t", "msl"]
    assert report["statics"] == {"lsm": [5, 8]}
    assert report["time"]["count"] == merged(inner, "inner").sizes["time"] == 57
    assert report["stores"] == [
        {
            "store": pl,
            "zarr_format": 3,
            "variables": ["t"],
            "statics": [],
            "steps": 72,
            "origin": 10,
            "lost": 15,
            "steps_per_chunk": [24],
            "time": "time",
            "unread": [],
        },
        {
            "store": sfc,
            "zarr_format": 3,
            "variables": ["msl"],
            "statics": [],
            "steps": 57,
            "origin": 0,
            "lost": 0,
            "steps_per_chunk": [1],
            "time": "time",
            "unread": [],
        },
        {
            "store": static,
            "zarr_format": 3,
            "variables": [],
            "statics": ["lsm"],
            "steps": None,
            "origin": None,
            "lost": None,
            "steps_per_chunk": [],
            "time": None,
            "unread": [],
        },
    ]
    assert report["loader"]["split_samples"] == 57


def test_inspect_says_what_a_store_it_reads_nothing_from_holds(
    inner: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No store given on the command line goes without a word: one whose arrays are not
    selected is not read (its dates are not joined); the static store's fields, left out
    by default, are named."""
    pl, sfc, static = inner
    code, out, err = run(capsys, "inspect", *inner, "--join", "inner", "--variables", "t")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:4] == [
        f"store   the join of {pl}  (join='inner')",
        f"  {pl} (Zarr v3): t; 72 steps; 24 steps per chunk",
        f"  {sfc} (Zarr v3): none of msl, t2m selected: not read, and its dates are not joined",
        f"  {static} (Zarr v3): static fields only (lsm): joins by grid alone; none selected "
        f"(name them with --variables)",
    ]
    code, out, err = run(capsys, "inspect", *inner, "--join", "inner", "--json")
    assert code == 0, err
    stores = json.loads(out)["stores"]
    assert [s["store"] for s in stores] == inner
    assert stores[2]["unread"] == ["lsm"] and stores[2]["time"] is None
    assert stores[2]["variables"] == stores[2]["statics"] == []


def test_inspect_and_stats_of_stores_that_name_time_differently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A WeatherBench2-style store (`time`) and a CDS-style one (`valid_time`): the joined
    axis is the first store's, each store's line names its own coordinate where it
    differs, and the statistics are those of the merge with the second renamed."""
    days = dates(0, 30)
    pl = write(pressure_levels(days), tmp_path / "pl.zarr", 24, 3)
    sfc = write(cds_named(surface(days)), tmp_path / "sfc.zarr", 1, 3)
    code, out, err = run(capsys, "inspect", pl, sfc)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == f"  {pl} (Zarr v3): t, z; 30 steps; 24 steps per chunk"
    assert lines[2] == f"  {sfc} (Zarr v3): msl, t2m; 30 steps of 'valid_time'; 1 step per chunk"
    assert "time    time: 2020-01-01T00:00 .. 2020-01-08T06:00, 30 steps, every 6 h" in out
    written = tmp_path / "joined.stats.json"
    code, _, err = run(capsys, "stats", pl, sfc, "--split", "all", "--out", str(written))
    assert code == 0, err
    stats = ChannelStats.load(written)
    reference = xr.merge(
        [xr.open_zarr(pl), xr.open_zarr(sfc).rename(valid_time="time")], join="exact"
    )
    for name in ("t2m", "msl"):
        np.testing.assert_allclose(stats.mean[name], [float(reference[name].mean())], rtol=1e-5)
        np.testing.assert_allclose(stats.std[name], [float(reference[name].std())], rtol=1e-5)
    t = reference.t.values.astype(np.float64)
    np.testing.assert_allclose(stats.mean["t"], t.mean(axis=(0, 2, 3)), rtol=1e-5)


def test_inspect_of_a_store_of_static_fields_only_says_it_joins_by_grid_alone(
    inner: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    static = inner[2]
    code, out, err = run(capsys, "inspect", static)
    assert code == 0, err
    assert out.splitlines()[1] == (
        f"  static fields only (lsm: no time dimension): this store joins by grid alone; "
        f"inspect it beside a store of time-varying fields (insitubatch inspect FIELDS_URL "
        f"{static}). Read by itself, its first axis would be taken for time"
    )
    code, out, err = run(capsys, "inspect", static, "--json")
    assert code == 0, err
    assert json.loads(out)["static_only"] == ["lsm"]
    code, out, err = run(capsys, "inspect", inner[1], "--json")
    assert code == 0, err
    assert json.loads(out)["static_only"] == []


def test_inspect_of_one_store_has_no_store_lines(
    inner: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "inspect", inner[1], "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["join"] is None and report["stores"] == []


def test_an_exact_join_of_other_dates_is_refused_naming_both_stores(
    inner: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("inspect", "stats"):
        line = refused(capsys, command, inner[0], inner[1])
        assert line.startswith(f"insitubatch {command}: ")
        assert inner[0] in line and inner[1] in line and "join" in line


def test_stats_of_a_join_are_those_of_xarray_merge(
    inner: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "joined.stats.json"
    args = ["stats", inner[0], inner[1], "--join", "inner", "--split", "all"]
    code, printed, err = run(capsys, *args, "--variables", "t2m", "z", "--out", str(out))
    assert code == 0, err
    stats = ChannelStats.load(out)
    reference = merged(inner, "inner")
    assert stats.channels["z"] == ["z[0]", "z[1]", "z[2]"]
    np.testing.assert_allclose(stats.mean["t2m"], [float(reference.t2m.mean())], rtol=1e-5)
    np.testing.assert_allclose(stats.std["t2m"], [float(reference.t2m.std())], rtol=1e-5)
    z = reference.z.values.astype(np.float64)
    np.testing.assert_allclose(stats.mean["z"], z.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(stats.std["z"], z.std(axis=(0, 2, 3)), rtol=1e-5)
    assert f"-> {out}" in printed


def test_stats_of_a_join_default_to_a_file_of_their_own(
    inner: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Beside the first store's name, never over the first store's own statistics."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "stats", *inner[:2], "--join", "inner", "--variables", "msl")
    assert code == 0, err
    assert (tmp_path / "pl.joined.stats.json").is_file()
    assert not (tmp_path / "pl.stats.json").exists()


def test_storage_options_once_per_store(
    tmp_path: Path, s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per-store options in the URLs' order; given once, they go to every store (the local
    store refuses S3's); given a third time for two stores, refused by count. No secret
    in any of it."""
    urls = s3_and_local_join(tmp_path, s3_server)
    options: dict[str, Any] = s3_server.json_options(secret_access_key=SECRET)
    s3 = json.dumps(options)
    code, out, err = run(
        capsys, "inspect", *urls, "--storage-options", s3, "--storage-options", "{}"
    )
    assert code == 0, err
    assert f"  {urls[0]} (Zarr v3): t, z; 30 steps; 24 steps per chunk" in out
    assert SECRET not in out + err
    line = refused(capsys, "inspect", *urls, "--storage-options", s3)
    assert SECRET not in line
    three = ["--storage-options", s3] * 3
    line = refused(capsys, "stats", *urls, *three)
    assert "--storage-options is given 3 times for 2 stores" in line and SECRET not in line


def test_split_of_a_join_is_cut_on_the_joined_axis(
    inner: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The manifest `split` writes for a join is the one `build_loader(splits=)` cuts: a
    loader given the file yields the samples of a loader given the dates."""
    monkeypatch.chdir(tmp_path)
    urls = inner[:2]
    ranges = {"train": "2020-01-03T12:2020-01-10", "val": "2020-01-11:2020-01-17"}
    args = [f"--{name}={text}" for name, text in ranges.items()]
    code, out, err = run(capsys, "split", *urls, "--join", "inner", *args)
    assert code == 0, err
    written = tmp_path / "pl.joined.splits.json"
    assert out.endswith("-> pl.joined.splits.json\n") and written.is_file()
    assert not (tmp_path / "pl.splits.json").exists()
    settings: dict[str, Any] = dict(join="inner", batch_size=5, seed=3, device="cpu")
    cut = dict(splits={n: tuple(t.split(":", 1)) for n, t in ranges.items()})
    for split in ("train", "val"):
        by_file = joined_samples(urls, split=split, manifest=written, **settings)
        by_dates = joined_samples(urls, split=split, **cut, **settings)
        assert by_file == by_dates and by_file


def joined_samples(urls: list[str], **settings: Any) -> list[int]:
    """The sample indices of an epoch of a loader over `urls`, in order."""
    return [i for b in build_loader(urls, **settings) for i in b["sample_index"].tolist()]


def test_bench_and_cache_on_a_join(
    inner: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = inner[:2]
    code, out, err = run(
        capsys, "bench", *urls, "--join", "inner", "--seconds", "0.2", "--no-progress", "--json"
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["store"] == f"the join of {urls[0]} and {urls[1]}"
    assert result["samples"] > 0
    folder = tmp_path / "cache"
    cache = ["cache", *urls, "--join", "inner", "--split", "all", "--folder", str(folder)]
    code, first, err = run(capsys, *cache, "--max-bytes", "64M")
    assert code == 0, err
    # every unit reads the pressure store's 3 chunks it straddles (of t and z) and the
    # surface store's 57 (of t2m and msl): all new the first time, all cached the second
    assert "split 'all': " in first and ", 0 already cached" in first
    code, again, err = run(capsys, *cache, "--max-bytes", "64M")
    assert code == 0, err
    chunks = int(again.split(": ", 1)[1].split(" chunks")[0])
    assert f"{chunks} chunks, {chunks} already cached" in again

"""Each wrong input a user can give gets an error that names it and says what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_store

from insitubatch_nodes import ZarrSource, build_loader, make_manifest


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

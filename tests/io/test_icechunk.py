"""A loader over an Icechunk repository reads exactly the version it was given."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import icechunk
import numpy as np
import pytest
import zarr

from insitubatch_nodes import build_loader, open_icechunk
from tests.helpers.batches import as_numpy
from tests.helpers.threads import our_threads

SHAPE, CHUNKS = (24, 3), (2, 3)

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


def _values(version: int) -> np.ndarray:
    return (np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE) + 1000 * version).astype(
        "float32"
    )


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str, str]:
    """A local repository with two commits on main: values `_values(1)`, then `_values(2)`
    (every chunk rewritten); tag `v1` points at the first."""
    path = tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    group = zarr.open_group(session.store, mode="w")
    group.create_array("x", shape=SHAPE, chunks=CHUNKS, dtype="float32")[...] = _values(1)
    first = session.commit("version 1")
    session = repo.writable_session("main")
    zarr.open_group(session.store, mode="r+")["x"][...] = _values(2)
    second = session.commit("version 2")
    repo.create_tag("v1", first)
    return path, first, second


def _read_all(store: Any) -> np.ndarray:
    """The whole array as the loader hands it out, put back in sample order."""
    batches = list(cpu_loader(store, split="all", batch_size=5))
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    rows = np.concatenate([as_numpy(b["x"]) for b in batches])
    assert sorted(indices.tolist()) == list(range(SHAPE[0]))
    out = np.empty(SHAPE, dtype="float32")
    out[indices] = rows
    return out


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ({}, 2),  # the tip of main
        ({"branch": "main"}, 2),
        ({"tag": "v1"}, 1),
        ({"snapshot_id": "first"}, 1),
        ({"snapshot_id": "second"}, 2),
    ],
)
def test_the_loader_reads_exactly_the_chosen_version(
    repository: tuple[Path, str, str], version: dict[str, str], expected: int
) -> None:
    path, first, second = repository
    version = {k: {"first": first, "second": second}.get(v, v) for k, v in version.items()}
    np.testing.assert_array_equal(_read_all(open_icechunk(path, **version)), _values(expected))
    assert our_threads() == []


def test_an_open_repository_or_storage_works_too(repository: tuple[Path, str, str]) -> None:
    path, first, _ = repository
    storage = icechunk.local_filesystem_storage(str(path))
    np.testing.assert_array_equal(_read_all(open_icechunk(storage, tag="v1")), _values(1))
    repo = icechunk.Repository.open(storage)
    np.testing.assert_array_equal(_read_all(open_icechunk(repo, snapshot_id=first)), _values(1))


def test_the_store_names_repository_and_version(repository: tuple[Path, str, str]) -> None:
    path, _, _ = repository
    assert str(open_icechunk(path, tag="v1")) == f"icechunk:{path}@tag=v1"


def test_bad_versions_are_refused(repository: tuple[Path, str, str]) -> None:
    path, first, _ = repository
    with pytest.raises(ValueError, match="give one of branch=, tag= or snapshot_id=, not"):
        open_icechunk(path, branch="main", snapshot_id=first)
    with pytest.raises(ValueError, match=r"at tag='v9': ref not found `v9`"):
        open_icechunk(path, tag="v9")
    with pytest.raises(ValueError, match=r"cannot open Icechunk repository .*missing"):
        open_icechunk(path.parent / "missing")


def test_a_url_is_refused_not_taken_for_a_local_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repository: tuple[Path, str, str]
) -> None:
    """A string is a local path: a URL given as one used to make a directory named after
    it (credentials and all) in the working directory, then fail as a missing repository."""
    started = tmp_path / "cwd"
    started.mkdir()
    monkeypatch.chdir(started)
    with pytest.raises(ValueError, match=r"icechunk\.s3_storage") as raised:
        open_icechunk("https://reader:hunter2@host/repo", tag="v1")
    assert "hunter2" not in str(raised.value)
    assert list(started.iterdir()) == []  # nothing written where the run started
    path, _, _ = repository
    np.testing.assert_array_equal(  # a file:// URL is the local path it names
        _read_all(open_icechunk(f"file://{path}")), _read_all(open_icechunk(path))
    )

"""Read an Icechunk repository at one branch, tag or snapshot, as a read-only zarr store.

Icechunk versions a Zarr store like git: a training run should name the exact snapshot it
read, so that a rerun (or a resume weeks later, after new commits) reads the same bytes.
The session is read-only; the store it gives is an ordinary zarr store, so the graph reads
it like any other. `icechunk` is an optional dependency (`pip install
'insitubatch-nodes[icechunk]'`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import WrapperStore

from insitubatch_nodes.io.stores.redact import redact, scrubbed, secrets_in
from insitubatch_nodes.io.stores.store_errors import first_line


class NamedStore(WrapperStore[Store]):
    """A store that says which repository and version it reads, in every error message."""

    def __init__(self, store: Store, name: str) -> None:
        super().__init__(store)
        self.name = redact(name)  # a repository's path or URL may carry credentials

    def _with_store(self, store: Store) -> NamedStore:
        return NamedStore(store, self.name)

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


def open_icechunk(
    repository: str | Path | Any,
    *,
    branch: str | None = None,
    tag: str | None = None,
    snapshot_id: str | None = None,
) -> Store:
    """A read-only store of `repository` at one version (the tip of `main` by default).

    `repository` is a local path, an `icechunk.Storage` (`icechunk.s3_storage(...)`,
    `gcs_storage`, `azure_storage`, ...) or an open `icechunk.Repository`. Give at most one
    of `branch`, `tag` and `snapshot_id`; pass the result to `build_loader` or `ZarrSource`.
    Its errors and the store's name keep credentials in a path or URL out (`redact`).

    Args:
        repository: where the repository is: a local path, an `icechunk.Storage`, or an
            open `icechunk.Repository`.
        branch: read the tip of this branch.
        tag: read the snapshot this tag names.
        snapshot_id: read this snapshot.
    """
    try:
        import icechunk
    except ImportError as err:
        raise ImportError(
            "reading Icechunk repositories needs the icechunk package: "
            "pip install 'insitubatch-nodes[icechunk]'"
        ) from err
    version = {
        name: value
        for name, value in (("branch", branch), ("tag", tag), ("snapshot_id", snapshot_id))
        if value is not None
    }
    if len(version) > 1:
        raise ValueError(
            f"give one of branch=, tag= or snapshot_id=, not {' and '.join(version)}: "
            f"a loader reads exactly one version of the repository"
        )
    version = version or {"branch": "main"}
    # Of a Storage, only its type: its repr may show the credentials it was made with.
    named = isinstance(repository, str | Path)
    secrets = secrets_in(url=str(repository)) if named else frozenset()
    where = redact(str(repository), secrets) if named else type(repository).__name__
    try:
        if isinstance(repository, icechunk.Repository):
            repo = repository
        else:
            storage = repository
            if isinstance(repository, str | Path):
                storage = icechunk.local_filesystem_storage(_local_path(repository, where))
            repo = icechunk.Repository.open(storage)
        session = repo.readonly_session(**version)
    except icechunk.IcechunkError as err:
        reason = re.sub(r"^x\s+", "", first_line(err, secrets))  # without the report's bullet
        raise ValueError(
            redact(
                f"cannot open Icechunk repository {where} at "
                + ", ".join(f"{k}={v!r}" for k, v in version.items())
                + f": {reason}",
                secrets,
            )
        ) from scrubbed(err, secrets)
    label = ",".join(f"{k}={v}" for k, v in version.items())
    return NamedStore(session.store, redact(f"icechunk:{where}@{label}", secrets))


def _local_path(repository: str | Path, where: str) -> str:
    """The local directory a path or `file://` URL names; any other URL is refused here,
    before icechunk would take it for a relative path and make directories named after
    it (credentials included)."""
    text = str(repository)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise ValueError(
            f"{where} is a URL, and open_icechunk takes a string as a local path: for a "
            f"repository in an object store pass its storage, e.g. open_icechunk("
            f"icechunk.s3_storage(bucket=..., prefix=..., from_env=True))"
        )
    return str(Path(text).expanduser().resolve())


def snapshot_id_of(store: Store) -> str | None:
    """The snapshot id an Icechunk store reads (one from `open_icechunk`, or an icechunk
    session's own store), None for any other store or without the icechunk package.

    A loader's state records it: a state saved on one snapshot is refused on another,
    since a branch's new commits change what a resume would read.

    Args:
        store: the store a loader reads.
    """
    try:
        import icechunk
    except ImportError:
        return None
    inner = store._store if isinstance(store, NamedStore) else store
    if not isinstance(inner, icechunk.IcechunkStore):
        return None
    return str(inner.session.snapshot_id)


def is_writable_icechunk(store: Store) -> bool:
    """Whether `store` is a writable Icechunk session's: what it reads may change (its own
    uncommitted writes) while its snapshot id stays the base one, so the id does not pin
    its contents.

    Args:
        store: the store a loader reads.
    """
    if snapshot_id_of(store) is None:
        return False
    inner = store._store if isinstance(store, NamedStore) else store
    return not inner.session.read_only

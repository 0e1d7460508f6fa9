"""The errors a chunk read ends in: it could not be read, or what was read is not the chunk.

Both name the variable, the chunk, its key and the store (credentials redacted), so the
user can find the object and decide: retry later, fix permissions, or restore it.
"""

from __future__ import annotations

from typing import Any

from insitubatch_nodes.io.reads.retry import ReadGaveUp
from insitubatch_nodes.io.stores.store_errors import first_line


class ChunkBytesError(ValueError):
    """Stored bytes that do not decode to their chunk.

    Args:
        reason: what is wrong, in words a user can act on.
        expected_nbytes: the decoded size the array's metadata needs, when it applies.
        actual_nbytes: the size the stored bytes declare or decode to, when known.
    """

    def __init__(
        self, reason: str, *, expected_nbytes: int | None = None, actual_nbytes: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expected_nbytes = expected_nbytes
        self.actual_nbytes = actual_nbytes


def size_mismatch(expected: int, actual: int, what: str = "decodes to") -> ChunkBytesError:
    """The error for a chunk whose bytes give `actual` bytes where `expected` are needed.

    Args:
        expected: the decoded bytes the array's metadata needs.
        actual: the bytes the stream gives (declares, holds or decodes to).
        what: the verb for `actual` ("decodes to", "declares", "is").
    """
    return ChunkBytesError(
        f"it {what} {actual} bytes where its array's metadata needs {expected}",
        expected_nbytes=expected,
        actual_nbytes=actual,
    )


class ChunkReadError(OSError):
    """A chunk could not be read or decoded; names the array, the chunk, its key and the store.

    `variable`, `coords`, `key`, `where` and `attempts` say the same for programs.

    Args:
        message: the whole text the user reads.
        variable: the array's name.
        coords: the chunk's coordinates in the array's chunk grid.
        key: the store key of the object read (the chunk, or its shard).
        where: the store, as shown to users (credentials redacted).
        attempts: how many times the read was tried.
    """

    def __init__(
        self,
        message: str,
        *,
        variable: str,
        coords: tuple[int, ...],
        key: str,
        where: str,
        attempts: int,
    ) -> None:
        super().__init__(message)
        self.variable = variable
        self.coords = coords
        self.key = key
        self.where = where
        self.attempts = attempts


class CorruptChunkError(ChunkReadError):
    """A chunk was read but its bytes are not the chunk its array's metadata describes
    (wrong size, failed checksum, undecodable stream, a shard index that points wrong).

    `expected_nbytes` and `actual_nbytes` give the sizes where they are known (else `None`);
    the other fields are `ChunkReadError`'s.

    Args:
        message: the whole text the user reads.
        expected_nbytes: the decoded size the metadata needs, when it applies.
        actual_nbytes: the size the stored bytes declare or decode to, when known.
        **where: `ChunkReadError`'s keyword arguments.
    """

    def __init__(
        self,
        message: str,
        *,
        expected_nbytes: int | None,
        actual_nbytes: int | None,
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.expected_nbytes = expected_nbytes
        self.actual_nbytes = actual_nbytes


def chunk_read_error(
    variable: str, coords: tuple[int, ...], key: str, where: str, err: BaseException
) -> ChunkReadError:
    """The error for a chunk whose read failed with `err` (after retries, if `ReadGaveUp`);
    a `CorruptChunkError` when the bytes arrived but are not the chunk (`ChunkBytesError`).

    Args:
        variable: the array's name.
        coords: the chunk's coordinates.
        key: the store key of the object read (the chunk, or its shard).
        where: the store, as shown to users (credentials redacted).
        err: what the read or the decode raised.
    """
    attempts = 1
    if isinstance(err, ReadGaveUp) and err.__cause__ is not None:
        attempts, err = err.attempts, err.__cause__
    fields: dict[str, Any] = {
        "variable": variable,
        "coords": coords,
        "key": key,
        "where": where,
        "attempts": attempts,
    }
    chunk = f"chunk {coords} of variable {variable!r} (key {key!r})"
    if isinstance(err, ChunkBytesError):
        return CorruptChunkError(
            f"{chunk} in {where} is corrupt: {err.reason}. The stored bytes do not fit the array's "
            f"metadata (an interrupted upload, a partial rewrite, a damaged file, or edited "
            f"metadata): restore the chunk, or the metadata, from a good copy",
            expected_nbytes=err.expected_nbytes,
            actual_nbytes=err.actual_nbytes,
            **fields,
        )
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return ChunkReadError(
        f"reading {chunk} from {where} failed{tries}: {type(err).__name__}: {first_line(err)}",
        **fields,
    )

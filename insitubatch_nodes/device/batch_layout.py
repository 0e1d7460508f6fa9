"""A batch's arrays laid out in one byte buffer, so a batch crosses to the device in one copy.

One large transfer reaches the link's bandwidth where several small ones pay a launch
each. Offsets are aligned so every array can be viewed in place as its own dtype, on the
host (where the batch is written) and on the device (where it arrives).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

ALIGNMENT = 256  # bytes; a multiple of every dtype's size and of a cache line


@dataclass(frozen=True)
class Field:
    """One array's place in the buffer.

    Args:
        name: the array's key in the batch.
        offset: where its bytes start (a multiple of `ALIGNMENT`).
        shape: its shape.
        dtype: its element type.
    """

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class BatchLayout:
    """Where each array of a batch lies in one byte buffer (`of_spec` makes one).

    Args:
        fields: each array's place, in batch order.
        nbytes: the buffer's size in bytes.
    """

    fields: tuple[Field, ...]
    nbytes: int

    @classmethod
    def of_spec(cls, spec: Mapping[str, tuple[tuple[int, ...], Any]]) -> BatchLayout:
        """The layout of arrays with these `(shape, dtype)`s, in this order.

        Args:
            spec: each array's shape and dtype, by name.
        """
        fields = []
        offset = 0
        for name, (shape, dtype) in spec.items():
            field = Field(name, offset, tuple(shape), np.dtype(dtype))
            fields.append(field)
            offset += -(-field.nbytes // ALIGNMENT) * ALIGNMENT
        return cls(tuple(fields), offset)

    def host_views(self, buffer: np.ndarray) -> dict[str, np.ndarray]:
        """Each array as a numpy view of its bytes of the host byte array `buffer`: every
        view keeps `buffer`'s base alive (`staging_ring` counts on it).

        Args:
            buffer: at least `nbytes` bytes (uint8).
        """
        return {
            field.name: buffer[field.offset : field.offset + field.nbytes]
            .view(field.dtype)
            .reshape(field.shape)
            for field in self.fields
        }

    def views(self, buffer: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each array as a tensor viewing its bytes of `buffer` (any device), no copy.

        Args:
            buffer: at least `nbytes` bytes (uint8).
        """
        return {field.name: _as_tensor(buffer, field) for field in self.fields}


def _as_tensor(buffer: torch.Tensor, field: Field) -> torch.Tensor:
    dtype = torch.from_numpy(np.empty(0, dtype=field.dtype)).dtype
    raw = buffer[field.offset : field.offset + field.nbytes]
    return raw.view(dtype).view(field.shape)

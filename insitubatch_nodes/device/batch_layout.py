"""Pack a batch's arrays into one byte buffer, so a batch crosses to the device in one copy.

One large transfer reaches the link's bandwidth where several small ones pay a launch
each. Offsets are aligned so every array can be viewed in place as its own dtype.
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
    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class BatchLayout:
    fields: tuple[Field, ...]
    nbytes: int

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray]) -> BatchLayout:
        return cls.of_spec({name: (a.shape, a.dtype) for name, a in arrays.items()})

    @classmethod
    def of_spec(cls, spec: Mapping[str, tuple[tuple[int, ...], Any]]) -> BatchLayout:
        """The layout of arrays with these `(shape, dtype)`s, in this order."""
        fields = []
        offset = 0
        for name, (shape, dtype) in spec.items():
            field = Field(name, offset, tuple(shape), np.dtype(dtype))
            fields.append(field)
            offset += -(-field.nbytes // ALIGNMENT) * ALIGNMENT
        return cls(tuple(fields), offset)

    def pack(self, arrays: Mapping[str, np.ndarray], into: torch.Tensor) -> None:
        """Copy each array into its place in the byte tensor `into` (on the host)."""
        for field in self.fields:
            np.copyto(_as_array(into, field), arrays[field.name], casting="no")

    def host_views(self, buffer: torch.Tensor) -> dict[str, np.ndarray]:
        """Each array as a numpy array over its bytes of the host byte tensor `buffer`."""
        return {field.name: _as_array(buffer, field) for field in self.fields}

    def views(self, buffer: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each array as a tensor viewing its bytes of `buffer` (any device), no copy."""
        return {field.name: _as_tensor(buffer, field) for field in self.fields}


def _as_array(buffer: torch.Tensor, field: Field) -> np.ndarray:
    raw = buffer[field.offset : field.offset + field.nbytes].numpy()
    return raw.view(field.dtype).reshape(field.shape)


def _as_tensor(buffer: torch.Tensor, field: Field) -> torch.Tensor:
    dtype = torch.from_numpy(np.empty(0, dtype=field.dtype)).dtype
    raw = buffer[field.offset : field.offset + field.nbytes]
    return raw.view(dtype).view(field.shape)

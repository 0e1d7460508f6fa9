"""Byte counts as people type and read them: "8GiB" in, "1.5 MiB" out.

Binary units (KiB, MiB, GiB) are what memory is sized in (default blocks are sized
against 1 GiB); decimal ones (KB, MB, GB) are accepted on the way in because people type
them.
"""

from __future__ import annotations

import math
import re

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(
    r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?:(?P<unit>[kmgt])(?P<i>i?)(?P<b>b?)|(?P<bytes>b?))\s*$",
    re.IGNORECASE,
)


def parse_nbytes(text: str, what: str = "--memory-budget") -> int:
    """Bytes from text: a plain number of bytes, or a number with a unit: `KiB`, `MiB`,
    `GiB`, `TiB` (or just `K`, `M`, `G`, `T`) are powers of 1024, `KB`, `MB`, `GB`, `TB`
    powers of 1000.

    Args:
        text: what the user typed.
        what: the option it was given to, for the error.

    Raises:
        ValueError: the text is not a size, or is below one byte.
    """
    found = _SIZE.match(text)
    if found is None:
        raise ValueError(
            f"{what} {text!r} is not a size: give bytes (1073741824) or a number with a unit "
            f"(512MiB, 8GiB, 2GB)"
        )
    unit = (found["unit"] or "").lower()
    decimal = bool(unit) and bool(found["b"]) and not found["i"]
    scale = _DECIMAL[unit] if decimal else _BINARY[unit]
    nbytes = math.floor(float(found["number"]) * scale)
    if nbytes < 1:
        raise ValueError(f"{what} {text!r} is less than one byte; give a positive size")
    return nbytes


def nbytes_text(nbytes: float) -> str:
    """Bytes in binary units with one decimal ("1.5 MiB"), plain below a KiB.

    Args:
        nbytes: a number of bytes.
    """
    if nbytes < 1024:
        return f"{round(nbytes)} B"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def size_argument(nbytes: int) -> str:
    """A size to type that is at least `nbytes` and reads back (`parse_nbytes`) as at
    least `nbytes`: GiB to one decimal when that is within 10% above, else whole MiB.

    Args:
        nbytes: the size in bytes.
    """
    tenths = math.ceil(nbytes * 10 / (1 << 30))
    text = f"{tenths // 10}GiB" if tenths % 10 == 0 else f"{tenths / 10:.1f}GiB"
    if parse_nbytes(text) >= nbytes and tenths * (1 << 30) / 10 <= 1.1 * nbytes:
        return text
    return f"{math.ceil(nbytes / (1 << 20))}MiB"

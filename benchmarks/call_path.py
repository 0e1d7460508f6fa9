"""Which library files a loader's construction and first batch pass through, in order.

A newcomer follows a batch by reading files; this counts how many files that takes and
how often the way returns to a file it already left (a sign of interleaved concerns).
It traces `build_loader` on a small local store (the caller's thread only), then the
first batch (every thread), and prints each file once, at its first visit.

    python -m benchmarks.call_path            # the two orders, one file per line
    python -m benchmarks.call_path --json     # with the full visit sequence
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import zarr

import insitubatch_nodes as ib

PACKAGE_ROOT = str(Path(ib.__file__).parent) + "/"


class FileVisits:
    """A profile hook recording the package files entered, consecutive repeats merged."""

    def __init__(self) -> None:
        self.sequence: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE_ROOT):
            return
        relative = filename[len(PACKAGE_ROOT) :]
        with self._lock:
            if not self.sequence or self.sequence[-1] != relative:
                self.sequence.append(relative)

    def summary(self) -> dict[str, Any]:
        """Files in first-visit order, their count, and the returns to a file already left."""
        seen: set[str] = set()
        order: list[str] = []
        for relative in self.sequence:
            if relative not in seen:
                seen.add(relative)
                order.append(relative)
        returns = len(self.sequence) - len(order)
        return {"files": len(order), "returns": returns, "order": order, "seq": self.sequence}


def trace_loader(root: Path) -> dict[str, dict[str, Any]]:
    """Trace build_loader and the first batch on a small store written under `root`.

    Args:
        root: A scratch folder for the store.
    """
    url = str(root / "store.zarr")
    group = zarr.open_group(url, mode="w")
    group.create_array("t2m", shape=(96, 8, 16), chunks=(4, 8, 16), dtype="float32")[...] = 1.0
    construction = FileVisits()
    sys.setprofile(construction)
    try:
        loader = ib.build_loader(url, split="all", batch_size=8, device="cpu")
    finally:
        sys.setprofile(None)
    first_batch = FileVisits()
    sys.setprofile(first_batch)
    threading.setprofile(first_batch)
    try:
        next(iter(loader))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        loader.close()
    return {"build_loader": construction.summary(), "first_batch": first_batch.summary()}


def main(argv: list[str] | None = None) -> None:
    """Print the traced orders.

    Args:
        argv: Command-line arguments (`--json` for the full record).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the full record as JSON")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        record = trace_loader(Path(scratch))
    if arguments.json:
        print(json.dumps(record, indent=1))
        return
    for name, summary in record.items():
        print(f"{name}: {summary['files']} files, {summary['returns']} returns")
        for relative in summary["order"]:
            print(f"  {relative}")


if __name__ == "__main__":
    main()

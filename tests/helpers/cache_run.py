"""A training process reading through a chunk cache, for tests that need several: it
prints one digest per batch (per epoch), then the cache counters, as JSON lines.

    python cache_run.py STORE_URL CACHE_FOLDER MAX_BYTES EPOCHS [--slow]

`--slow` reads one small block ahead and sleeps a little per batch, so that a test can
kill the process while the epoch's chunks are still being read and cached.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

from insitubatch_nodes import CacheSpec, build_loader
from tests.helpers.batches import batch_key


def main() -> None:
    url, folder, max_bytes, epochs = sys.argv[1:5]
    slow = "--slow" in sys.argv
    loader = build_loader(
        url,
        split="all",
        batch_size=4,
        device="cpu",
        decode_threads=2,
        cache=CacheSpec(folder, int(max_bytes)),
        # slow: the least pool, so that reads (and cache writes) run along the epoch
        **({"block_chunks": 2, "prefetch_blocks": 1, "shuffle_window": 1} if slow else {}),
    )
    for epoch in range(int(epochs)):
        for batch in loader:
            digest = hashlib.sha256(repr(batch_key(batch)).encode()).hexdigest()
            print(json.dumps({"epoch": epoch, "batch": digest}), flush=True)
            if slow:
                time.sleep(0.05)
        stats = loader.stats()
        print(json.dumps({"epoch": epoch, "hits": stats["cache_hits"]}), flush=True)


if __name__ == "__main__":
    main()

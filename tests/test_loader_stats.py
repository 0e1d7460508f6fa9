"""`loader.stats()`: the epoch's figures from a real run, plain numbers, counted per
epoch, and the limiting stage named as the run's shape says."""

from __future__ import annotations

import json
import time
from typing import Any

from distant_store import Distant

from insitubatch_nodes import build_loader, memory_store


def test_a_distant_store_is_named_the_limit_and_the_figures_add_up(memory_url: Any) -> None:
    url, _ = memory_url()
    store = Distant(memory_store(url.removeprefix("memory://")), 0.02)
    loader = build_loader(store, split="all", batch_size=4, block_chunks=2, device="cpu")
    samples = sum(len(batch["sample_index"]) for batch in loader)
    stats = loader.stats()
    assert json.loads(json.dumps(stats)) == stats  # plain numbers and strings
    assert stats["batches"] == len(loader) and stats["samples"] == samples
    assert stats["chunks_read"] > 0 and stats["bytes_fetched"] > 0
    assert stats["read_latency_p50_s"] >= 0.02 / 2**0.25
    assert stats["data_stall_fraction"] > 0.5  # a 20 ms store, a consumer that does nothing
    assert stats["limiting_stage"] in ("store latency", "bandwidth"), stats["evidence"]
    assert 0 < stats["reads_in_flight_mean"] <= stats["reads_in_flight_max"]


def test_a_slow_consumer_is_named_the_limit_and_each_epoch_counts_afresh(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    # without reading across epochs each epoch reads exactly its own chunks (across
    # epochs, reads run ahead into the next one and count where they ran: timing)
    counted = build_loader(url, split="all", batch_size=4, block_chunks=4, device="cpu")
    per_epoch = []
    for _ in range(2):
        assert sum(1 for _ in counted) == len(counted)
        per_epoch.append(counted.stats()["chunks_read"])
    assert per_epoch[0] == per_epoch[1] > 0  # each epoch's reads, not a running total
    # reading across epochs, so that no epoch starts with a wait for its first block
    loader = build_loader(
        url, split="all", batch_size=4, block_chunks=4, device="cpu", read_across_epochs=True
    )
    for _ in loader:
        pass
    first = loader.stats()
    for _ in loader:
        time.sleep(0.08)  # a training step much slower than reading from memory
    second = loader.stats()
    loader.close()  # it reads across epochs: its threads would outlive the test
    assert second["batches"] == first["batches"] == len(loader)
    assert second["limiting_stage"] == "consumer", second["evidence"]
    assert second["data_stall_fraction"] < 0.05


def test_a_hook_gets_the_figures_as_floats_every_n_batches(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4, block_chunks=2, device="cpu")
    logged: list[dict[str, float]] = []
    loader.log_stats_every(5, logged.append)
    batches = sum(1 for _ in loader)
    assert len(logged) == batches // 5 > 0
    assert [entry["batches"] for entry in logged] == [5.0 * (i + 1) for i in range(len(logged))]
    assert all(isinstance(v, float) for entry in logged for v in entry.values())
    assert "limiting_stage" not in logged[0] and "data_stall_fraction" in logged[0]

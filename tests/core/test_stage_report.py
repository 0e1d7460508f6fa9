"""The limiting-stage verdict on made-up epochs: each stage is named when its figures
say so, and the figures are plain numbers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from insitubatch_nodes.core.stage_report import EpochActivity, epoch_stats, limiting_stage

# An epoch of 10 s whose consumer waited half the time, with nothing saturated.
BASE = EpochActivity(
    wall_s=10.0,
    waited_s=5.0,
    batches=100,
    samples=3200,
    sample_bytes=1000,
    chunks_read=800,
    bytes_fetched=2_000_000,
    bytes_decoded=4_000_000,
    gets=800,
    read_s=40.0,
    slot_wait_s=0.0,
    most_in_flight=8,
    inflight_limit=64,
    min_rtt_s=0.03,
    latency_s=(0.035, 0.05, 0.08),
    retries=0,
    decode_cpu_s=4.0,
    decode_threads=2,
    gather_s=1.0,
    memory_held_bytes=1 << 20,
    memory_allowed_bytes=1 << 30,
)


@pytest.mark.parametrize(
    ("changes", "stage"),
    [
        ({"waited_s": 0.2}, "consumer"),
        ({"decode_cpu_s": 16.0}, "decode"),
        ({"gather_s": 8.0}, "gather"),
        ({"latency_s": (0.09, 0.2, 0.3)}, "bandwidth"),
        ({"latency_s": (0.09, 0.2, 0.3), "loop_busy_s": 4.0}, "bandwidth"),
        ({"latency_s": (0.09, 0.2, 0.3), "loop_busy_s": 6.0}, "cpu"),
        ({"latency_s": (0.09, 0.2, 0.3), "min_rtt_s": None, "least_latency_s": 0.03}, "bandwidth"),
        ({"latency_s": (0.09, 0.2, 0.3), "min_rtt_s": None}, "store latency"),
        ({"loop_busy_s": 9.0}, "store latency"),
        ({}, "store latency"),
        ({"gets": 0, "read_s": 0.0, "latency_s": None, "min_rtt_s": None}, "decode"),
        ({"batches": 0}, "unknown"),
    ],
)
def test_each_stage_is_named_when_its_figures_say_so(changes: dict, stage: str) -> None:
    found, evidence = limiting_stage(dataclasses.replace(BASE, **changes))
    assert found == stage and evidence


def test_a_binding_in_flight_limit_is_said() -> None:
    _, evidence = limiting_stage(dataclasses.replace(BASE, slot_wait_s=20.0))
    assert "in-flight limit, 64, binds" in evidence
    _, free = limiting_stage(BASE)
    assert "binds" not in free


def test_the_stats_are_plain_numbers_and_add_up() -> None:
    stats = epoch_stats(BASE)
    assert json.loads(json.dumps(stats)) == stats
    assert stats["samples_per_s"] == 320.0
    assert stats["data_stall_fraction"] == 0.5
    assert stats["reads_in_flight_mean"] == 4.0
    assert stats["read_amplification"] == 4_000_000 / 3_200_000
    assert stats["read_latency_p99_s"] == 0.08
    assert stats["limiting_stage"] == "store latency"
    assert stats["fetch_loop_busy_fraction"] == 0.0

"""Defaults that fit the store and the host (issue 16, item 2): the memory budget and the
decode threads follow the host's available memory, cores and ranks (each rank taking its
share), the block size never does, the choice is logged once, and only what cannot fit
is refused, with the numbers. Hosts are passed as `HostResources`, never faked in the OS;
the stores are real, written by zarr-python."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr

from insitubatch_nodes import AsyncFetchNode, build_loader
from insitubatch_nodes.builder.host_too_small import HostTooSmallError
from insitubatch_nodes.core.memory_bound import BLOCK_SIZING_BUDGET, sample_nbytes
from insitubatch_nodes.io.host.host_resources import (
    MAX_DECODE_THREADS,
    HostResources,
    cgroup_cpu_quota,
    cgroup_memory_left,
    local_ranks_of,
    meminfo_available,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.read_planner import ReadPlanNode

GIB = 1 << 30
MIB = 1 << 20
FIELD = (64, 64)  # float32: 16 KiB per step
STEPS = 192
LAPTOP = HostResources(memory_bytes=6 * MIB, cores=1)  # budget 3 MiB: would shrink blocks
BIG_NODE = HostResources(memory_bytes=512 * GIB, cores=64, local_ranks=8)


@pytest.fixture(scope="module")
def one_step_per_chunk(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store whose default block (64 one-step chunks, 1 MiB) is larger than an eighth
    of a small host's budget: a block sized from the host would differ between hosts."""
    path = tmp_path_factory.mktemp("host") / "steps.zarr"
    group = zarr.open_group(str(path), mode="w")
    array = group.create_array(
        "t2m", shape=(STEPS, *FIELD), chunks=(1, *FIELD), dtype="float32", fill_value=0
    )
    array[...] = np.random.default_rng(0).standard_normal((STEPS, *FIELD), dtype=np.float32)
    return str(path)


def parts(loader: Any) -> tuple[ReadPlanNode, AsyncFetchNode]:
    nodes = graph_nodes(loader.root)
    plans = next(n for n in nodes if isinstance(n, ReadPlanNode))
    fetch = next(n for n in nodes if isinstance(n, AsyncFetchNode))
    return plans, fetch


def loader_budget(loader: Any, batch_size: int) -> int:
    """The memory budget a CPU loader runs with, summed from the parts its nodes hold:
    the block slots (window + read-ahead), the batch and the reads in flight."""
    _, fetch = parts(loader)
    context = fetch.context
    batch = batch_size * sample_nbytes(context.layouts)
    inflight = context.inflight.max_bytes
    assert inflight is not None
    return context.block_slots.capacity_bytes + batch + inflight


def epoch(loader: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(b["sample_index"].numpy(), b["t2m"].numpy()) for b in loader]


def test_two_hosts_draw_the_same_batches(one_step_per_chunk: str) -> None:
    settings: dict[str, Any] = {"split": "all", "batch_size": 8, "device": "cpu", "seed": 3}
    small = build_loader(one_step_per_chunk, host=LAPTOP, **settings)
    big = build_loader(one_step_per_chunk, host=BIG_NODE, **settings)
    # Sized from the small host's 3 MiB budget, a block would be 24 chunks, from the big
    # host's 32 GiB 64: the default is sized against the fixed 1 GiB on both.
    assert parts(small)[0].block_chunks == parts(big)[0].block_chunks == 64
    assert loader_budget(small, 8) != loader_budget(big, 8)  # only IO follows the host
    for _ in range(2):  # two epochs: the second's order is the seed's too
        for (i, x), (j, y) in zip(epoch(small), epoch(big), strict=True):
            np.testing.assert_array_equal(i, j)
            np.testing.assert_array_equal(x, y)


def test_a_state_saved_on_one_host_resumes_on_another(one_step_per_chunk: str) -> None:
    settings: dict[str, Any] = {"split": "all", "batch_size": 8, "device": "cpu"}
    saved_on = build_loader(one_step_per_chunk, host=LAPTOP, **settings)
    batches = iter(saved_on)
    for _ in range(5):
        next(batches)
    state = torch.load(_saved(saved_on.state_dict()), weights_only=True)
    rest = [b["sample_index"].numpy() for b in batches]
    resumed = build_loader(one_step_per_chunk, host=BIG_NODE, **settings)
    resumed.load_state_dict(state)
    again = [b["sample_index"].numpy() for b in resumed]
    assert len(again) == len(rest) > 0
    for a, b in zip(again, rest, strict=True):
        np.testing.assert_array_equal(a, b)
    # a block size that does differ (given, here) is refused by name, on any host
    other = build_loader(one_step_per_chunk, host=BIG_NODE, block_chunks=16, **settings)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match=r"block_chunks=64 but this graph has block_chunks=16"):
        next(iter(other))


def _saved(state: dict[str, Any]) -> Any:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_local_ranks_divide_the_budget_and_the_threads(one_step_per_chunk: str) -> None:
    alone = HostResources(memory_bytes=64 * GIB, cores=32, local_ranks=1)
    shared = HostResources(memory_bytes=64 * GIB, cores=32, local_ranks=8)
    settings: dict[str, Any] = {"split": "all", "batch_size": 8, "device": "cpu"}
    one = build_loader(one_step_per_chunk, host=alone, **settings)
    eight = build_loader(one_step_per_chunk, host=shared, **settings)
    assert loader_budget(one, 8) == 32 * GIB  # half of the host's 64 GiB
    assert loader_budget(eight, 8) == 4 * GIB  # half of an eighth of it
    assert parts(one)[1].context.decode_threads == 32
    assert parts(eight)[1].context.decode_threads == 4
    few_cores = HostResources(memory_bytes=64 * GIB, cores=6, local_ranks=8)
    assert few_cores.decode_threads() == 1  # each rank one thread at least
    assert HostResources(memory_bytes=GIB, cores=256).decode_threads() == MAX_DECODE_THREADS


def test_local_world_size_is_read_from_the_environment(
    one_step_per_chunk: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    host = HostResources.read({"LOCAL_WORLD_SIZE": "8"})
    assert (host.local_ranks, host.local_ranks_from) == (8, "LOCAL_WORLD_SIZE")
    assert HostResources.read({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}).local_ranks == 4
    assert HostResources.read({}).local_ranks == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # as torchrun --nproc_per_node 8 sets it
    caplog.set_level(logging.INFO, logger="insitubatch_nodes.builder")
    loader = build_loader(one_step_per_chunk, split="all", batch_size=8, device="cpu")
    cores = len(os.sched_getaffinity(0))
    assert parts(loader)[1].context.decode_threads == max(1, cores // 8)
    (record,) = caplog.records
    found = re.search(r"memory_budget=(\d+) \(1/2 of (\d+) bytes available", record.message)
    assert found is not None, record.message
    assert "shared by 8 local ranks (LOCAL_WORLD_SIZE)" in record.message
    assert int(found[1]) == int(found[2]) // 8 // 2 == loader_budget(loader, 8)
    for bad, why in (
        ("abc", "is 'abc', which is not an int"),
        ("0", "is 0; the ranks on a host are at least 1"),
    ):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", bad)
        with pytest.raises(ValueError, match=f"LOCAL_WORLD_SIZE {why}"):
            build_loader(one_step_per_chunk, split="all", device="cpu")


def lightning_ddp_environment(local_rank: int, processes: int, nodes: int = 1) -> dict:
    """What Lightning's DDP launcher (`_SubprocessScriptLauncher._call_children_scripts`,
    lightning 2.6) puts in a rank's environment: no LOCAL_WORLD_SIZE, no RANK."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
        "NODE_RANK": "0",
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(processes * nodes),
    }


def test_ranks_started_by_lightnings_ddp_launcher_share_the_host(
    one_step_per_chunk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning sets WORLD_SIZE and LOCAL_RANK but not LOCAL_WORLD_SIZE: its ranks on one
    host would each have taken the whole host."""
    host = HostResources.read(lightning_ddp_environment(local_rank=1, processes=4))
    assert host.local_ranks == 4 and "Lightning" in host.local_ranks_from
    for name, value in lightning_ddp_environment(local_rank=1, processes=4).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    loader = build_loader(one_step_per_chunk, split="all", batch_size=8, device="cpu")
    cores = len(os.sched_getaffinity(0))
    assert parts(loader)[1].context.decode_threads == max(1, cores // 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # a launcher that says it wins
    assert HostResources.read().local_ranks == 2


def test_the_ranks_on_a_host_where_no_launcher_says_how_many() -> None:
    """On several nodes Lightning's WORLD_SIZE counts every node's ranks: on GPUs a host
    runs no more ranks than it has GPUs, and on the CPU the world size is the safe side
    (each rank takes less, never more, than its share). A process group started without
    those variables (`mp.spawn`) gives its world size the same way."""
    two_nodes = lightning_ddp_environment(local_rank=3, processes=8, nodes=2)
    assert local_ranks_of(two_nodes, gpus=8, group_size=None)[0] == 8
    assert local_ranks_of(two_nodes, gpus=0, group_size=None)[0] == 16
    one_node = lightning_ddp_environment(local_rank=0, processes=2)
    assert local_ranks_of(one_node, gpus=8, group_size=2)[0] == 2
    ranks, source = local_ranks_of({}, gpus=4, group_size=6)
    assert ranks == 4 and "process group" in source
    assert local_ranks_of({}, gpus=0, group_size=3)[0] == 3
    assert local_ranks_of({}, gpus=8, group_size=None) == (1, "no launcher variable")
    assert local_ranks_of({"LOCAL_RANK": "0"}, gpus=0, group_size=None)[0] == 1  # no world
    with pytest.raises(ValueError, match="WORLD_SIZE is 'x'"):
        local_ranks_of({"LOCAL_RANK": "0", "WORLD_SIZE": "x"}, gpus=0, group_size=None)


def test_ranks_that_train_on_the_cpu_are_not_bounded_by_the_gpus() -> None:
    """Ranks whose process group talks over gloo alone train on the CPU, one per core or
    so, not one per GPU: sixteen such ranks on a host with eight GPUs are sixteen, and
    taking them as eight would give each rank twice its share of memory and cores. A
    group over NCCL (or both) still runs one rank per GPU."""
    sixteen = lightning_ddp_environment(local_rank=0, processes=16)
    assert local_ranks_of(sixteen, gpus=8, group_size=16, group_backend="gloo")[0] == 16
    assert local_ranks_of({}, gpus=8, group_size=16, group_backend="gloo")[0] == 16
    assert local_ranks_of({}, gpus=8, group_size=16, group_backend="nccl")[0] == 8
    both = "cpu:gloo,cuda:nccl"  # torch's default where CUDA is available
    assert local_ranks_of({}, gpus=8, group_size=16, group_backend=both)[0] == 8
    assert local_ranks_of(sixteen, gpus=8, group_size=None)[0] == 8  # no group: GPUs bound


def test_an_initialised_process_group_gives_its_size(tmp_path: Path) -> None:
    """`HostResources.read` asks a real process group (gloo, on the CPU) its size and
    backend."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1
    )
    try:
        host = HostResources.read({})
    finally:
        torch.distributed.destroy_process_group()
    assert host.local_ranks == 1 and "process group" in host.local_ranks_from


def test_the_choice_is_logged_once_with_its_reasons(
    one_step_per_chunk: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="insitubatch_nodes")
    host = HostResources(memory_bytes=10 * GIB, cores=4, local_ranks=2, local_ranks_from="test")
    loader = build_loader(one_step_per_chunk, split="all", batch_size=8, device="cpu", host=host)
    for _ in range(2):
        for _ in loader:
            loader.stats()
    loader.load_state_dict(loader.state_dict())
    next(iter(loader))
    loader.close()
    (record,) = [r for r in caplog.records if r.name == "insitubatch_nodes.builder"]
    assert record.levelno == logging.INFO
    text = record.getMessage()
    assert one_step_per_chunk in text and "split 'all'" in text
    assert f"memory_budget={10 * GIB // 4} (1/2 of {10 * GIB} bytes available (given)" in text
    assert "shared by 2 local ranks (test)" in text
    assert "decode_threads=2 (4 cores / 2 local ranks (test))" in text
    assert "block_chunks=64 (at least 64 samples and 8 chunks, a block within 1/8 of " in text
    assert f"{BLOCK_SIZING_BUDGET} bytes: never the host's memory" in text
    caplog.clear()
    build_loader(
        one_step_per_chunk,
        split="all",
        device="cpu",
        host=host,
        memory_budget=64 * MIB,
        decode_threads=3,
        block_chunks=4,
    )
    (given,) = caplog.records
    assert "memory_budget=67108864 (given)" in given.getMessage()
    assert "decode_threads=3 (given)" in given.getMessage()
    assert "block_chunks=4 (given)" in given.getMessage()


def test_what_cannot_fit_is_refused_with_the_numbers(one_step_per_chunk: str) -> None:
    settings: dict[str, Any] = {"split": "all", "batch_size": 8, "device": "cpu"}
    tiny = HostResources(memory_bytes=3 * MIB, cores=2, local_ranks=2, local_ranks_from="env")
    with pytest.raises(HostTooSmallError) as refused:
        build_loader(one_step_per_chunk, host=tiny, **settings)
    least = refused.value.least_budget
    assert least is not None and least > tiny.rank_memory_bytes
    message = str(refused.value)
    assert f"these settings need memory_budget >= {least} bytes" in message
    assert f"this host has {3 * MIB // 2} bytes available for this rank" in message
    assert f"({3 * MIB} bytes, given shared by 2 local ranks (env))" in message
    assert f"memory_budget={3 * MIB // 4} bytes is too small" in message  # the plan's numbers
    # a budget below 1 GiB given alone would shrink the block and the pool's window: the
    # default ones are named
    defaults = f"block_chunks=64, shuffle_window={1 << 30}"
    assert f"pass memory_budget={least}, {defaults} to take it anyway" in message
    # the numbers are right: the least fits, given by hand; one byte less does not
    kept = {"block_chunks": 64, "shuffle_window": 1 << 30}
    taken = build_loader(one_step_per_chunk, memory_budget=least, **kept, **settings)
    assert parts(taken)[0].block_chunks == 64 and loader_budget(taken, 8) == least
    with pytest.raises(ValueError, match=f"memory_budget={least - 1} bytes is too small"):
        build_loader(one_step_per_chunk, memory_budget=least - 1, **kept, **settings)


def test_a_budget_short_of_the_need_is_raised_while_the_host_holds_it(
    one_step_per_chunk: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings: dict[str, Any] = {"split": "all", "batch_size": 8, "device": "cpu"}
    with pytest.raises(HostTooSmallError) as refused:
        build_loader(one_step_per_chunk, host=HostResources(memory_bytes=MIB, cores=1), **settings)
    least = refused.value.least_budget
    assert least is not None
    host = HostResources(memory_bytes=least + MIB, cores=1)  # half of it is too small
    caplog.set_level(logging.INFO, logger="insitubatch_nodes.builder")
    loader = build_loader(one_step_per_chunk, host=host, **settings)
    assert loader_budget(loader, 8) == least
    assert "raised to the least these settings fit in" in caplog.records[0].getMessage()
    assert sum(len(b["sample_index"]) for b in loader) == STEPS


def _arco_shaped(path: Path, steps: int = 24) -> str:
    """ARCO-ERA5's layout, metadata only: a (T, 37, 721, 1440) float32 variable chunked
    one step (154 MB per chunk) and a surface variable; no chunk is written."""
    group = zarr.open_group(str(path), mode="w")
    group.create_array(
        "temperature",
        shape=(steps, 37, 721, 1440),
        chunks=(1, 37, 721, 1440),
        dtype="float32",
    )
    group.create_array("t2m", shape=(steps, 721, 1440), chunks=(1, 721, 1440), dtype="float32")
    return str(path)


def test_an_arco_shaped_store_builds_on_a_host_with_the_memory(tmp_path: Path) -> None:
    url = _arco_shaped(tmp_path / "arco.zarr")
    settings: dict[str, Any] = {"split": "all", "batch_size": 4, "device": "cpu"}
    # the fixed 1 GiB of before refused this store at build time (issue 16)
    with pytest.raises(ValueError, match="memory_budget=1073741824 bytes is too small"):
        build_loader(url, memory_budget=GIB, **settings)
    workstation = build_loader(url, host=HostResources(memory_bytes=64 * GIB, cores=16), **settings)
    assert loader_budget(workstation, 4) == 32 * GIB
    assert parts(workstation)[0].block_chunks == 8
    eight_gpus = HostResources(memory_bytes=64 * GIB, cores=64, local_ranks=8)
    shared = build_loader(url, host=eight_gpus, **settings)  # 4 GiB each: raised to the need
    assert 4 * GIB < loader_budget(shared, 4) <= 8 * GIB
    assert parts(shared)[0].block_chunks == 8  # the same block, so the same batches
    with pytest.raises(HostTooSmallError, match=r"this host has 4294967296 bytes available"):
        build_loader(url, host=HostResources(memory_bytes=4 * GIB, cores=8), **settings)


@pytest.mark.parametrize(
    ("text", "available"),
    [
        ("MemTotal:  16 kB\nMemFree:  4 kB\nMemAvailable:   12345 kB\n", 12345 * 1024),
        ("MemTotal: 16 kB\nMemFree: 4 kB\n", None),  # kernels before 3.14
    ],
)
def test_meminfo(text: str, available: int | None) -> None:
    assert meminfo_available(text) == available


def test_cgroup_limits() -> None:
    assert cgroup_memory_left("max\n", "123\n") is None
    assert cgroup_memory_left(f"{(1 << 63) - 4096}\n", "5\n") is None  # v1: no limit
    assert cgroup_memory_left("1000\n", "250\n") == 750
    assert cgroup_memory_left("1000\n", "2000\n") == 0
    assert cgroup_cpu_quota("max 100000\n") is None
    assert cgroup_cpu_quota("150000 100000\n") == 2
    assert cgroup_cpu_quota("400000 100000\n") == 4


def test_this_host_as_read() -> None:
    host = HostResources.read({})
    usable = len(os.sched_getaffinity(0))
    if Path("/sys/fs/cgroup/cpu.max").exists():  # fewer where a cgroup quota says so
        assert 1 <= host.cores <= usable
    else:
        assert host.cores == usable
    meminfo = Path("/proc/meminfo").read_text()
    total = int(re.search(r"MemTotal:\s+(\d+) kB", meminfo)[1]) * 1024  # type: ignore[index]
    assert 0 < host.memory_bytes <= total
    assert host.memory_from in ("MemAvailable", "the cgroup's memory limit less its use")
    assert host.memory_budget() == host.memory_bytes // 2
    with pytest.raises(TypeError, match="cores must be an int >= 1"):
        HostResources(memory_bytes=GIB, cores=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="local_ranks must be >= 1"):
        HostResources(memory_bytes=GIB, cores=2, local_ranks=0)

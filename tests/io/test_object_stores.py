"""Training over a real S3 API (moto's server on loopback) through the URL and options a
user passes, faults on that server, and the client options for GCS and Azure."""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import obstore
import obstore.store
import pytest

from insitubatch_nodes import (
    ChunkReadError,
    CorruptChunkError,
    RetryPolicy,
    build_loader,
    open_store,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.batches import as_numpy, batch_key
from tests.helpers.fault_store import Faults, FaultyStore
from tests.helpers.s3_server import S3Server
from tests.helpers.stores import write_store
from tests.helpers.threads import our_threads

SMALL = {
    "t2m": ((24, 3, 4), (2, 3, 4), "float32"),
    "u10": ((24, 2), (4, 2), "int16"),
}
QUICK = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05, attempt_timeout_s=10.0)

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


def _s3_store(server: S3Server, variables: Any = SMALL) -> tuple[str, dict[str, np.ndarray]]:
    url = f"s3://{server.new_bucket()}/data/era5.zarr"
    _, truth = write_store(server.writable_store(url), variables)
    return url, truth


def _keys(loader: Any) -> list[Any]:
    return [batch_key(b) for b in loader]


def test_a_train_loop_over_s3_reads_what_was_written_and_resumes_exactly(
    s3_server: S3Server, memory_url: Any
) -> None:
    url, truth = _s3_store(s3_server)
    same_in_memory, _ = memory_url(SMALL)  # same seed, same values
    options = s3_server.options()

    def make() -> Any:
        return cpu_loader(url, split="all", batch_size=5, storage_options=options)

    loader = make()
    batches = list(loader)
    assert [batch_key(b) for b in batches] == _keys(
        cpu_loader(same_in_memory, split="all", batch_size=5)
    )
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    assert sorted(indices.tolist()) == list(range(24))
    np.testing.assert_array_equal(
        np.concatenate([as_numpy(b["t2m"]) for b in batches]), truth["t2m"][indices]
    )
    # A crash after two batches, and a new process resuming from the checkpoint.
    interrupted = make()
    iterator = iter(interrupted)
    next(iterator), next(iterator)
    state = interrupted.state_dict()
    del iterator
    resumed = make()
    resumed.load_state_dict(state)
    assert _keys(resumed) == [batch_key(b) for b in batches][2:]
    assert our_threads() == []


def test_transient_faults_on_s3_are_retried(s3_server: S3Server) -> None:
    url, _ = _s3_store(s3_server)
    options = s3_server.options()
    expected = _keys(cpu_loader(url, split="all", batch_size=5, storage_options=options))
    store = FaultyStore(open_store(url, options), Faults(transient_rate=0.3, seed=2), name=url)
    loader = cpu_loader(store, split="all", batch_size=5, retry=QUICK)
    assert _keys(loader) == expected
    (stats,) = [n.stats for n in graph_nodes(loader.root) if hasattr(n, "stats")]
    assert stats.retries == store.transient_injected() > 0


def test_a_missing_object_on_s3_reads_as_the_fill_value(s3_server: S3Server) -> None:
    url, truth = _s3_store(s3_server)
    options = s3_server.options()
    obstore.delete(obstore.store.from_url(url, **options), "t2m/c/3/0/0")
    batches = list(cpu_loader(url, split="all", batch_size=5, storage_options=options))
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    rows = np.concatenate([as_numpy(b["t2m"]) for b in batches])
    gone = (indices == 6) | (indices == 7)
    assert gone.sum() == 2 and (rows[gone] == 0).all()  # the array's fill value
    np.testing.assert_array_equal(rows[~gone], truth["t2m"][indices[~gone]])


def test_a_corrupt_object_on_s3_raises_naming_its_key_and_url(s3_server: S3Server) -> None:
    url, _ = _s3_store(s3_server)
    options = s3_server.options()
    obstore.put(obstore.store.from_url(url, **options), "u10/c/2/0", b"garbage")
    with pytest.raises(CorruptChunkError, match=rf"\(key 'u10/c/2/0'\) in {url} is corrupt"):
        list(cpu_loader(url, split="all", batch_size=5, storage_options=options))
    assert our_threads() == []


def test_the_server_going_away_mid_epoch_raises_once_in_bounded_time() -> None:
    server = S3Server.start()
    stopped = False
    try:
        url, _ = _s3_store(server, {"x": ((48, 2), (2, 2), "float32")})
        loader = cpu_loader(
            url,
            split="all",
            batch_size=2,
            block_chunks=1,
            max_inflight=1,
            prefetch_blocks=1,
            storage_options=server.options(),
            retry=QUICK,
            shuffle="block",  # reads run along the epoch (a pool reads P units first)
        )
        iterator = iter(loader)
        next(iterator)
        server.stop()
        stopped = True
        started = time.monotonic()
        with pytest.raises(ChunkReadError) as raised:
            for _ in iterator:
                pass
        elapsed = time.monotonic() - started
    finally:
        if not stopped:
            server.stop()
    message = str(raised.value)
    assert "of variable 'x' (key 'x/c/" in message and f"from {url} failed" in message
    assert raised.value.key.startswith("x/c/")
    assert elapsed < 60  # obstore's own retries (2 s here) times our 3 attempts, plus slack
    assert our_threads() == []


@pytest.mark.parametrize(
    ("url", "options", "store_type", "expected_config"),
    [
        (
            "gs://my-bucket/era5/v1.zarr",
            {"skip_signature": True, "client_options": {"timeout": "120s"}},
            obstore.store.GCSStore,
            {"bucket": "my-bucket", "skip_signature": "true"},
        ),
        (
            "az://my-container/era5/v1.zarr",
            {
                "account_name": "myaccount",
                "account_key": "a2V5",
                "client_options": {"timeout": "120s"},
            },
            obstore.store.AzureStore,
            {"container_name": "my-container", "account_name": "myaccount", "account_key": "a2V5"},
        ),
        (
            "abfs://my-container@myaccount.dfs.core.windows.net/era5/v1.zarr",
            {"sas_key": "sv=2024-01-01&sig=abc", "client_options": {"timeout": "120s"}},
            obstore.store.AzureStore,
            {"container_name": "my-container", "account_name": "myaccount"},
        ),
        (
            "s3://my-bucket/era5/v1.zarr",
            {"region": "eu-west-1", "skip_signature": True, "client_options": {"timeout": "120s"}},
            obstore.store.S3Store,
            {"bucket": "my-bucket", "region": "eu-west-1", "skip_signature": "true"},
        ),
    ],
)
def test_cloud_urls_and_options_reach_the_object_store_client(
    url: str, options: dict[str, Any], store_type: type, expected_config: dict[str, str]
) -> None:
    """The stores guide's GCS/Azure/S3 examples, up to the client: no network needed."""
    client = open_store(url, options).store  # type: ignore[attr-defined]
    assert isinstance(client, store_type)
    assert client.prefix == "era5/v1.zarr"
    assert expected_config.items() <= client.config.items()
    assert client.client_options == {"timeout": "120s"}


def test_a_misspelled_storage_option_is_named() -> None:
    with pytest.raises(ValueError, match=r"'acess_key_id' is not valid for store 'S3'"):
        cpu_loader("s3://my-bucket/era5.zarr", storage_options={"acess_key_id": "x"})

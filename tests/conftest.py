"""Fixtures shared by the tests: in-memory stores forgotten after each test, and a real S3
API on loopback for the session. Helpers the tests import live in `tests.helpers`; the
profile `HYPOTHESIS_PROFILE` names ("dev" or "ci", `tests.helpers.profiles`) is loaded
here, before any test module is collected."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from insitubatch_nodes import forget_memory_store
from tests.helpers.profiles import load_profile
from tests.helpers.stores import write_store

load_profile()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collecting imported (torch, zarr, lightning: some 400,000 objects that
    live as long as the session) out of the garbage collector's reach: a full collection,
    which tests that check memory is given back ask for, then takes milliseconds instead
    of half a second, and so do the collections Python starts by itself.

    Args:
        session: the session whose tests were collected.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture
def memory_url() -> Iterator[Callable[..., tuple[str, dict[str, np.ndarray]]]]:
    """A factory writing in-memory stores, forgotten after the test."""
    made: list[str] = []

    def make(*args: Any, **kwargs: Any) -> tuple[str, dict[str, np.ndarray]]:
        url, truth = write_store("memory", *args, **kwargs)
        made.append(url.removeprefix("memory://"))
        return url, truth

    yield make
    for name in made:
        forget_memory_store(name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A real S3 API (moto's server) on loopback, for the whole session; see s3_server.py."""
    from tests.helpers.s3_server import S3Server

    server = S3Server.start()
    try:
        yield server
    finally:
        server.stop()

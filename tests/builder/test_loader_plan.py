"""`build_loader`'s three steps seen apart: the settings checked once, one plan of every
decision made before any node exists, and the wiring, which decides nothing. A plan is a
plain value (the same settings on the same host plan equal, and it holds no node), and
wiring a plan gives the graph `build_loader` gives: the same batches and the same state."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from torchdata.nodes import BaseNode

from insitubatch_nodes import Loader, build_loader
from insitubatch_nodes.builder.loader_plan import LoaderPlan, plan_loader
from insitubatch_nodes.builder.loader_settings import (
    LoaderSettings,
    argument_names,
    check_settings,
)
from insitubatch_nodes.builder.wire_loader import wire_loader
from insitubatch_nodes.io.host.host_resources import HostResources
from tests.helpers.batches import batch_key

HOST = HostResources(memory_bytes=8 << 30, cores=2)


def settings_of(source: Any, **given: Any) -> LoaderSettings:
    """What `build_loader(source, **given)` checks its arguments into."""
    bound = inspect.signature(build_loader).bind(source, **given)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["host"]
    return check_settings(arguments)


def nested_values(value: Any) -> Iterator[Any]:
    """`value` and everything its dataclass fields, mappings and sequences hold."""
    yield value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from nested_values(getattr(value, field.name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from nested_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from nested_values(item)


def epochs(loader: Loader[Any], count: int = 2) -> list[list[tuple[Any, ...]]]:
    return [[batch_key(batch) for batch in loader] for _ in range(count)]


def test_the_settings_are_build_loaders_arguments() -> None:
    assert set(inspect.signature(build_loader).parameters) - {"host"} == argument_names()
    incomplete = dict.fromkeys(argument_names() - {"seed"}) | {"stray": 1}
    with pytest.raises(TypeError, match=r"missing \['seed'\], unknown \['stray'\]"):
        check_settings(incomplete)


def test_a_plan_is_a_plain_value(memory_url: Any) -> None:
    url, _ = memory_url()
    settings = settings_of(url, batch_size=4, device="cpu")
    assert settings == settings_of(url, batch_size=4, device="cpu")
    plan = plan_loader(settings, host=HOST)
    assert plan == plan_loader(settings, host=HOST)
    assert plan != plan_loader(settings_of(url, batch_size=8, device="cpu"), host=HOST)
    assert plan != plan_loader(settings_of(url, split="val", batch_size=4, device="cpu"), host=HOST)
    assert plan != plan_loader(settings, host=HostResources(memory_bytes=4 << 30, cores=2))
    assert not any(isinstance(value, BaseNode) for value in nested_values(plan))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.choices = plan.choices  # type: ignore[misc]
    assert isinstance(plan, LoaderPlan) and plan.placement.rank == 0


def test_the_plan_is_made_before_any_node(memory_url: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No node is constructed, even as a calculator, until the plan exists: the plan
    counts the ranks' shares and refuses a batch no rank fills by itself."""
    url, _ = memory_url({"a": ((8, 1), (4, 1), "float32")})

    def no_node(self: BaseNode[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{type(self).__name__} constructed while planning")

    with monkeypatch.context() as patched:
        patched.setattr(BaseNode, "__init__", no_node)
        plan = plan_loader(settings_of(url, split="all", batch_size=4, device="cpu"), host=HOST)
        too_large = settings_of(url, split="all", batch_size=9, drop_last=True, device="cpu")
        with pytest.raises(ValueError, match="leaves no full batch: the smallest rank holds 8"):
            plan_loader(too_large, host=HOST)
        with pytest.raises(ValueError, match="fewer than world_size=3"):
            plan_loader(settings_of(url, split="all", rank=0, world_size=3), host=HOST)
    assert plan.shares.rank_samples == 8
    assert [len(batch["sample_index"]) for batch in wire_loader(plan)] == [4, 4]


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"shuffle": "block", "drop_last": True, "rank": 1, "world_size": 2},
        {"split": "val", "evaluation": True, "rank": 1, "world_size": 2},
        {"variables": ["t2m"], "stack": True, "revisits": 3, "memory_budget": 1 << 20},
    ],
    ids=["pool", "block-rank-1", "evaluation", "stack-revisits"],
)
def test_wiring_a_plan_builds_the_graph_build_loader_builds(
    memory_url: Any, given: dict[str, Any]
) -> None:
    url, _ = memory_url()
    settings = {"batch_size": 4, "device": "cpu", "seed": 3, **given}
    built = build_loader(url, host=HOST, **settings)
    plan = plan_loader(settings_of(url, **settings), host=HOST)
    wired, again = wire_loader(plan), wire_loader(plan)  # a graph of its own each time
    try:
        drawn = epochs(built)
        assert drawn[0]
        assert epochs(wired) == drawn == epochs(again)
        assert wired.state_dict() == built.state_dict()
        assert len(wired) == len(built)
    finally:
        for loader in (built, wired, again):
            loader.close()


def test_a_wrong_setting_is_refused_before_the_store_is_opened(tmp_path: Path) -> None:
    """The settings are a step of their own: what the store does not judge is refused
    before any store is opened (here, none exists)."""
    missing = str(tmp_path / "no-store.zarr")
    with pytest.raises(ValueError, match=r"^seed must be >= 0, got -1$"):
        build_loader(missing, seed=-1, device="cpu")
    with pytest.raises(FileNotFoundError, match="no Zarr store at"):
        build_loader(missing, device="cpu")

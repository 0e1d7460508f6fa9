"""The `insitubatch` command's arguments: six commands, and the options several of them
share, each declared by one helper so that the commands cannot drift apart in what such
an option accepts or how `--help` words it.

The commands that read stores take the same positional URLs and store options
(`cli.store_options`); the variables, the manifest, the batch size, the device and the
area are declared once here too. An option whose words differ by command (the split a
command reads by default, what `--json` prints) keeps its own line, so that each
command's `--help` says what that command does with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from insitubatch_nodes.cli.bench_run import DEFAULT_SECONDS
from insitubatch_nodes.cli.demo import default_cache
from insitubatch_nodes.cli.store_options import add_store_options
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.io.reads.stored_sizes import DEFAULT_SAMPLED_CHUNKS

_VARIABLES_HELP = "default: the loader's"
"""What `--variables` says where a command reads the loader's variables by default."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `insitubatch` and its six commands (`args.command` names the one
    given)."""
    parser = argparse.ArgumentParser(prog="insitubatch")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_demo(commands)
    _add_stats(commands)
    _add_inspect(commands)
    _add_bench(commands)
    _add_split(commands)
    _add_cache(commands)
    return parser


def _store_command(
    commands: Any, name: str, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """A command that reads stores, its first argument their URLs: one, or several joined
    on time as one source.

    Args:
        commands: the subcommands of `insitubatch`.
        name: the command's name.
        help: the command's line in `insitubatch --help`.
        description: what its own `--help` says before the arguments, if anything.
    """
    command = commands.add_parser(name, help=help, description=description)
    command.add_argument(
        "url",
        nargs="+",
        help="the Zarr group (path or URL), or several, joined on time as one source",
    )
    return command


def _add_variables(command: argparse.ArgumentParser, help: str | None = _VARIABLES_HELP) -> None:
    """`--variables`: the arrays to read (default: the loader's choice).

    Args:
        command: the command's parser.
        help: what `--help` says of it (None: nothing).
    """
    command.add_argument("--variables", nargs="+", default=None, help=help)


def _add_loader_reads(command: argparse.ArgumentParser, split_help: str) -> None:
    """What the loader a command plans or runs reads: `--variables`, `--split` (default all
    of the store) and `--batch-size`, as `build_loader` takes them.

    Args:
        command: the command's parser (`inspect`, `bench`).
        split_help: what the command does with the split.
    """
    _add_variables(command)
    command.add_argument("--split", default="all", help=split_help)
    _add_batch_size(command)


def _add_manifest(command: argparse.ArgumentParser) -> None:
    """`--manifest`: a split manifest's JSON file (default: the default split)."""
    command.add_argument("--manifest", type=Path, default=None, help="split manifest JSON")


def _add_batch_size(command: argparse.ArgumentParser) -> None:
    """`--batch-size`: samples per batch, `build_loader`'s default."""
    command.add_argument("--batch-size", type=int, default=32)


def _add_device(command: argparse.ArgumentParser, help: str) -> None:
    """`--device`: where batches go, CPU or a GPU.

    Args:
        command: the command's parser.
        help: what the command does with it, and its default.
    """
    command.add_argument("--device", choices=("cpu", "cuda"), default=None, help=help)


def _add_area(command: argparse.ArgumentParser, help: str) -> None:
    """`--area N,W,S,E`: a box of latitude and longitude, as `build_loader(area=...)`.

    Args:
        command: the command's parser.
        help: what the command does with the box.
    """
    command.add_argument("--area", default=None, metavar="N,W,S,E", help=help)


def _number(text: str) -> int | float:
    """A level value typed on the command line: 500 as an int, 0.5 as a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="epoch + mid-epoch resume on a local ERA5-like store")
    demo.add_argument("--cache", type=Path, default=default_cache(), help="where the store goes")
    demo.add_argument("--time-steps", type=int, default=1460)
    demo.add_argument("--steps-per-chunk", type=int, default=8)
    _add_batch_size(demo)
    demo.add_argument("--block-chunks", type=int, default=8)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")


def _add_stats(commands: Any) -> None:
    stats = _store_command(
        commands,
        "stats",
        help="per-channel mean/std of a split, in one pass, saved beside the manifest",
    )
    _add_variables(stats, help=None)
    stats.add_argument("--split", default="train")
    _add_manifest(stats)
    stats.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write (default: MANIFEST.stats.json beside --manifest, else "
        "./STORE.stats.json)",
    )
    stats.add_argument("--spatial-dims", type=int, default=DEFAULT_SPATIAL_DIMS)
    stats.add_argument(
        "--levels",
        nargs="+",
        type=_number,
        default=None,
        help="level values to keep, e.g. 500 850 (per level: temperature_500)",
    )
    _add_area(
        stats, help="statistics of the box's grid points only, as build_loader(area=...) crops"
    )
    add_store_options(stats)


def _add_inspect(commands: Any) -> None:
    inspect = _store_command(
        commands,
        "inspect",
        help="a store's arrays, chunks, codecs, bytes per chunk and time range, and the "
        "settings build_loader would choose for it on this host",
    )
    _add_loader_reads(inspect, split_help="the split to plan for")
    inspect.add_argument(
        "--memory-budget",
        default=None,
        help="bytes, or with a unit (512MiB, 8GiB, 2GB); default build_loader's: half of "
        "this rank's share of the memory available on this host",
    )
    add_store_options(inspect)
    _add_manifest(inspect)
    _add_device(inspect, help="plan for (default: this host's)")
    inspect.add_argument(
        "--sample-chunks",
        type=int,
        default=DEFAULT_SAMPLED_CHUNKS,
        help="stored chunks (or shards) per array whose size is measured",
    )
    inspect.add_argument(
        "--window",
        type=int,
        default=1,
        metavar="STEPS",
        help="plan for inputs over this many steps up to the anchor (default 1: none)",
    )
    inspect.add_argument(
        "--lead",
        type=int,
        default=0,
        metavar="STEPS",
        help="plan for targets this many steps after the anchor (default 0: none)",
    )
    inspect.add_argument(
        "--revisits",
        type=int,
        default=1,
        metavar="K",
        help="plan for build_loader(revisits=K): each unit read K times per epoch, each "
        "visit keeping 1/K of its samples (default 1)",
    )
    _add_area(
        inspect,
        help="plan for build_loader(area=(N, W, S, E)) in degrees: the box's grid size and "
        "the chunks it touches of each array (the fraction of the reads)",
    )
    inspect.add_argument(
        "--stride",
        type=int,
        default=None,
        metavar="K",
        help="plan for build_loader(stride=K): every K-th step an anchor, --window and "
        "--lead counted in strides; says which units the stride is dealt in",
    )
    inspect.add_argument(
        "--frequency",
        default=None,
        metavar="DURATION",
        help="plan for build_loader(frequency=...), e.g. 6h, instead of --stride",
    )
    inspect.add_argument(
        "--stack",
        action="store_true",
        help="plan for build_loader(stack=True): print the stacked channels in order "
        "(variables, levels, forcings, static fields), as loader.channels gives them",
    )
    inspect.add_argument(
        "--forcings",
        default=None,
        metavar="NAME,...",
        help="plan for build_loader(forcings=[NAME, ...]): what they hold on the memory "
        "plan's forcings line, and their channels with --stack",
    )
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_bench(commands: Any) -> None:
    bench = _store_command(
        commands,
        "bench",
        help="build_loader's default graph on a store for some seconds: samples/s, MB/s, "
        "reads, reads in flight, read latency and the limiting stage",
    )
    _add_loader_reads(bench, split_help="the split to read")
    bench.add_argument(
        "--seconds", type=float, default=DEFAULT_SECONDS, help="how long to draw batches"
    )
    _add_device(bench, help="default: build_loader's")
    add_store_options(bench)
    bench.add_argument(
        "--png",
        type=Path,
        default=None,
        help="also draw throughput and reads in flight over time into this PNG (matplotlib)",
    )
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    bench.add_argument("--no-progress", action="store_true", help="no live progress bar")


def _add_split(commands: Any) -> None:
    split = _store_command(
        commands,
        "split",
        help="a split manifest cut by dates of the store's time coordinate, and what each "
        "split holds",
        description="Ranges are inclusive and a date covers its whole period: --train "
        "1979:2015 is 1979-01-01T00 through 2015-12-31T23:59; --val 2016 is all of 2016. "
        "Write FIRST:LAST or FIRST..LAST, dates as YYYY[-MM[-DD[THH[:MM]]]] (UTC).",
    )
    for name in ("train", "val", "test"):
        split.add_argument(f"--{name}", default=None, metavar="FIRST:LAST")
    split.add_argument(
        "--split",
        action="append",
        default=[],
        metavar="NAME=FIRST:LAST",
        help="a split of another name (repeatable)",
    )
    _add_variables(split)
    split.add_argument(
        "--unit-steps", type=int, default=None, help="steps per unit (default: the arrays' own)"
    )
    split.add_argument(
        "--out", type=Path, default=None, help="manifest file (default: ./STORE.splits.json)"
    )
    add_store_options(split)


def _add_cache(commands: Any) -> None:
    cache = _store_command(
        commands,
        "cache",
        help="fill a local chunk cache folder with a split's stored chunks, for "
        "build_loader(cache=CacheSpec(folder, max_bytes[, read_only=True]))",
    )
    cache.add_argument("--split", default="train", help="the split training reads")
    cache.add_argument("--folder", type=Path, required=True, help="the cache folder")
    cache.add_argument("--max-bytes", required=True, help="the cache's budget, e.g. 200G")
    _add_variables(cache)
    _add_manifest(cache)
    add_store_options(cache)

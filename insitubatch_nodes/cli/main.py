"""The `insitubatch` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from insitubatch_nodes.cli.bench_plot import require_matplotlib, save_png
from insitubatch_nodes.cli.bench_run import DEFAULT_SECONDS, run_bench
from insitubatch_nodes.cli.bench_text import format_bench
from insitubatch_nodes.cli.cache_command import prepare_cache, prepare_text
from insitubatch_nodes.cli.demo import DemoConfig, default_cache, run_demo
from insitubatch_nodes.cli.report_text import format_report
from insitubatch_nodes.cli.split_command import parsed_splits, split_manifest, split_text
from insitubatch_nodes.cli.stats_pass import compute_stats
from insitubatch_nodes.cli.store_options import add_store_options, joined_storage_options
from insitubatch_nodes.cli.store_report import inspect_store
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.byte_sizes import parse_nbytes
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.io.reads.stored_sizes import DEFAULT_SAMPLED_CHUNKS
from insitubatch_nodes.io.stores.redact import redact, secrets_in
from insitubatch_nodes.nodes.channel_stats import stats_path

_URLS_HELP = "the Zarr group (path or URL), or several, joined on time as one source"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="insitubatch")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="epoch + mid-epoch resume on a local ERA5-like store")
    demo.add_argument("--cache", type=Path, default=default_cache(), help="where the store goes")
    demo.add_argument("--time-steps", type=int, default=1460)
    demo.add_argument("--steps-per-chunk", type=int, default=8)
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--block-chunks", type=int, default=8)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")
    stats = commands.add_parser(
        "stats", help="per-channel mean/std of a split, in one pass, saved beside the manifest"
    )
    stats.add_argument(
        "url",
        nargs="+",
        help=_URLS_HELP,
    )
    stats.add_argument("--variables", nargs="+", default=None)
    stats.add_argument("--split", default="train")
    stats.add_argument("--manifest", type=Path, default=None, help="split manifest JSON")
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
    stats.add_argument(
        "--area",
        default=None,
        metavar="N,W,S,E",
        help="statistics of the box's grid points only, as build_loader(area=...) crops",
    )
    add_store_options(stats)
    _add_inspect(commands)
    _add_bench(commands)
    _add_split(commands)
    _add_cache(commands)
    args = parser.parse_args(argv)
    if args.command == "stats":
        return _stats(args)
    if args.command == "inspect":
        return _inspect(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "split":
        return _split(args)
    if args.command == "cache":
        return _cache(args)
    summary = run_demo(
        DemoConfig(
            cache=args.cache,
            time_steps=args.time_steps,
            steps_per_chunk=args.steps_per_chunk,
            batch_size=args.batch_size,
            block_chunks=args.block_chunks,
            seed=args.seed,
            progress=not args.no_progress,
        )
    )
    return 0 if summary["resume_matches"] else 1


def _number(text: str) -> int | float:
    """A level value typed on the command line: 500 as an int, 0.5 as a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _names(text: str) -> list[str]:
    """Names typed comma-separated on the command line (`--forcings a,b`), blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def default_stats_file(url: str, suffix: str = ".stats.json") -> Path:
    """`NAME.stats.json` in the working directory, NAME from the store's last path part: a
    URL's query (a signature) and userinfo never make it into a file name that is printed.

    Args:
        url: the store's URL or path, as given on the command line.
        suffix: the file's suffix (`.splits.json` for `insitubatch split`).
    """
    parts = urlsplit(url)
    name = Path(parts.path.rstrip("/")).name or parts.hostname or "store"
    return Path(name).with_suffix(suffix)


def _stats(args: argparse.Namespace) -> int:
    """Compute, save and print the statistics; a failure is one line on stderr
    (credentials redacted) and exit status 2, as for `inspect`."""
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        computed = compute_stats(
            _one_or_several(args.url),
            args.variables,
            split=args.split,
            manifest=args.manifest,
            spatial_dims=args.spatial_dims,
            storage_options=options,
            levels=args.levels,
            area=None if args.area is None else Area.parse(args.area),
            join=args.join,
        )
    except Exception as err:
        return _refused("stats", err, options, args.url)
    if args.out is not None:
        out = args.out
    elif args.manifest is not None:
        out = stats_path(args.manifest)
    else:
        out = default_stats_file(args.url[0], _joined_suffix(args.url, ".stats.json"))
    computed.save(out)
    width = max(len(c) for names in computed.channels.values() for c in names)
    for variable, names in computed.channels.items():
        nans = computed.nan_count.get(variable, [0] * len(names))
        for name, mean, std, nan in zip(
            names, computed.mean[variable], computed.std[variable], nans, strict=True
        ):
            print(f"{name:<{width}}  mean {mean:>14.6g}  std {std:>14.6g}  NaN {nan}")
    print(f"{sum(computed.count.values())} values of split {args.split!r} -> {out}")
    return 0


def _one_or_several(urls: list[str]) -> str | list[str]:
    """One URL as itself, several as the list `build_loader` joins."""
    return urls[0] if len(urls) == 1 else list(urls)


def _joined_suffix(urls: list[str], suffix: str) -> str:
    """A file's suffix that says it belongs to a join (`pl.joined.stats.json`), so that a
    join's statistics never overwrite those of its first store alone."""
    return suffix if len(urls) == 1 else ".joined" + suffix


def _add_inspect(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="a store's arrays, chunks, codecs, bytes per chunk and time range, and the "
        "settings build_loader would choose for it on this host",
    )
    inspect.add_argument(
        "url",
        nargs="+",
        help=_URLS_HELP,
    )
    inspect.add_argument("--variables", nargs="+", default=None, help="default: the loader's")
    inspect.add_argument("--split", default="all", help="the split to plan for")
    inspect.add_argument("--batch-size", type=int, default=32)
    inspect.add_argument(
        "--memory-budget",
        default=None,
        help="bytes, or with a unit (512MiB, 8GiB, 2GB); default build_loader's: half of "
        "this rank's share of the memory available on this host",
    )
    add_store_options(inspect)
    inspect.add_argument("--manifest", type=Path, default=None, help="split manifest JSON")
    inspect.add_argument(
        "--device", choices=("cpu", "cuda"), default=None, help="plan for (default: this host's)"
    )
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
    inspect.add_argument(
        "--area",
        default=None,
        metavar="N,W,S,E",
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
    bench = commands.add_parser(
        "bench",
        help="build_loader's default graph on a store for some seconds: samples/s, MB/s, "
        "reads, reads in flight, read latency and the limiting stage",
    )
    bench.add_argument("url", nargs="+", help=_URLS_HELP)
    bench.add_argument("--variables", nargs="+", default=None, help="default: the loader's")
    bench.add_argument("--split", default="all", help="the split to read")
    bench.add_argument("--batch-size", type=int, default=32)
    bench.add_argument(
        "--seconds", type=float, default=DEFAULT_SECONDS, help="how long to draw batches"
    )
    bench.add_argument(
        "--device", choices=("cpu", "cuda"), default=None, help="default: build_loader's"
    )
    add_store_options(bench)
    bench.add_argument(
        "--png",
        type=Path,
        default=None,
        help="also draw throughput and reads in flight over time into this PNG (matplotlib)",
    )
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    bench.add_argument("--no-progress", action="store_true", help="no live progress bar")


def _add_cache(commands: Any) -> None:
    cache = commands.add_parser(
        "cache",
        help="fill a local chunk cache folder with a split's stored chunks, for "
        "build_loader(cache=CacheSpec(folder, max_bytes[, read_only=True]))",
    )
    cache.add_argument("url", nargs="+", help=_URLS_HELP)
    cache.add_argument("--split", default="train", help="the split training reads")
    cache.add_argument("--folder", type=Path, required=True, help="the cache folder")
    cache.add_argument("--max-bytes", required=True, help="the cache's budget, e.g. 200G")
    cache.add_argument("--variables", nargs="+", default=None, help="default: the loader's")
    cache.add_argument("--manifest", type=Path, default=None, help="split manifest JSON")
    add_store_options(cache)


def _cache(args: argparse.Namespace) -> int:
    """Prepare the cache and say what it holds; a failure is one line on stderr
    (credentials redacted) and exit status 2."""
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        result = prepare_cache(
            _one_or_several(args.url),
            args.folder,
            parse_nbytes(args.max_bytes, "--max-bytes"),
            split=args.split,
            variables=args.variables,
            manifest=args.manifest,
            storage_options=options,
            join=args.join,
        )
    except Exception as err:
        return _refused("cache", err, options, args.url)
    print(prepare_text(result))
    return 0


def _add_split(commands: Any) -> None:
    split = commands.add_parser(
        "split",
        help="a split manifest cut by dates of the store's time coordinate, and what each "
        "split holds",
        description="Ranges are inclusive and a date covers its whole period: --train "
        "1979:2015 is 1979-01-01T00 through 2015-12-31T23:59; --val 2016 is all of 2016. "
        "Write FIRST:LAST or FIRST..LAST, dates as YYYY[-MM[-DD[THH[:MM]]]] (UTC).",
    )
    split.add_argument("url", nargs="+", help=_URLS_HELP)
    for name in ("train", "val", "test"):
        split.add_argument(f"--{name}", default=None, metavar="FIRST:LAST")
    split.add_argument(
        "--split",
        action="append",
        default=[],
        metavar="NAME=FIRST:LAST",
        help="a split of another name (repeatable)",
    )
    split.add_argument("--variables", nargs="+", default=None, help="default: the loader's")
    split.add_argument(
        "--unit-steps", type=int, default=None, help="steps per unit (default: the arrays' own)"
    )
    split.add_argument(
        "--out", type=Path, default=None, help="manifest file (default: ./STORE.splits.json)"
    )
    add_store_options(split)


def _split(args: argparse.Namespace) -> int:
    """Write the manifest and print what it holds; any failure is one line on stderr
    (credentials redacted) and exit status 2, as for inspect."""
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        ranges = {n: getattr(args, n) for n in ("train", "val", "test") if getattr(args, n)}
        for item in args.split:
            name, sep, text = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"--split {item!r}: write NAME=FIRST:LAST, e.g. val=2016")
            if name.strip() in ranges:
                raise ValueError(f"--split {item!r}: split {name.strip()!r} is given twice")
            ranges[name.strip()] = text
        if not ranges:
            raise ValueError("give at least one split, e.g. --train 1979:2015 --val 2016")
        manifest = split_manifest(
            _one_or_several(args.url),
            parsed_splits(ranges),
            args.variables,
            unit_steps=args.unit_steps,
            storage_options=options,
            join=args.join,
        )
        out = args.out
        if out is None:
            suffix = _joined_suffix(args.url, ".splits.json")
            out = default_stats_file(args.url[0], suffix)
        out.write_text(manifest.dumps())
    except Exception as err:
        return _refused("split", err, options, args.url)
    print(split_text(manifest))
    print(f"-> {out}")
    return 0


def _refused(command: str, err: Exception, options: Any, url: str | list[str]) -> int:
    """One line on stderr for a failed command (credentials redacted: of every store of a
    join), exit status 2."""
    text = " ".join(str(err).split()) or type(err).__name__
    urls = [url] if isinstance(url, str) else url
    per_store = options if isinstance(options, list) else [options] * len(urls)
    secrets = frozenset().union(*(secrets_in(o, u) for o, u in zip(per_store, urls, strict=True)))
    print(f"insitubatch {command}: {redact(text, secrets)}", file=sys.stderr)
    return 2


def _bench(args: argparse.Namespace) -> int:
    """Run the bench and print its table (or JSON); a failure is one line on stderr
    (credentials redacted) and exit status 2, as for `inspect`."""
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        if args.png is not None:
            require_matplotlib()  # before the run, not after it
        result = run_bench(
            _one_or_several(args.url),
            args.variables,
            seconds=args.seconds,
            split=args.split,
            batch_size=args.batch_size,
            device=args.device,
            storage_options=options,
            progress=not args.no_progress,
            join=args.join,
        )
        if args.png is not None:
            save_png(result, args.png)
    except Exception as err:
        return _refused("bench", err, options, args.url)
    print(json.dumps(result.to_json(), indent=2) if args.json else format_bench(result))
    if args.png is not None and not args.json:
        print(f"\nthroughput and reads in flight over time: {args.png}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    """Print the report; any failure is one line on stderr (credentials redacted) and exit
    status 2, never a traceback: the user has a URL or an option to fix, not a bug."""
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        budget = None if args.memory_budget is None else parse_nbytes(args.memory_budget)
        report = inspect_store(
            _one_or_several(args.url),
            args.variables,
            split=args.split,
            batch_size=args.batch_size,
            memory_budget=budget,
            storage_options=options,
            manifest=args.manifest,
            device=args.device,
            sampled_chunks=args.sample_chunks,
            window_steps=args.window,
            lead_steps=args.lead,
            revisits=args.revisits,
            stride=args.stride,
            frequency=args.frequency,
            stack=args.stack,
            area=None if args.area is None else Area.parse(args.area),
            forcings=None if args.forcings is None else _names(args.forcings),
            join=args.join,
        )
    except Exception as err:
        return _refused("inspect", err, options, args.url)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

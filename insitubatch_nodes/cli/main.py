"""The `insitubatch` command: each command's work and what it prints.

Every command that reads stores runs the same way (`main`): its stores' options are read,
its work is done, and any failure of either is one line on stderr with credentials
redacted and exit status 2, never a traceback, since the user has a URL or an option to
fix, not a bug. What it prints comes after, from the result. The arguments are declared
in `cli.parser`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from insitubatch_nodes.cli.bench_plot import require_matplotlib, save_png
from insitubatch_nodes.cli.bench_run import BenchResult, run_bench
from insitubatch_nodes.cli.bench_text import format_bench
from insitubatch_nodes.cli.cache_command import prepare_cache, prepare_text
from insitubatch_nodes.cli.demo import DemoConfig, run_demo
from insitubatch_nodes.cli.parser import build_parser
from insitubatch_nodes.cli.report_text import format_report
from insitubatch_nodes.cli.split_command import parsed_splits, split_manifest, split_text
from insitubatch_nodes.cli.stats_pass import compute_stats
from insitubatch_nodes.cli.store_options import joined_storage_options
from insitubatch_nodes.cli.store_report import StoreReport, inspect_store
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.byte_sizes import parse_nbytes
from insitubatch_nodes.core.manifest import SplitManifest
from insitubatch_nodes.io.stores.redact import redact, secrets_in
from insitubatch_nodes.nodes.channel_stats import ChannelStats, stats_path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names; its exit status.

    Args:
        argv: the arguments after the program's name (default: the command line's).
    """
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    work, show = _COMMANDS[args.command]
    options: Any = None
    try:
        options = joined_storage_options(args.storage_options, args.anonymous, args.url)
        result = work(args, options)
    except Exception as err:
        return _refused(args.command, err, options, args.url)
    return show(args, result)


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


def _demo(args: argparse.Namespace) -> int:
    """Run the demo; exit status 1 when the resumed epoch differs."""
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


def _names(text: str) -> list[str]:
    """Names typed comma-separated on the command line (`--forcings a,b`), blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _one_or_several(urls: list[str]) -> str | list[str]:
    """One URL as itself, several as the list `build_loader` joins."""
    return urls[0] if len(urls) == 1 else list(urls)


def _joined_suffix(urls: list[str], suffix: str) -> str:
    """A file's suffix that says it belongs to a join (`pl.joined.stats.json`), so that a
    join's statistics never overwrite those of its first store alone."""
    return suffix if len(urls) == 1 else ".joined" + suffix


def _stats(args: argparse.Namespace, options: Any) -> ChannelStats:
    """The statistics of the split, computed."""
    return compute_stats(
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


def _show_stats(args: argparse.Namespace, computed: ChannelStats) -> int:
    """Save the statistics and print them, a channel a line."""
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


def _inspect(args: argparse.Namespace, options: Any) -> StoreReport:
    """The report of the stores and the settings `build_loader` would choose."""
    budget = None if args.memory_budget is None else parse_nbytes(args.memory_budget)
    return inspect_store(
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


def _show_inspect(args: argparse.Namespace, report: StoreReport) -> int:
    """Print the report, as text or JSON."""
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_report(report))
    return 0


def _bench(args: argparse.Namespace, options: Any) -> BenchResult:
    """Draw batches for the seconds asked, and draw the PNG when asked (matplotlib is
    checked before the run, not after it)."""
    if args.png is not None:
        require_matplotlib()
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
    return result


def _show_bench(args: argparse.Namespace, result: BenchResult) -> int:
    """Print the bench's table (or JSON), and where the PNG went."""
    print(json.dumps(result.to_json(), indent=2) if args.json else format_bench(result))
    if args.png is not None and not args.json:
        print(f"\nthroughput and reads in flight over time: {args.png}")
    return 0


def _split(args: argparse.Namespace, options: Any) -> tuple[SplitManifest, Path]:
    """Cut the manifest by the dates given and write it; it and where it went."""
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
        out = default_stats_file(args.url[0], _joined_suffix(args.url, ".splits.json"))
    out.write_text(manifest.dumps())
    return manifest, out


def _show_split(args: argparse.Namespace, written: tuple[SplitManifest, Path]) -> int:
    """Print what each split holds and where the manifest went."""
    manifest, out = written
    print(split_text(manifest))
    print(f"-> {out}")
    return 0


def _cache(args: argparse.Namespace, options: Any) -> dict[str, Any]:
    """Fill the cache folder with the split's stored chunks."""
    return prepare_cache(
        _one_or_several(args.url),
        args.folder,
        parse_nbytes(args.max_bytes, "--max-bytes"),
        split=args.split,
        variables=args.variables,
        manifest=args.manifest,
        storage_options=options,
        join=args.join,
    )


def _show_cache(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Say what the cache holds."""
    print(prepare_text(result))
    return 0


_COMMANDS: dict[
    str, tuple[Callable[[argparse.Namespace, Any], Any], Callable[[argparse.Namespace, Any], int]]
] = {
    "stats": (_stats, _show_stats),
    "inspect": (_inspect, _show_inspect),
    "bench": (_bench, _show_bench),
    "split": (_split, _show_split),
    "cache": (_cache, _show_cache),
}
"""Each command that reads stores: its work, which may fail (then `main` prints one
line), and what it prints of the result."""


def _refused(command: str, err: Exception, options: Any, url: str | list[str]) -> int:
    """One line on stderr for a failed command (credentials redacted: of every store of a
    join), exit status 2."""
    text = " ".join(str(err).split()) or type(err).__name__
    urls = [url] if isinstance(url, str) else url
    per_store = options if isinstance(options, list) else [options] * len(urls)
    secrets = frozenset().union(*(secrets_in(o, u) for o, u in zip(per_store, urls, strict=True)))
    print(f"insitubatch {command}: {redact(text, secrets)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

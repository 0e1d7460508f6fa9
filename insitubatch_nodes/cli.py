"""The `insitubatch` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from insitubatch_nodes.channel_stats import stats_path
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.demo import DemoConfig, default_cache, run_demo
from insitubatch_nodes.stats_pass import compute_stats


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
    stats.add_argument("url", help="the Zarr group (path or URL)")
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
    stats.add_argument("--anonymous", action="store_true", help="unsigned object-store reads")
    args = parser.parse_args(argv)
    if args.command == "stats":
        return _stats(args)
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


def default_stats_file(url: str) -> Path:
    """`NAME.stats.json` in the working directory, NAME from the store's last path part: a
    URL's query (a signature) and userinfo never make it into a file name that is printed.

    Args:
        url: the store's URL or path, as given on the command line.
    """
    parts = urlsplit(url)
    name = Path(parts.path.rstrip("/")).name or parts.hostname or "store"
    return Path(name).with_suffix(".stats.json")


def _stats(args: argparse.Namespace) -> int:
    computed = compute_stats(
        args.url,
        args.variables,
        split=args.split,
        manifest=args.manifest,
        spatial_dims=args.spatial_dims,
        storage_options={"skip_signature": True} if args.anonymous else None,
    )
    if args.out is not None:
        out = args.out
    elif args.manifest is not None:
        out = stats_path(args.manifest)
    else:
        out = default_stats_file(args.url)
    computed.save(out)
    width = max(len(c) for names in computed.channels.values() for c in names)
    for variable, names in computed.channels.items():
        for name, mean, std in zip(
            names, computed.mean[variable], computed.std[variable], strict=True
        ):
            print(f"{name:<{width}}  mean {mean:>14.6g}  std {std:>14.6g}")
    print(f"{sum(computed.count.values())} values of split {args.split!r} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

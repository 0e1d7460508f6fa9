"""The `insitubatch` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from insitubatch_nodes.demo import DemoConfig, default_cache, run_demo


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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())

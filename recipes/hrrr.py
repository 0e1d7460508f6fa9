"""HRRR on random 128 x 128 patches of the 3 km CONUS grid: the state at t -> t+1h.

By default this writes a synthetic look-alike of HRRR-Zarr's analyses consolidated along
time (Zarr format 2, float16, 1059 x 1799 grid, (1, 150, 150) chunks: 8 x 12 per step,
Blosc lz4), scaled down to a day, then:

1. cuts a manifest (units of 4 hours) and computes per-channel mean/std of the train split
   in one pass, beside it;
2. builds the loader: window(1) -> leads([1]) on random patches seeded per sample from
   (seed, epoch), so each sample reads only the 1-4 chunks of 150 x 150 its patch touches
   (of 96 per step), stacked into channels and normalised after the device copy;
3. trains a small conv net for --steps steps, checkpointing model + optimiser + loader;
4. evaluates on fixed tiles of the val split (every tile of every anchor once).

    python recipes/hrrr.py              # write the store, train, checkpoint, evaluate
    python recipes/hrrr.py --resume     # continue from the last checkpoint

Each step prints a hash of its batch: after a kill, `--resume` prints the same hashes and
losses for the remaining steps as an uninterrupted run.

The real archive, University of Utah HRRR-Zarr (AWS us-west-1, anonymous:
`storage_options={"skip_signature": True, "region": "us-west-1"}`), holds one small
array per run x level x variable:
    s3://hrrrzarr/sfc/YYYYMMDD/YYYYMMDD_HHz_{anl|fcst}.zarr/{level}/{VAR}/{level}/{VAR}
Analyses are 2-D (y, x), one per hour, so they are not one time series; a forecast array
is (forecast hour, y, x) chunked (48 or 18, 150, 150), which the loader can read:
    python recipes/hrrr.py --url s3://hrrrzarr/sfc/20240101/20240101_00z_fcst.zarr/2m_above_ground/TMP/2m_above_ground --variables TMP
Its time axis is one chunk, so the whole run is the train split and evaluation is skipped
(not verified against the live bucket: this machine has no network).
"""  # noqa: E501

from __future__ import annotations

import argparse

import torch
import train_loop

import insitubatch_nodes as ib
from insitubatch_nodes.cli.synthetic import HRRR_GRID, HRRR_VARIABLES, write_hrrr_like


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = train_loop.recipe_parser(
        "hrrr", __doc__.splitlines()[0], time_steps=24, step="hours", grid=HRRR_GRID, hidden=16
    )
    parser.add_argument("--chunk", type=int, default=150, help="look-alike grid chunk")
    parser.add_argument("--variables", nargs="+", default=list(HRRR_VARIABLES))
    parser.add_argument("--patch", type=int, default=128)
    parser.add_argument("--eval-batches", type=int, default=4)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with train_loop.distributed(args) as where:
        rows, cols = args.grid
        data = train_loop.open_data(
            args,
            where,
            args.variables,
            look_alike=(
                f"hrrr-like-{args.time_steps}x{rows}x{cols}-c{args.chunk}.zarr",
                lambda store: write_hrrr_like(
                    store, time_steps=args.time_steps, grid=(rows, cols), chunk=args.chunk
                ),
            ),
            archive_options={"skip_signature": True, "region": "us-west-1"},
            # a forecast archive's time axis is one chunk: all of it is the train split
            fractions={"train": 1.0} if args.url else {"train": 0.75, "val": 0.25},
            widen_unit=True,
        )
        spec = ib.SampleSpec(
            {"inputs": ib.window(args.variables, steps=1), "targets": ib.leads(args.variables, [1])}
        )
        patch = (args.patch, args.patch)
        loader = data.loader(
            args,
            "train",
            spec,
            patches=ib.PatchSpec(patch),
            batch_size=args.batch_size,
            drop_last=True,
        )
        model = train_loop.train(
            loader,
            lambda: train_loop.ResidualConvNet(1, len(args.variables), args.hidden),
            args,
            where,
        )
        if args.url is None and where.rank == 0:
            evaluate(data, model, args, spec, patch)


def evaluate(
    data: train_loop.Data,
    model: torch.nn.Module,
    args: argparse.Namespace,
    spec: ib.SampleSpec,
    patch: tuple[int, int],
) -> None:
    """Fixed tiles of the val split: the same samples every time, whatever the seed."""
    tiles = data.loader(
        args,
        "val",
        spec,
        patches=ib.PatchSpec(patch, "tiles"),
        batch_size=args.batch_size,
        rank=0,
        world_size=1,
    )
    model = train_loop.unwrapped(model)
    model.eval()
    losses = []
    with torch.no_grad():
        for i, batch in enumerate(tiles):
            if i == args.eval_batches:
                break
            losses.append(train_loop.next_state_loss(model, batch).item())
    print(f"[rank 0] val tiles: {len(losses)} batches, mean loss {sum(losses) / len(losses):.6f}")


if __name__ == "__main__":
    main()

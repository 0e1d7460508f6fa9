"""ERA5, GraphCast style: two input steps (t-6h, t) -> the state at t+6h, trained in place.

By default this writes a synthetic look-alike of WeatherBench2's 1.5 degree ERA5 copy
(the real layout: Zarr format 2, float32, 121 x 240 grid, one step per chunk, (1, 121,
240) surface and (1, 13, 121, 240) pressure-level chunks, Blosc lz4), scaled down to a
few hundred steps whose time coordinate spans 1979-2018 at a coarse step, then:

1. cuts a train/val/test manifest by dates, as ClimaX splits ERA5 (--train 1979:2015
   --val 2016 --test 2017:2018), printing the dates each split holds (units of 4 steps,
   so a block's halo chunks are shared);
2. computes per-channel mean/std over the train split in one pass, beside the manifest;
3. builds the loader: window(2 steps) -> leads([1]), variables and levels stacked into
   channels, then GraphCast's forcings of each input step (`--forcings`: the TOA
   incident solar radiation of the hour before, year and day progress; computed per
   batch from the valid time and the grid, given to the inputs only as
   `forcings={"inputs": [...]}`: the model predicts no forcing), then the static fields
   GraphCast takes at every step (`land_sea_mask`, `geopotential_at_surface`: time-less
   (latitude, longitude) arrays, read once), normalised after the device copy (the
   forcings as they are defined: the model divides the radiation by an hour of full sun,
   as GraphCast normalises it by its statistics); `loader.channels` names the input
   channels;
4. trains a small conv net for --steps steps, checkpointing model + optimiser + loader.

    python recipes/era5.py                      # write the store, train, checkpoint
    python recipes/era5.py --resume             # continue from the last checkpoint
    python recipes/era5.py --train 1979:2010 --pressure-levels 500 850  # other years, 2 levels
    torchrun --nproc_per_node 2 recipes/era5.py # two ranks (nccl on GPUs, else gloo), own data each
    python recipes/era5.py --join               # the look-alike as the CDS hands it out: two stores

With `--join` the look-alike is written as two stores read as one (`build_loader(source=
[...])`, each in place): `pressure_levels.zarr` (the level variables) and `surface.zarr`
(the surface fields and the static fields, time named `valid_time` as the CDS names it),
on the same dates and grid: each store is read along its own time coordinate. The batches are
those of the one store, step for step. The CDS's own downloads are joined the same way,
e.g. (the pressure-level download on a bucket, the surface one on local disk):

    ib.build_loader(
        ["s3://bucket/era5-pressure-levels.zarr", "/data/era5-single-levels.zarr"],
        storage_options=[{"region": "eu-west-1"}, None],
        join="inner",  # the dates both hold, if they cover different periods
    )

Each step prints a hash of its batch: after a kill, `--resume` prints the same hashes and
losses for the remaining steps as an uninterrupted run.

The real archives (anonymous reads; `--url` plus the options below):

- WeatherBench2, the layout copied here (GCS, `storage_options={"skip_signature": True}`,
  6-hourly, so --lead-steps 1 = +6h):
  gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-240x121_equiangular_with_poles_conservative.zarr
  Its variable names are the defaults below, its static fields too (`--statics` with no
  name for none); its latitude/longitude and time coordinates are what the forcings are
  computed from (`--forcings` with no name for none).
- ARCO-ERA5 (hourly, 0.25 degree, one step per chunk, 721 x 1440):
  `gs://gcp-public-data-arco-era5/ar/full_37-1h-0p25deg-chunk-1.zarr-v3` with
  `--frequency 6h --unit-steps 6` for t-6h, t -> t+6h (6-hourly anchors; windows and
  leads in 6-hour steps), and `--pressure-levels 500 850` to keep 2 of its 37 levels
  (chunks are decoded whole, only those levels kept). The statistics pass reads the whole
  train split; on the real archives compute it once (`insitubatch stats URL --anonymous
  --manifest M`) and pass `--stats M.stats.json`.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
import train_loop
import xarray as xr

import insitubatch_nodes as ib
from insitubatch_nodes.cli.split_command import parsed_splits
from insitubatch_nodes.cli.synthetic import (
    WB2_LEVEL_VARIABLES,
    WB2_STATICS,
    WB2_SURFACE,
    write_weatherbench2_like,
)
from insitubatch_nodes.core.solar_geometry import ACCUMULATION_SECONDS, SOLAR_CONSTANT

# GraphCast's forcings (its FORCING_VARS), computed here as it defines them
GRAPHCAST_FORCINGS = (
    "toa_incident_solar_radiation",
    "year_progress_sin",
    "year_progress_cos",
    "day_progress_sin",
    "day_progress_cos",
)


FULL_SUN_HOUR = SOLAR_CONSTANT * ACCUMULATION_SECONDS  # J m-2: about the radiation's most


class ScaledInputs(torch.nn.Module):
    """`model` fed its input channels divided by `scales` (the forcings leave the loader
    as they are defined: the radiation in J m-2, millions, beside channels of order 1)."""

    def __init__(self, model: torch.nn.Module, scales: list[float]) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("scales", torch.tensor(scales).reshape(1, 1, -1, 1, 1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # (B, steps, C, H, W)
        return self.model(inputs / self.scales)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = train_loop.recipe_parser(
        "era5",
        __doc__.splitlines()[0],
        time_steps=120,
        step="6-hourly steps",
        grid=(121, 240),
        hidden=32,
    )
    parser.add_argument("--surface", nargs="+", default=list(WB2_SURFACE))
    parser.add_argument("--levels", nargs="*", default=list(WB2_LEVEL_VARIABLES))
    parser.add_argument(
        "--statics", nargs="*", default=list(WB2_STATICS), help="static fields, input only"
    )
    parser.add_argument(
        "--forcings",
        nargs="*",
        default=list(GRAPHCAST_FORCINGS),
        help="forcings of each input step, computed per batch (default: GraphCast's)",
    )
    parser.add_argument("--stride", type=int, default=1, help="steps between the two inputs")
    parser.add_argument("--lead-steps", type=int, default=1, help="target lead in steps")
    parser.add_argument("--stats", type=Path, default=None, help="precomputed stats JSON")
    for name, default in (("train", "1979:2015"), ("val", "2016"), ("test", "2017:2018")):
        parser.add_argument(f"--{name}", default=default, metavar="FIRST:LAST")
    parser.add_argument(
        "--pressure-levels", nargs="+", type=int, default=None, help="levels kept, by value"
    )
    parser.add_argument(
        "--frequency", default=None, help="anchors every so often, e.g. 6h (hourly archives)"
    )
    parser.add_argument(
        "--join",
        action="store_true",
        help="write the look-alike as a pressure-level and a surface store, read as one",
    )
    return parser.parse_args(argv)


JOINED = ("pressure_levels.zarr", "surface.zarr")


def write_joined(folder: Path, time_steps: int, grid: tuple[int, int]) -> None:
    """The look-alike split as the CDS hands ERA5 out: the level variables in one store,
    the surface and static fields in another whose time is `valid_time`, as the CDS's
    downloads name it (each variable chunked as in the one store)."""
    whole = folder / "whole.zarr"
    write_weatherbench2_like(whole, time_steps=time_steps, grid=grid)
    ds = xr.open_zarr(whole)
    levels = [name for name in ds.data_vars if "level" in ds[name].dims]
    ds[levels].to_zarr(folder / JOINED[0], zarr_format=2)
    ds.drop_vars(levels).rename(time="valid_time").to_zarr(folder / JOINED[1], zarr_format=2)
    shutil.rmtree(whole)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with train_loop.distributed(args) as where:
        variables = [*args.surface, *args.levels]
        rows, cols = args.grid
        data = train_loop.open_data(
            args,
            where,
            [*variables, *args.statics],
            look_alike=(
                f"wb2-like-{args.time_steps}x{rows}x{cols}{'-joined' if args.join else ''}.zarr",
                (
                    lambda store: (
                        write_joined(store, args.time_steps, (rows, cols))
                        if args.join
                        else write_weatherbench2_like(
                            store, time_steps=args.time_steps, grid=(rows, cols)
                        )
                    )
                ),
            ),
            joined=JOINED if args.join else (),
            archive_options={"skip_signature": True},
            date_splits=parsed_splits({"train": args.train, "val": args.val, "test": args.test}),
            levels=args.pressure_levels,
            stats=args.stats,
        )
        spec = ib.SampleSpec(
            {
                "inputs": ib.window([*variables, *args.statics], steps=2, stride=args.stride),
                "targets": ib.leads(variables, [args.lead_steps]),
            }
        )
        loader = data.loader(
            args,
            "train",
            spec,
            batch_size=args.batch_size,
            drop_last=True,
            frequency=args.frequency,
            forcings={"inputs": args.forcings},
        )
        assert loader.channels is not None  # stacked
        channels = loader.channels["inputs"]  # variables, levels, forcings, static fields
        predicted = len(loader.channels["targets"])  # the variables and levels
        if where.rank == 0:
            extra = channels[predicted:]  # the forcings, then the static fields
            shown = [*channels[:6], "...", *extra] if extra else channels[:6]
            print(f"channels ({len(channels)}): {', '.join(shown)}", flush=True)
        scales = [FULL_SUN_HOUR if c == "toa_incident_solar_radiation" else 1.0 for c in channels]
        train_loop.train(
            loader,
            lambda: ScaledInputs(
                train_loop.ResidualConvNet(2, len(channels), args.hidden, predicted), scales
            ),
            args,
            where,
        )


if __name__ == "__main__":
    main()

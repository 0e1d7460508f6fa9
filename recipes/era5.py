"""ERA5, GraphCast style: two input steps (t-6h, t) -> the state at t+6h, trained in place.

By default this writes a synthetic look-alike of WeatherBench2's 1.5 degree ERA5 copy
(the real layout: Zarr format 2, float32, 121 x 240 grid, one 6-hourly step per chunk,
(1, 121, 240) surface and (1, 13, 121, 240) pressure-level chunks, Blosc lz4), scaled down
to a few weeks, then:

1. cuts a train/val/test manifest (units of 4 steps, so a block's halo chunks are shared);
2. computes per-channel mean/std over the train split in one pass, beside the manifest;
3. builds the loader: window(2 steps) -> leads([1]), variables and levels stacked into
   channels, normalised after the device copy;
4. trains a small conv net for --steps steps, checkpointing model + optimiser + loader.

    python recipes/era5.py                      # write the store, train, checkpoint
    python recipes/era5.py --resume             # continue from the last checkpoint
    torchrun --nproc_per_node 2 recipes/era5.py # two ranks (gloo on CPU), own data each

Each step prints a hash of its batch: after a kill, `--resume` prints the same hashes and
losses for the remaining steps as an uninterrupted run.

The real archives (anonymous reads; `--url` plus the options below):

- WeatherBench2, the layout copied here (GCS, `storage_options={"skip_signature": True}`,
  6-hourly, so --lead-steps 1 = +6h):
  gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-240x121_equiangular_with_poles_conservative.zarr
  Its variable names are the defaults below.
- ARCO-ERA5 (hourly, 0.25 degree, one step per chunk, 721 x 1440):
  `gs://gcp-public-data-arco-era5/ar/full_37-1h-0p25deg-chunk-1.zarr-v3` with
  `--lead-steps 6 --stride 6` for t-6h, t -> t+6h. The statistics pass reads the whole
  train split; on the real archives compute it once (`insitubatch stats URL --anonymous
  --manifest M`) and pass `--stats M.stats.json`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from train_loop import add_run_arguments, start_distributed, stop_distributed, train

import insitubatch_nodes as ib
from insitubatch_nodes.synthetic import WB2_LEVEL_VARIABLES, WB2_SURFACE, write_weatherbench2_like

DEFAULT_WORKDIR = Path.home() / ".cache" / "insitubatch-nodes" / "recipes" / "era5"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a real archive instead of the look-alike")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--time-steps", type=int, default=120, help="look-alike length")
    parser.add_argument("--grid", type=int, nargs=2, default=[121, 240], help="look-alike grid")
    parser.add_argument("--surface", nargs="+", default=list(WB2_SURFACE))
    parser.add_argument("--levels", nargs="*", default=list(WB2_LEVEL_VARIABLES))
    parser.add_argument("--stride", type=int, default=1, help="steps between the two inputs")
    parser.add_argument("--lead-steps", type=int, default=1, help="target lead in steps")
    parser.add_argument("--unit-steps", type=int, default=4, help="steps per shuffled unit")
    parser.add_argument("--stats", type=Path, default=None, help="precomputed stats JSON")
    parser.add_argument("--hidden", type=int, default=32)
    add_run_arguments(parser, steps=20)
    return parser.parse_args(argv)


def open_data(args: argparse.Namespace, rank: int) -> tuple[str, dict[str, object] | None]:
    """The archive, or the look-alike (written once, by rank 0)."""
    if args.url is not None:
        return args.url, {"skip_signature": True}
    rows, cols = args.grid
    store = args.workdir / f"wb2-like-{args.time_steps}x{rows}x{cols}.zarr"
    if rank == 0 and not (store / ".zgroup").exists():
        args.workdir.mkdir(parents=True, exist_ok=True)
        write_weatherbench2_like(store, time_steps=args.time_steps, grid=(rows, cols))
        print(f"wrote {store}", flush=True)
    return str(store), None


def prepare(
    url: str, options: dict[str, object] | None, args: argparse.Namespace, rank: int
) -> tuple[Path, Path]:
    """Manifest (units of --unit-steps) and its stats file, made once (rank 0 under DDP)."""
    manifest_path = args.workdir / "manifest.json"
    stats_file = args.stats or ib.stats_path(manifest_path)
    variables = [*args.surface, *args.levels]
    if rank == 0 and not manifest_path.exists():
        source = ib.ZarrSource.open(url, variables, storage_options=options)
        geometry = ib.SampleGeometry.from_layouts(source.layouts, unit_length=args.unit_steps)
        manifest_path.write_text(ib.make_manifest(geometry).dumps())
    if rank == 0 and not stats_file.exists():
        stats = ib.compute_stats(url, variables, manifest=manifest_path, storage_options=options)
        stats.save(stats_file)
        print(
            f"stats of {sum(len(c) for c in stats.channels.values())} channels -> "
            f"{stats_file.name}",
            flush=True,
        )
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return manifest_path, stats_file


class Forecaster(torch.nn.Module):
    """Two stacked input steps in, the next state out (a residual on the last input)."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(2 * channels, hidden, 3, padding=1),
            torch.nn.GELU(),
            torch.nn.Conv2d(hidden, channels, 3, padding=1),
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # (B, 2, C, H, W)
        return inputs[:, -1] + self.net(inputs.flatten(1, 2))


def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch["inputs"]), batch["targets"][:, 0])


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    where = start_distributed()
    url, options = open_data(args, where.rank)
    manifest, stats = prepare(url, options, args, where.rank)
    variables = [*args.surface, *args.levels]
    spec = ib.SampleSpec(
        {
            "inputs": ib.window(variables, steps=2, stride=args.stride),
            "targets": ib.leads(variables, [args.lead_steps]),
        }
    )
    loader = ib.build_loader(
        url,
        split="train",
        spec=spec,
        stack=True,
        normalise=stats,
        manifest=manifest,
        batch_size=args.batch_size,
        block_chunks=args.block_chunks,
        seed=args.seed,
        drop_last=True,
        device="cpu",
        storage_options=options,
    )
    layouts = ib.ZarrSource.open(url, variables, manifest=manifest, storage_options=options).layouts
    channels = ib.batch_channels(layouts, spec, stacked=True)["inputs"]
    if where.rank == 0:
        print(f"channels ({len(channels)}): {', '.join(channels[:6])}, ...", flush=True)
    torch.manual_seed(args.seed)
    model: torch.nn.Module = Forecaster(len(channels), args.hidden)
    if where.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(
        loader=loader,
        model=model,
        optimiser=optimiser,
        loss_fn=loss_fn,
        args=args,
        workdir=args.workdir,
        where=where,
    )
    stop_distributed()


if __name__ == "__main__":
    main()

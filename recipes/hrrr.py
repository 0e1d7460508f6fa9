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
from pathlib import Path

import torch
from train_loop import add_run_arguments, start_distributed, stop_distributed, train

import insitubatch_nodes as ib
from insitubatch_nodes.synthetic import HRRR_GRID, HRRR_VARIABLES, write_hrrr_like

DEFAULT_WORKDIR = Path.home() / ".cache" / "insitubatch-nodes" / "recipes" / "hrrr"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a real archive instead of the look-alike")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--time-steps", type=int, default=24, help="look-alike length (hours)")
    parser.add_argument("--grid", type=int, nargs=2, default=list(HRRR_GRID))
    parser.add_argument("--chunk", type=int, default=150, help="look-alike grid chunk")
    parser.add_argument("--variables", nargs="+", default=list(HRRR_VARIABLES))
    parser.add_argument("--patch", type=int, default=128)
    parser.add_argument("--unit-steps", type=int, default=4, help="steps per shuffled unit")
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16)
    add_run_arguments(parser, steps=20)
    return parser.parse_args(argv)


def open_data(args: argparse.Namespace, rank: int) -> tuple[str, dict[str, object] | None]:
    if args.url is not None:
        return args.url, {"skip_signature": True, "region": "us-west-1"}
    rows, cols = args.grid
    store = args.workdir / f"hrrr-like-{args.time_steps}x{rows}x{cols}-c{args.chunk}.zarr"
    if rank == 0 and not (store / ".zgroup").exists():
        args.workdir.mkdir(parents=True, exist_ok=True)
        write_hrrr_like(store, time_steps=args.time_steps, grid=(rows, cols), chunk=args.chunk)
        print(f"wrote {store}", flush=True)
    return str(store), None


def prepare(
    url: str, options: dict[str, object] | None, args: argparse.Namespace, rank: int
) -> tuple[Path, Path]:
    manifest_path = args.workdir / "manifest.json"
    stats_file = ib.stats_path(manifest_path)
    if rank == 0 and not manifest_path.exists():
        args.workdir.mkdir(parents=True, exist_ok=True)
        source = ib.ZarrSource.open(url, args.variables, storage_options=options)
        unit = max(args.unit_steps, source.geometry.unit_length)
        geometry = ib.SampleGeometry.from_layouts(source.layouts, unit_length=unit)
        fractions = {"train": 1.0} if args.url else {"train": 0.75, "val": 0.25}
        manifest_path.write_text(ib.make_manifest(geometry, fractions).dumps())
    if rank == 0 and not stats_file.exists():
        stats = ib.compute_stats(
            url, args.variables, manifest=manifest_path, storage_options=options
        )
        stats.save(stats_file)
        print(f"stats of {len(stats.channels)} channels -> {stats_file.name}", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return manifest_path, stats_file


class Nowcaster(torch.nn.Module):
    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(channels, hidden, 3, padding=1),
            torch.nn.GELU(),
            torch.nn.Conv2d(hidden, channels, 3, padding=1),
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # (B, 1, C, y, x)
        return inputs[:, -1] + self.net(inputs[:, -1])


def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch["inputs"]), batch["targets"][:, 0])


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    where = start_distributed()
    url, options = open_data(args, where.rank)
    manifest, stats = prepare(url, options, args, where.rank)
    spec = ib.SampleSpec(
        {"inputs": ib.window(args.variables, steps=1), "targets": ib.leads(args.variables, [1])}
    )
    common = {
        "spec": spec,
        "stack": True,
        "normalise": stats,
        "manifest": manifest,
        "block_chunks": args.block_chunks,
        "seed": args.seed,
        "device": "cpu",
        "storage_options": options,
    }
    patch = (args.patch, args.patch)
    loader = ib.build_loader(
        url,
        split="train",
        patches=ib.PatchSpec(patch),
        batch_size=args.batch_size,
        drop_last=True,
        **common,  # type: ignore[arg-type]
    )
    torch.manual_seed(args.seed)
    model: torch.nn.Module = Nowcaster(len(args.variables), args.hidden)
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
    if args.url is None and where.rank == 0:
        evaluate(url, model, args, common, patch)
    stop_distributed()


def evaluate(
    url: str,
    model: torch.nn.Module,
    args: argparse.Namespace,
    common: dict[str, object],
    patch: tuple[int, int],
) -> None:
    """Fixed tiles of the val split: the same samples every time, whatever the seed."""
    tiles = ib.build_loader(
        url,
        split="val",
        patches=ib.PatchSpec(patch, "tiles"),
        batch_size=args.batch_size,
        rank=0,
        world_size=1,
        **common,  # type: ignore[arg-type]
    )
    model.eval()
    losses = []
    with torch.no_grad():
        for i, batch in enumerate(tiles):
            if i == args.eval_batches:
                break
            losses.append(loss_fn(model, batch).item())
    print(f"[rank 0] val tiles: {len(losses)} batches, mean loss {sum(losses) / len(losses):.6f}")


if __name__ == "__main__":
    main()

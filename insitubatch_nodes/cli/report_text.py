"""`insitubatch inspect`'s text: a `StoreReport` laid out for a terminal.

Two tables (the arrays' layout, with a line for each array zarr decodes rather than the
library, and why; their bytes per chunk), then the time range and the loader's defaults
with the memory plan, each figure in binary units with the exact bytes beside those a
user may copy into `build_loader`. Plain text only, no colours or box-drawing, so that it
reads the same piped into a file or pasted into an issue.
"""

from __future__ import annotations

from collections.abc import Sequence

from insitubatch_nodes.cli.defaults_report import LoaderDefaults
from insitubatch_nodes.cli.joined_stores_report import joined_store_text, static_only_text
from insitubatch_nodes.cli.store_report import AreaReport, StoreReport, TimeReport
from insitubatch_nodes.core.byte_sizes import nbytes_text
from insitubatch_nodes.core.memory_bound import LARGEST_BUDGET
from insitubatch_nodes.io.reads.stored_sizes import StoredSizes


def _shape_text(shape: Sequence[int] | None) -> str:
    return "-" if shape is None else " x ".join(str(s) for s in shape)


def _dimensions_text(shape: Sequence[int]) -> str:
    return f"({_shape_text(shape)})" if shape else "(scalar)"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _sizes_text(sizes: StoredSizes) -> str:
    if sizes.failed is not None:
        return f"not measured: {sizes.failed}"
    if sizes.mean is None or sizes.smallest is None or sizes.largest is None:
        return f"none written ({sizes.sampled} sampled)"
    text = nbytes_text(sizes.mean)
    low, high = nbytes_text(sizes.smallest), nbytes_text(sizes.largest)
    return text if low == high else f"{text} ({low} .. {high})"


def _sampled_text(sizes: StoredSizes) -> str:
    text = f"{sizes.sampled} of {sizes.of}"
    return text + (f", {sizes.missing} missing" if sizes.missing else "")


def format_report(report: StoreReport) -> str:
    """The report as plain text for a terminal: the arrays' layout, their bytes per chunk,
    the time range, and the loader's defaults (or its refusal and a budget that fits).

    Args:
        report: what `inspect_store` found.
    """
    if report.stores:
        lines = [f"store   {report.store}  (join={report.join!r})"]
        time = None if report.time is None else report.time.name
        lines += [f"  {joined_store_text(joined, time)}" for joined in report.stores]
    else:
        lines = [f"store   {report.store}  (Zarr v{report.zarr_format})"]
        if report.static_only:
            lines.append(f"  {static_only_text(report.static_only, report.store)}")
    if report.others:
        lines.append(
            "others  " + ", ".join(f"{n} {_dimensions_text(s)}" for n, s in report.others.items())
        )
    if report.statics:
        lines.append(
            "statics "
            + ", ".join(f"{n} {_dimensions_text(s)}" for n, s in report.statics.items())
            + " (static fields: read once, in every sample)"
        )
    if report.forcings:
        lines.append(
            "forcings "
            + ", ".join(report.forcings)
            + " (computed per batch from each sample's valid time and the grid)"
        )
    lines += ["", f"arrays ({len(report.arrays)} selected)"]
    layout_rows = [
        [
            a.name,
            ", ".join(a.dims) if a.dims else "-",
            _shape_text(a.shape),
            a.dtype,
            _shape_text(a.chunks),
            _shape_text(a.shards),
            a.codecs,
        ]
        for a in report.arrays
    ]
    lines += _table(
        ["name", "dims", "shape", "dtype", "chunk", "shard", "codecs"], layout_rows, set()
    )
    lines += [
        f"  {a.name}: read through zarr, at more CPU per chunk ({a.read_through_zarr})"
        for a in report.arrays
        if a.read_through_zarr is not None
    ]
    lines += [
        f"  {name}: batches hold its values {text}"
        for name, text in report.decoding.items()
        if not text.startswith("stored values")
    ]
    lines += [f"  warning: {warning}" for warning in report.warnings]
    if report.area is not None:
        lines += ["", *_area_lines(report.area)]
    lines += [
        "",
        "bytes per chunk (stored: measured on the sampled chunks, mean (min .. max); "
        "ratio: decoded / stored)",
    ]
    byte_rows = []
    for a in report.arrays:
        stored = a.stored_chunk
        ratio = f"{a.decoded_chunk_bytes / stored.mean:.2f}" if stored.mean else "-"
        row = [
            a.name,
            str(a.steps_per_chunk)
            + ("" if a.steps_per_shard is None else f" ({a.steps_per_shard}/shard)"),
            nbytes_text(a.decoded_chunk_bytes),
            _sizes_text(stored),
            ratio,
            _sampled_text(stored) + ("" if stored.how == "chunk objects" else f" ({stored.how})"),
        ]
        byte_rows.append(row)
    lines += _table(
        ["name", "steps/chunk", "decoded", "stored", "ratio", "sampled"], byte_rows, {2, 4}
    )
    for a in report.arrays:
        if a.stored_shard is not None:
            lines.append(
                f"  {a.name}: stored per shard {_sizes_text(a.stored_shard)}, "
                f"{_sampled_text(a.stored_shard)} shards sampled"
            )
    lines.append("")
    lines += _time_lines(report.time)
    lines.append("")
    lines += _loader_lines(report.loader)
    return "\n".join(lines)


def _time_lines(time: TimeReport | None) -> list[str]:
    if time is None:
        return ["time    no 1-D time coordinate along the sample axis"]
    line = f"time    {time.name}: {time.first} .. {time.last}, {time.count} steps"
    if time.step is not None:
        line += f", every {time.step}"
    attrs = ", ".join(
        f"{k} {v!r}" for k, v in (("units", time.units), ("calendar", time.calendar)) if v
    )
    if not time.decoded:
        line += " (stored values: " + (f"{attrs} not decoded" if attrs else "no CF units") + ")"
    elif attrs:
        line += f" ({attrs})"
    return [line]


def _host_line(loader: LoaderDefaults) -> str:
    host = loader.host
    ranks = "1 local rank" if host.local_ranks == 1 else f"{host.local_ranks} local ranks"
    cores = "1 core" if host.cores == 1 else f"{host.cores} cores"
    return (
        f"  host: {nbytes_text(host.memory_bytes)} available ({host.memory_from}), "
        f"{cores}, {ranks} ({host.local_ranks_from})"
    )


def _loader_lines(loader: LoaderDefaults) -> list[str]:
    lines = [
        f"build_loader defaults on this host, for batch_size={loader.batch_size}, "
        f"device {loader.device}",
        _host_line(loader),
        f"  split {loader.split!r}: {loader.split_samples} samples, shuffled in units of "
        f"{loader.unit_steps} step" + ("" if loader.unit_steps == 1 else "s"),
    ]
    if loader.stride_units is not None:
        lines.append(f"  stride: {loader.stride_units}")
    budget = f"{nbytes_text(loader.memory_budget)} ({loader.memory_budget} bytes)"
    if loader.plan is None:
        lines.append(f"  memory_budget {budget}: {loader.memory_from}")
        lines.append(f"  refused: {loader.refused}")
        if loader.fitting_budget is None:
            lines.append(
                f"  no budget up to {nbytes_text(LARGEST_BUDGET)} fits the defaults: select "
                f"fewer variables, or pass block_chunks and max_inflight to build_loader"
            )
        else:
            lines.append(
                f"  the defaults fit in {loader.fitting_budget} bytes "
                f"({nbytes_text(loader.fitting_budget)}): --memory-budget "
                f"{loader.fitting_argument}, or build_loader(memory_budget="
                f"{loader.fitting_budget})"
            )
        lines.append(f"  decode threads    {loader.decode_threads} ({loader.threads_from})")
        return lines
    plan = loader.plan
    held = loader.batches_held
    batches = "  batch" if held == 1 else f"  batches ({held} held)"
    reads = "self-tuning" + (
        "" if loader.reads_in_flight is None else f", about {loader.reads_in_flight} at most"
    )
    blocks_ahead = plan.read_ahead_bytes // max(1, plan.block_bytes)
    rows = [
        ("memory_budget", f"{budget}: {loader.memory_from}"),
        (
            "block_chunks",
            f"{loader.block_chunks} ({loader.block_samples} samples, "
            f"{nbytes_text(plan.block_bytes)} per block at most; the same on every host)",
        ),
        ("decode threads", f"{loader.decode_threads} ({loader.threads_from})"),
        ("reads in flight", f"{reads} (within {nbytes_text(plan.inflight_bytes)})"),
        *_pool_rows(loader),
        ("memory plan", ""),
        ("  shuffle window", _plan_bytes(plan.window_bytes)),
        (batches, _plan_bytes(plan.batch_bytes)),
        ("  reads in flight", _plan_bytes(plan.inflight_bytes)),
        *([("  static fields", _plan_bytes(plan.static_bytes))] if plan.static_bytes else []),
        *([("  forcings", _plan_bytes(plan.forcing_bytes))] if plan.forcing_bytes else []),
        ("  read-ahead", _plan_bytes(plan.read_ahead_bytes) + f": up to {blocks_ahead} blocks"),
        ("  total", _plan_bytes(loader.memory_budget)),
    ]
    width = max(len(name) for name, _ in rows)
    lines += [f"  {name:<{width}}  {value}".rstrip() for name, value in rows]
    for key, names in (loader.channels or {}).items():
        lines.append(f"  channels of {key!r} (stack=True): {', '.join(names)}")
    return lines


def _pool_rows(loader: LoaderDefaults) -> list[tuple[str, str]]:
    """The pool shuffle's size and the mixing it gives, predicted before any read."""
    if loader.pool_size is None:
        return []
    rows = [("shuffle", f"pool of {loader.pool_size} units ({loader.pool_from})")]
    if loader.spec_span is not None:
        before, after = loader.spec_span
        without = loader.pool_without_windows
        rows.append(
            (
                "  windows",
                f"samples reach {-before} step(s) back and {after} ahead of their anchor: a "
                f"unit's slot also holds the chunks that reach crosses into, so the window "
                f"holds {loader.pool_size} units"
                + (f" where one-step samples would fit {without}" if without else ""),
            )
        )
    if loader.revisits > 1:
        without = loader.pool_without_revisits
        rows.append(
            (
                "  revisits",
                f"each unit read {loader.revisits} times per epoch, each visit keeping "
                f"1/{loader.revisits} of its samples: the window holds {loader.pool_size} "
                f"visits"
                + (f" where one visit per unit would fit {without}" if without else "")
                + f", for {loader.revisits}x the reads",
            )
        )
    if loader.mixing is not None:
        pool, uniform = loader.mixing
        rows.append(
            (
                "  mixing",
                f"up to about {pool:.1f} distinct units per batch of {loader.batch_size}; a "
                f"uniform shuffle of the split: {uniform:.1f} ({pool / uniform:.2f}x)",
            )
        )
    if loader.ramp is not None:
        rows.append(("  ramp", _ramp_text(loader)))
    return rows


def _ramp_text(loader: LoaderDefaults) -> str:
    """What the pool's ramp buys (a first batch that waits for less) and costs (batches
    that draw from fewer units), so the trade-off of `pool_ramp` is visible before a run."""
    ramp = loader.ramp
    assert ramp is not None
    first = _units_read(loader, ramp.first_units, ramp.first_samples)
    wait = f"the first batch waits for {first} to be read"
    if ramp.batches == 0 and ramp.followed_all:
        return f"pool_ramp={loader.pool_ramp}: {wait}; no batch draws from a pool still filling"
    if not ramp.followed_all:
        drawn = f"at least each epoch's first {ramp.batches} batches draw from a pool still "
        drawn += "filling, about"
        mixed = f"{ramp.distinct_units:.1f} distinct units per batch over those"
    elif ramp.batches == 1:
        drawn = "each epoch's first batch draws from a pool still filling, with about"
        mixed = f"{ramp.distinct_units:.1f} distinct units"
    else:
        drawn = f"each epoch's first {ramp.batches} batches draw from a pool still filling, about"
        mixed = f"{ramp.distinct_units:.1f} distinct units per batch over them"
    filled = _units_read(loader, ramp.filled_units, ramp.filled_samples)
    return (
        f"pool_ramp={loader.pool_ramp}: {drawn} {mixed}; {wait}, where filling the pool "
        f"first (pool_ramp=0) would wait for {filled}"
    )


def _units_read(loader: LoaderDefaults, units: int, samples: int) -> str:
    """Units to be read, with their samples and the blocks they are read in."""
    text = f"{units} unit{'s' if units != 1 else ''} ({samples} samples"
    if loader.block_chunks is not None:
        blocks = -(-units // loader.block_chunks)
        text += f", {blocks} block{'s' if blocks != 1 else ''}"
    return text + ")"


def _plan_bytes(nbytes: int) -> str:
    return f"{nbytes_text(nbytes):>10}  ({nbytes} bytes)"


def _area_lines(area: AreaReport) -> list[str]:
    """The box's grid and the chunks it touches, per array."""
    (lat0, lat1), (lon0, lon1) = area.latitudes, area.longitudes
    lines = [
        f"area {tuple(area.box)} (north, west, south, east): {area.grid[0]} x {area.grid[1]} "
        f"grid points (latitude {lat0:g} .. {lat1:g}, longitude {lon0:g} .. {lon1:g} eastward)"
    ]
    for name, (touched, every) in area.chunks.items():
        lines.append(
            f"  {name}: reads {touched} of {every} chunks per time chunk "
            f"({touched / every:.1%} of the reads)"
        )
    return lines

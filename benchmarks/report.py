"""The run's rows as a markdown table, the issue's targets as ratios, and a PNG plot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from insitubatch_nodes.core.inflight_target import CEILING

OURS = "insitubatch-nodes"
NAIVE_W2 = "naive DataLoader w2"
DECODE = "ceiling: decode-only, all cores"
PEERS = ("insitubatch 0.2.0", "xbatcher w2")

Rows = list[dict[str, Any]]
Key = tuple[str, int, float]


def _key(row: dict[str, Any]) -> Key:
    return row["codec"], row["steps_per_chunk"], row["latency_ms"]


def groups(rows: Rows) -> dict[Key, Rows]:
    """Rows by scenario, in run order."""
    found: dict[Key, Rows] = {}
    for row in rows:
        found.setdefault(_key(row), []).append(row)
    return found


def title(key: Key) -> str:
    codec, steps, latency = key
    return f"{codec}, {steps} step{'s' if steps > 1 else ''} per chunk, {latency:.0f} ms per read"


def markdown(rows: Rows) -> str:
    lines = []
    for key, group in groups(rows).items():
        ours = _rate(group, OURS)
        lines += [
            f"\n### {title(key)}\n",
            "| loader | samples/s steady | samples/s whole run | MB/s | ours / this | "
            "first batch s | reads/sample | RSS growth MB | gap score | distinct chunks "
            "/ batch (x uniform) | time distance x uniform | valid |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in group:
            if "skipped" in r:
                lines.append(f"| {r['loader']} | {r['skipped']} |" + "  |" * 10)
                continue
            theirs = steady_rate(r)
            ratio = ours / theirs if ours and theirs else None
            lines.append(
                f"| {r['loader']} | {_fmt(r.get('steady_samples_per_s'), 0)} | "
                f"{r['samples_per_s']:.0f} | {r['MB_per_s']:.0f} | "
                f"{_fmt(ratio)} | {_fmt(r.get('first_batch_s'))} | "
                f"{_fmt(r.get('reads_per_sample'))} | {_fmt(r.get('rss_growth_MB'), 0)} | "
                f"{_fmt(r.get('shuffle_gap_score'))} | "
                f"{_mixed(r)} | "
                f"{_fmt(r.get('time_distance_ratio'))} | {r['valid']} |"
            )
    return "\n".join(lines) + "\n"


def targets(rows: Rows) -> str:
    """Issue 3's targets, each as measured ratios from this run (zstd, the issue's codec),
    on steady rates: samples/s after the first batch, whose wait is a column of its own."""
    by = groups(rows)
    lines = [
        "## Against the targets of issue 3\n",
        "| target | measured | met |",
        "|---|---|---|",
    ]

    def add(target: str, measured: str, met: bool | None) -> None:
        lines.append(f"| {target} | {measured} | {_met(met)} |")

    for steps, floor in ((24, 0.7), (1, 0.5)):
        local = by.get(("zstd", steps, 0.0), [])
        unit = f"{steps} step{'s' if steps > 1 else ''}/chunk"
        _ratio_line(add, f"local, {unit}: >= {floor}x decode-only", local, DECODE, floor)
        _ratio_line(add, f"local, {unit}: >= 3x naive w2", local, NAIVE_W2, 3.0)
    delayed = [k for k in by if k[0] == "zstd" and k[1] == 1 and k[2] > 0]
    for key in delayed:
        group = by[key]
        latency = key[2]
        _ratio_line(add, f"{latency:.0f} ms, 1 step/chunk: >= 10x naive w2", group, NAIVE_W2, 10)
        decode = _rate(by.get(("zstd", 1, 0.0), []), DECODE)
        ours = _rate(group, OURS)
        # chunk reads per second the in-flight limit allows, as samples (4 variables, 1 step)
        variables = 4
        inflight = CEILING / (latency / 1000) / variables  # the self-tuning's hard ceiling
        if ours and decode:
            bound = min(decode, inflight)
            add(
                f"{latency:.0f} ms, 1 step/chunk: >= 0.7x min(decode, {CEILING} in flight / "
                f"{latency:.0f} ms) = {bound:.0f} samples/s",
                f"{ours:.0f} / {bound:.0f} = {ours / bound:.2f}x",
                ours / bound >= 0.7,
            )
    # the budget is the one each run's loader said it chose (the host's share by default)
    ours_rows = [r for r in rows if r["loader"] == OURS and "rss_growth_MB" in r]
    if ours_rows:
        over = [r["rss_growth_MB"] / (1.5 * r["memory_budget_MB"] + 300) for r in ours_rows]
        budgets = sorted({r["memory_budget_MB"] for r in ours_rows})
        add(
            f"RSS growth <= 1.5x the budget the loader chose ({', '.join(map(str, budgets))} "
            "MB) + 300 MB",
            f"{min(r['rss_growth_MB'] for r in ours_rows):.0f}-"
            f"{max(r['rss_growth_MB'] for r in ours_rows):.0f} MB, at most "
            f"{max(over):.1%} of the bound",
            max(over) <= 1,
        )
    for peer in PEERS:
        ratios = []
        for key, group in by.items():
            ours, theirs = _rate(group, OURS), _rate(group, peer)
            if ours and theirs:
                ratios.append((ours / theirs, key))
        skipped = [r["skipped"] for r in rows if r["loader"] == peer and "skipped" in r]
        if ratios:
            worst, where = min(ratios)
            measured = f"{min(r for r, _ in ratios):.2f}x-{max(r for r, _ in ratios):.2f}x; "
            measured += f"lowest: {title(where)}"
            add(f">= 1.0x {peer} in every scenario", measured, worst >= 1.0)
        elif skipped:
            add(f">= 1.0x {peer} in every scenario", skipped[0], None)
    return "\n".join(lines) + "\n"


def _ratio_line(
    add: Callable[[str, str, bool | None], None],
    target: str,
    group: Rows,
    other: str,
    floor: float,
) -> None:
    ours, theirs = _rate(group, OURS), _rate(group, other)
    if ours and theirs:
        add(target, f"{ours:.0f} / {theirs:.0f} = {ours / theirs:.2f}x", ours / theirs >= floor)


def steady_rate(row: dict[str, Any]) -> float | None:
    """Samples/s after the first batch (ceilings have no first batch: their plain rate)."""
    rate = row.get("steady_samples_per_s") or row.get("samples_per_s")
    return None if rate is None else float(rate)


def _rate(group: Rows, loader: str) -> float | None:
    for r in group:
        if r["loader"] == loader and "samples_per_s" in r and r.get("valid"):
            return steady_rate(r)
    return None


def _met(met: bool | None) -> str:
    return "not run" if met is None else ("yes" if met else "no")


def _mixed(row: dict[str, Any]) -> str:
    """Distinct chunks per batch with its ratio to a uniform shuffle's, or nothing (the
    ceilings yield no batches)."""
    if row.get("distinct_units_per_batch") is None:
        return ""
    return f"{row['distinct_units_per_batch']:.1f} ({row['distinct_units_ratio']:.2f})"


def _fmt(value: Any, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _colour(loader: str) -> str:
    if loader == OURS:
        return "tab:red"
    return "tab:grey" if loader.startswith("ceiling") else "tab:blue"


def plot(rows: Rows, path: Path) -> str:
    """Samples/s per loader, one panel per scenario (log scale; ceilings hatched)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        return "no plot: matplotlib is missing (pip install -e '.[bench]')"
    by = groups(rows)
    columns = 2
    panels = len(by)
    figure, axes = plt.subplots(
        -(-panels // columns), columns, figsize=(13, 2.9 * -(-panels // columns)), squeeze=False
    )
    for axis, (key, group) in zip(axes.flat, by.items(), strict=False):
        shown = [r for r in group if "samples_per_s" in r]
        labels = [r["loader"] + ("" if r["valid"] else " (INVALID)") for r in shown]
        values = [steady_rate(r) or 0.0 for r in shown]
        bars = axis.barh(labels, values, color=[_colour(r["loader"]) for r in shown])
        for bar, r in zip(bars, shown, strict=True):
            if "ceiling" in r["loader"]:
                bar.set_hatch("//")
        axis.bar_label(bars, labels=[f"{v:.0f}" for v in values], fontsize=7, padding=2)
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlim(min(values) / 2, max(values) * 3)
        axis.invert_yaxis()
        axis.tick_params(labelsize=7)
        axis.set_title(title(key), fontsize=9)
        axis.set_xlabel("samples/s after the first batch (log)", fontsize=8)
        skipped = [r for r in group if "skipped" in r]
        if skipped:
            axis.annotate(
                "; ".join(f"{r['loader']} {r['skipped']}" for r in skipped),
                (0.99, 0.02),
                xycoords="axes fraction",
                ha="right",
                fontsize=6,
            )
    for axis in list(axes.flat)[panels:]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"plot: {path}"

"""The defaults against hand tuning and against the upstream peer, store by store.

A default that adapts must do about as well as the best setting a user could have found by
hand for that store, and beat what they would run otherwise. Each scenario is a store
(the synthetic ERA5-like one at 1 or 24 steps per chunk, or an ARCO-ERA5-shaped one:
154 MB chunks, few steps, batch 4) behind a delay per read and optionally a bandwidth cap.
In each, these run, each run a fresh process and every setting once per repeat (so that
drift of the machine falls on all of them alike):

- ours at its defaults;
- ours with `max_inflight` fixed at each of a sweep (for the ARCO store, the hand tuning a
  user found before the defaults adapted: an 8 GiB budget and few reads in flight);
- `insitubatch` 0.2.0 at each of its own sweep of `max_inflight` (`peer.py`; skipped
  without a Python >= 3.12).

The best fixed setting of each sweep is picked on the odd repeats and scored on the even
ones: picking and scoring on the same runs would favour a sweep by its own noise. The
table gives medians with their ranges over the scoring repeats, and the ratios of the
defaults to the best of ours and to the peer's best. Rates are whole first epochs of a
fresh process (start-up included, as the peer's one pass is) and steady rates: for ours
the epochs after the first, for the peer its one pass after its first batch (a long run
sees those). The ARCO rows also give the memory the loader said it would
hold and the process's peak RSS.

    python -m benchmarks.defaults --repeats 4
    python -m benchmarks.defaults --repeats 2 --only arco/0 arco/30
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zarr

from benchmarks import peer
from benchmarks.stores import ARCO_VARIABLES, ensure_arco_store, ensure_store
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES

# One run of ours: argv is store, delay s, bandwidth B/s (0: none), variables, batch,
# epochs, then the settings as JSON. Prints one JSON line.
OURS = """
import json, logging, statistics, sys, time
from pathlib import Path
from benchmarks.latency_store import open_latency_store
from benchmarks.measure import peak_rss_mb
from insitubatch_nodes import build_loader
path, delay, bandwidth, variables, batch, epochs, settings = sys.argv[1:8]
said = []
class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("insitubatch_nodes").addHandler(Said())
logging.getLogger("insitubatch_nodes").setLevel(logging.INFO)
store = (open_latency_store(path, float(delay), bandwidth_bytes_s=float(bandwidth) or None)
         if float(delay) or float(bandwidth) else path)  # a local store as users open one
started = time.perf_counter()
loader = build_loader(store, variables.split(","), split="all", batch_size=int(batch),
                      device="cpu", **json.loads(settings))
rates, verdict = [], None
for epoch in range(int(epochs)):
    samples = 0
    for batch in loader:
        samples += len(batch["sample_index"])
    rates.append(samples / (time.perf_counter() - started))
    verdict = loader.stats().get("limiting_stage")
    started = time.perf_counter()
budget = next((w.split("memory_budget=")[1].split()[0] for w in said if "memory_budget=" in w),
              None)
print(json.dumps({"first": rates[0], "steady": statistics.median(rates[1:] or rates),
                  "peak_rss_MB": peak_rss_mb(), "memory_budget": budget,
                  "limiting_stage": verdict}))
"""


@dataclass(frozen=True)
class Scenario:
    """A store, how it is reached, and what is swept on it."""

    label: str
    steps_per_chunk: int  # 0: the ARCO-shaped store
    delay_ms: int
    bandwidth_mb_s: int  # 0: no cap
    ours_fixed: tuple[tuple[str, dict[str, Any]], ...]
    peer_fixed: tuple[int, ...]

    @property
    def arco(self) -> bool:
        return self.steps_per_chunk == 0

    @property
    def batch_size(self) -> int:
        return 4 if self.arco else 32

    @property
    def variables(self) -> tuple[str, ...]:
        return ARCO_VARIABLES if self.arco else ERA5_VARIABLES


SWEEP = tuple((f"max_inflight={n}", {"max_inflight": n}) for n in (16, 64, 256, 1024))
PEER_SWEEP = (16, 64, 256, 1024)
# What a user found by hand for ARCO's layout before the defaults adapted (issue 16).
ARCO_BY_HAND = tuple(
    (
        f"8 GiB, max_inflight={n}, block_chunks=2",
        {"memory_budget": 8 << 30, "max_inflight": n, "block_chunks": 2},
    )
    for n in (2, 4, 8, 16)
)
SCENARIOS = (
    Scenario("1/30", 1, 30, 0, SWEEP, PEER_SWEEP),
    Scenario("24/30", 24, 30, 0, SWEEP, PEER_SWEEP),
    Scenario("1/100", 1, 100, 0, SWEEP, PEER_SWEEP),
    Scenario("24/100", 24, 100, 0, SWEEP, PEER_SWEEP),
    Scenario("24/30/200", 24, 30, 200, SWEEP, PEER_SWEEP),
    Scenario("1/0", 1, 0, 0, SWEEP, PEER_SWEEP),
    Scenario("24/0", 24, 0, 0, SWEEP, PEER_SWEEP),
    Scenario("arco/0", 0, 0, 0, ARCO_BY_HAND, (2, 4, 8)),
    Scenario("arco/30", 0, 30, 0, ARCO_BY_HAND, (2, 4, 8)),
)
STEPS = {1: 480, 24: 1920}


def _ours(scenario: Scenario, store: Path, settings: dict[str, Any], epochs: int) -> dict:
    """One run of ours in a fresh interpreter: its rates, memory and verdict, or the
    reason it refused the setting."""
    argv = [
        str(store),
        str(scenario.delay_ms / 1000),
        str(scenario.bandwidth_mb_s * 1e6),
        ",".join(scenario.variables),
        str(scenario.batch_size),
        str(epochs),
        json.dumps(settings),
    ]
    done = subprocess.run([sys.executable, "-c", OURS, *argv], capture_output=True, text=True)
    if done.returncode:
        if "memory_budget" in done.stderr:
            return {"refused": done.stderr.strip().splitlines()[-1]}
        raise RuntimeError(f"ours with {settings} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _peer(scenario: Scenario, store: Path, interpreter: Path, inflight: int, samples: int) -> dict:
    """One pass of the peer over the whole store: its rate and memory, or why it failed."""
    settings = peer.matching(
        peer.PeerSettings(max_inflight=inflight),
        scenario.steps_per_chunk or 1,
        _unit_bytes(store, scenario.variables),
    )
    try:
        drained, report = peer.run_peer(
            interpreter,
            str(store),
            scenario.variables,
            scenario.delay_ms / 1000,
            scenario.batch_size,
            samples,
            3600.0,
            settings,
            bandwidth_bytes_s=scenario.bandwidth_mb_s * 1e6,
        )
    except RuntimeError as failed:
        return {"refused": str(failed)}
    return {
        "first": drained.order.size / drained.seconds,
        "steady": drained.steady_samples_per_s or drained.order.size / drained.seconds,
        "peak_rss_MB": report["peak_rss_MB"],
    }


def _unit_bytes(store: Path, variables: tuple[str, ...]) -> int:
    """Decoded bytes of one chunk of every variable: what the peer's block is sized by."""
    group = zarr.open_group(str(store), mode="r")
    return sum(group[name].dtype.itemsize * math.prod(group[name].chunks) for name in variables)


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _best(runs: dict[str, list[dict]], key: str) -> str | None:
    """The setting with the best median on the odd (picking) repeats."""
    fits = [s for s, rs in runs.items() if rs and all("refused" not in r for r in rs)]
    if not fits:
        return None
    return max(fits, key=lambda s: statistics.median(r[key] for r in runs[s][0::2]))


def main(argv: list[str] | None = None) -> None:
    """Print one table row per scenario, then the ARCO rows' memory.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="an even number, 2 or more")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run of ours")
    parser.add_argument("--arco-steps", type=int, default=12, help="time steps of the ARCO store")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    parser.add_argument("--python312", default=None, help="interpreter for the peer")
    parser.add_argument("--no-peer", action="store_true", help="leave insitubatch 0.2.0 out")
    parser.add_argument("--out", type=Path, default=None, help="also write the runs as JSON")
    parser.add_argument(
        "--only", nargs="+", metavar="LABEL", help="e.g. 1/30 24/30/200 arco/0 (default: all)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 2 or args.repeats % 2:
        parser.error("--repeats must be even: half pick the best fixed setting, half score it")
    wanted = [s for s in SCENARIOS if not args.only or s.label in args.only]
    if not wanted:
        parser.error(f"--only {args.only} names no scenario")
    interpreter = None
    if not args.no_peer:
        python = peer.find_python(args.python312)
        interpreter = peer.ensure_venv(args.cache, python) if python else None
        if interpreter is None:
            print(f"({peer.NAME} left out: no Python >= 3.12 found)")
    print(
        "| scenario | defaults: first epoch | steady | best of ours (picked on odd runs) | "
        "its steady | defaults / best | peer's best | its first epoch | its steady | "
        "defaults / peer: first, steady | verdict |"
    )
    print("|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|")
    everything: dict[str, Any] = {}
    for scenario in wanted:
        if scenario.arco:
            store = ensure_arco_store(args.cache, args.arco_steps)
            samples = args.arco_steps
        else:
            store = ensure_store(
                args.cache, STEPS[scenario.steps_per_chunk], scenario.steps_per_chunk, "zstd"
            )
            samples = STEPS[scenario.steps_per_chunk]
        ours: dict[str, list[dict]] = {"defaults": []}
        ours.update({name: [] for name, _ in scenario.ours_fixed})
        theirs: dict[str, list[dict]] = {str(n): [] for n in scenario.peer_fixed}
        settings = {"defaults": {}, **dict(scenario.ours_fixed)}
        for _ in range(args.repeats):
            for name in ours:
                ours[name].append(_ours(scenario, store, settings[name], args.epochs))
            for n in scenario.peer_fixed if interpreter else ():
                theirs[str(n)].append(_peer(scenario, store, interpreter, n, samples))
        everything[scenario.label] = {"ours": ours, "peer": theirs}
        defaults = ours.pop("defaults")[1::2]
        first = [r["first"] for r in defaults]
        steady = [r["steady"] for r in defaults]
        best = _best(ours, "steady")
        best_steady = [r["steady"] for r in ours[best][1::2]] if best else []
        peer_best = _best(theirs, "first") if interpreter else None
        peer_first = [r["first"] for r in theirs[peer_best][1::2]] if peer_best else []
        peer_steady = [r["steady"] for r in theirs[peer_best][1::2]] if peer_best else []
        row = [
            scenario.label,
            _median_range(first),
            _median_range(steady),
            best or "all refused",
            _median_range(best_steady) if best_steady else "-",
            f"{statistics.median(steady) / statistics.median(best_steady):.2f}"
            if best_steady
            else "-",
            f"max_inflight={peer_best}" if peer_best else "-",
            _median_range(peer_first) if peer_first else "-",
            _median_range(peer_steady) if peer_steady else "-",
            f"{statistics.median(first) / statistics.median(peer_first):.2f}, "
            f"{statistics.median(steady) / statistics.median(peer_steady):.2f}"
            if peer_first
            else "-",
            defaults[-1].get("limiting_stage") or "-",
        ]
        print("| " + " | ".join(row) + " |", flush=True)
        if scenario.arco:
            rss = max(r["peak_rss_MB"] for r in defaults)
            print(
                f"|  | defaults said memory_budget={defaults[-1]['memory_budget']} bytes; "
                f"peak RSS {rss:.0f} MB | | | | | | | | | |"
            )
        refused = [s for s, rs in {**ours, **theirs}.items() if any("refused" in r for r in rs)]
        if refused:
            print(f"|  | refused or failed: {', '.join(refused)} | | | | | | | | | |")
    if args.out:
        args.out.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()

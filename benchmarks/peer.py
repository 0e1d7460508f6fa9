"""The upstream peer, `insitubatch` 0.2.0 from PyPI, which needs Python >= 3.12.

It gets its own virtualenv under the benchmark cache (made once, reused), and runs each
scenario as a subprocess (`insitubatch_driver.py`) on the same store, through the same timed
loop and checksums as every other loader. Where no Python >= 3.12 is found, the peer is
skipped and the table says why.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.measure import Drained
from insitubatch_nodes.core.memory_bound import DEFAULT_MEMORY_BUDGET, default_block_chunks

VERSION = "0.2.0"
NAME = f"insitubatch {VERSION}"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PeerSettings:
    """Its knobs: the same shuffle window and reads in flight as our defaults.

    `block_chunks` is set per store to the block size our builder picks for it
    (`matching`), so both shuffle, and amortise each block's fixed cost, over the same
    number of chunks; `max_inflight=64` matches ours, so the latency rows compare engines,
    not concurrency limits (its own default is 32, which would halve its ceiling at 30 ms).
    `prefetch_depth` stays at its default of 2 batches.
    """

    block_chunks: int = 8
    max_inflight: int = 64
    prefetch_depth: int = 2


def matching(settings: PeerSettings, unit_samples: int, unit_bytes: int) -> PeerSettings:
    """`settings` with our default block size for chunks of `unit_samples` samples and
    `unit_bytes` bytes (all variables) under our default 1 GiB memory budget."""
    chunks = default_block_chunks(unit_samples, unit_bytes, DEFAULT_MEMORY_BUDGET)
    return replace(settings, block_chunks=chunks)


def find_python(explicit: str | None = None) -> str | None:
    """A Python >= 3.12 interpreter: `explicit`, then python3.12/3.13 on PATH, then pyenv's
    installed versions (its shims only answer for the selected version)."""
    candidates = [explicit] if explicit else []
    candidates += [shutil.which(name) for name in ("python3.12", "python3.13")]
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.1[2-9]*/bin/python3"))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def ensure_venv(cache: Path, python: str) -> Path:
    """The venv's interpreter, with insitubatch installed (once; later runs reuse it)."""
    venv = cache / f"py312-insitubatch-{VERSION}"
    interpreter = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists():
        return interpreter
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(interpreter), "-m", "pip", "install", "--quiet", f"insitubatch=={VERSION}"],
        check=True,
    )
    marker.touch()
    return interpreter


def run_peer(
    interpreter: Path,
    path: str,
    variables: tuple[str, ...],
    latency_s: float,
    batch_size: int,
    max_samples: int,
    max_seconds: float,
    settings: PeerSettings,
    bandwidth_bytes_s: float = 0.0,
    epochs: int = 1,
    cache_dir: Path | None = None,
    cache_budget_bytes: int = 0,
) -> tuple[Drained, dict[str, Any]]:
    """One scenario in a fresh interpreter: what it yielded, and its own report.

    Args:
        interpreter: the peer's venv's Python (`ensure_venv`).
        path: the store's folder.
        variables: the arrays to read.
        latency_s: delay added to every read (0: the store as it is).
        batch_size: samples per batch.
        max_samples: stop after this many samples.
        max_seconds: or after this long.
        settings: its knobs.
        bandwidth_bytes_s: replies also cross one link of this rate (0: no cap).
        epochs: whole epochs of one dataset (the report's `epochs` has one entry each;
            what it yielded is the first's).
        cache_dir: turn its cache on there (`cache_dir=..., persist=True`), or None.
        cache_budget_bytes: its `cache_budget_bytes` (0: its automatic one).
    """
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "drained.npz"
        command = [
            str(interpreter),
            "-m",
            "benchmarks.insitubatch_driver",
            f"--path={path}",
            f"--variables={','.join(variables)}",
            f"--latency-s={latency_s}",
            f"--bandwidth-bytes-s={bandwidth_bytes_s}",
            f"--batch-size={batch_size}",
            f"--max-samples={max_samples}",
            f"--max-seconds={max_seconds}",
            f"--block-chunks={settings.block_chunks}",
            f"--max-inflight={settings.max_inflight}",
            f"--prefetch-depth={settings.prefetch_depth}",
            f"--out={out}",
            f"--epochs={epochs}",
            f"--cache-budget-bytes={cache_budget_bytes}",
        ]
        if cache_dir is not None:
            command.append(f"--cache-dir={cache_dir}")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise RuntimeError(f"{NAME} driver failed (exit {done.returncode}); stderr above")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        with np.load(out) as saved:
            drained = Drained(
                order=saved["order"],
                sums=saved["sums"],
                seconds=report["seconds"],
                first_batch_s=report["first_batch_s"],
                nbytes=report["nbytes"],
                first_batch_samples=report["first_batch_samples"],
            )
    return drained, report

"""Per-channel mean and standard deviation, merged batch by batch in one streaming pass.

Each batch contributes its count, mean and sum of squared deviations, merged with Chan et
al.'s pairwise update in float64: no second pass, no catastrophic cancellation of
`E[x^2] - E[x]^2` for fields like pressure (~1e5 Pa with ~1e3 Pa spread).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunningMoments:
    channels: int
    count: int = 0
    mean: np.ndarray = field(init=False)
    m2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.mean = np.zeros(self.channels, dtype=np.float64)
        self.m2 = np.zeros(self.channels, dtype=np.float64)

    def add(self, values: np.ndarray) -> None:
        """`values` is `(n, channels, m)`: every value of axes 0 and 2 is one observation."""
        if values.ndim != 3 or values.shape[1] != self.channels:
            raise ValueError(f"expected (n, {self.channels}, m) values, got {values.shape}")
        n = values.shape[0] * values.shape[2]
        if n == 0:
            return
        x = values.astype(np.float64, copy=False)
        batch_mean = x.mean(axis=(0, 2))
        batch_m2 = ((x - batch_mean[None, :, None]) ** 2).sum(axis=(0, 2))
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + batch_m2 + delta**2 * (self.count * n / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (ddof=0), as normalisation uses."""
        if self.count == 0:
            raise ValueError("no values were added: the split is empty")
        return np.sqrt(self.m2 / self.count)

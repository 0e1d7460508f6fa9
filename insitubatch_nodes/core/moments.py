"""Per-channel mean and standard deviation, merged batch by batch in one streaming pass.

Each batch contributes its count, mean and sum of squared deviations, merged with Chan et
al.'s pairwise update in float64: no second pass, no catastrophic cancellation of
`E[x^2] - E[x]^2` for fields like pressure (~1e5 Pa with ~1e3 Pa spread).

NaN (a value xarray masks: a fill value, land in an ocean field) is no observation: the
mean and std of a channel are those of its other values, as `np.nanmean`/`np.nanstd`
give, and the NaNs are counted per channel, so a channel that is mostly masked shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunningMoments:
    """The running moments of `channels` channels.

    Args:
        channels: how many channels (axis 1 of what `add` takes).
    """

    channels: int
    count: int = 0  # values seen per channel, NaN included
    mean: np.ndarray = field(init=False)
    m2: np.ndarray = field(init=False)
    observed: np.ndarray = field(init=False)  # values per channel that were not NaN
    nan_count: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.mean = np.zeros(self.channels, dtype=np.float64)
        self.m2 = np.zeros(self.channels, dtype=np.float64)
        self.observed = np.zeros(self.channels, dtype=np.int64)
        self.nan_count = np.zeros(self.channels, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        """Merge a batch's values in.

        Args:
            values: `(n, channels, m)`: every value of axes 0 and 2 is one observation
                of its channel; NaN is counted, not observed.
        """
        if values.ndim != 3 or values.shape[1] != self.channels:
            raise ValueError(f"expected (n, {self.channels}, m) values, got {values.shape}")
        n = values.shape[0] * values.shape[2]
        if n == 0:
            return
        x = values.astype(np.float64, copy=False)
        valid = ~np.isnan(x)
        seen = valid.sum(axis=(0, 2))
        batch_sum = np.where(valid, x, 0.0).sum(axis=(0, 2))
        batch_mean = np.divide(batch_sum, seen, out=np.zeros(self.channels), where=seen > 0)
        deviation = np.where(valid, x - batch_mean[None, :, None], 0.0)
        batch_m2 = (deviation**2).sum(axis=(0, 2))
        total = self.observed + seen
        share = np.divide(seen, total, out=np.zeros(self.channels), where=total > 0)
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * share
        self.m2 = self.m2 + batch_m2 + delta**2 * self.observed * share
        self.observed = total
        self.nan_count = self.nan_count + (n - seen)
        self.count += n

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (ddof=0), as normalisation uses; NaN for a channel
        with no value that is not NaN."""
        if self.count == 0:
            raise ValueError("no values were added: the split is empty")
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(self.m2 / self.observed)

    @property
    def means(self) -> np.ndarray:
        """The mean per channel; NaN for a channel with no value that is not NaN."""
        return np.where(self.observed > 0, self.mean, np.nan)

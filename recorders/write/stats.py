"""Summary statistics of gate and state values that merge exactly: the arithmetic of a summary recording.

A summary keeps, at each position of the axes it is kept along (a unit, a step), what a
dataset's values there come to: their count, mean, sum of squared deviations from the mean
(`m2`: variance is m2 / count), min and max, how many lie below `low` and above `high` (the
saturation thresholds), and a histogram over fixed `edges` with an underflow and an overflow
bin. Batches, shards and workers each make one (`Stats.of`, or the same sums computed in
TensorFlow's graph); `merge` and `reduce` combine them: counts, min, max, threshold counts and
histograms exactly, mean and m2 by the parallel algorithm of Chan, Golub and LeVeque (1979),
to float64 rounding. Quantiles come from the histogram: the top of the bin holding the exact (inverted-CDF) quantile.

Bins: value v falls in bin k when edges[k] <= v < edges[k + 1], the last bin closed on the right
(edges[-1] included, as numpy's histogram does); v < edges[0] is underflow, v > edges[-1]
overflow. Thresholds: below is v < low, above is v > high. NaN counts nowhere but in `count`
and makes the mean, m2, min and max NaN, as numpy's own reductions do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Stats", "pooled", "check_edges", "bin_of", "cut_point"]


@dataclass(frozen=True)
class Stats:
    """Summary statistics per position (the shape of `count`); see the module docstring."""

    count: np.ndarray  # int64
    mean: np.ndarray  # float64, NaN where count is 0
    m2: np.ndarray  # float64, sum of squared deviations from the mean
    minimum: np.ndarray  # float64, +inf where count is 0
    maximum: np.ndarray  # float64, -inf where count is 0
    below: np.ndarray  # int64, values < low
    above: np.ndarray  # int64, values > high
    histogram: np.ndarray  # int64, [..., bins + 2]: underflow, the bins, overflow
    edges: np.ndarray  # float64 [bins + 1], increasing
    low: float
    high: float

    def __post_init__(self) -> None:
        shape = self.count.shape
        for name in ("mean", "m2", "minimum", "maximum", "below", "above"):
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} is shaped {getattr(self, name).shape}, count {shape}")
        if self.histogram.shape != (*shape, len(self.edges) + 1):
            raise ValueError(
                f"histogram is shaped {self.histogram.shape}, expected {(*shape, len(self.edges) + 1)}"
            )

    @classmethod
    def of(
        cls,
        values: np.ndarray,
        axes: tuple[int, ...],
        edges: np.ndarray,
        low: float,
        high: float,
        mask: np.ndarray | None = None,
    ) -> Stats:
        """The statistics of `values` reduced over `axes`, kept along the others; with `mask`
        (broadcast to `values`), only where it is True. Computed in float64."""
        edges = check_edges(edges)
        v = np.asarray(values, dtype=np.float64)
        keep = np.ones(v.shape, bool) if mask is None else np.broadcast_to(mask, v.shape)
        count = keep.sum(axis=axes, dtype=np.int64)
        total = np.where(keep, v, 0.0).sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / count
        deviation = np.where(keep, v - np.expand_dims(mean, axes), 0.0)
        m2 = (deviation * deviation).sum(axis=axes)
        # numpy's min and max are NaN where a value kept is NaN
        minimum = np.where(keep, v, np.inf).min(axis=axes, initial=np.inf)
        maximum = np.where(keep, v, -np.inf).max(axis=axes, initial=-np.inf)
        below = (keep & (v < low)).sum(axis=axes, dtype=np.int64)
        above = (keep & (v > high)).sum(axis=axes, dtype=np.int64)
        which = bin_of(v, edges)  # -1 for NaN
        bins = len(edges) + 1
        histogram = np.stack(
            [(keep & (which == k)).sum(axis=axes, dtype=np.int64) for k in range(bins)], axis=-1
        )
        return cls(count, mean, m2, minimum, maximum, below, above, histogram, edges, low, high)

    def merge(self, other: Stats) -> Stats:
        """The statistics of both sets of values, position by position."""
        self._same_bins(other)
        n = self.count + other.count
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = other.mean - self.mean
            share = np.where(n > 0, other.count / n, 0.0)
            mean = np.where(
                self.count == 0,
                other.mean,
                np.where(other.count == 0, self.mean, self.mean + delta * share),
            )
            m2 = np.where(
                (self.count == 0) | (other.count == 0),
                self.m2 + other.m2,
                self.m2 + other.m2 + delta * delta * self.count * share,
            )
        return Stats(
            n,
            mean,
            m2,
            np.minimum(self.minimum, other.minimum),  # NaN where either is
            np.maximum(self.maximum, other.maximum),
            self.below + other.below,
            self.above + other.above,
            self.histogram + other.histogram,
            self.edges,
            self.low,
            self.high,
        )

    def reduce(self, axis: int) -> Stats:
        """The statistics merged along `axis` (e.g. per (step, unit) into per unit)."""
        n, total_mean, m2 = pooled(self.count, self.mean, self.m2, axis)
        return Stats(
            n,
            total_mean,
            m2,
            self.minimum.min(axis=axis),  # NaN where any is
            self.maximum.max(axis=axis),
            self.below.sum(axis=axis),
            self.above.sum(axis=axis),
            self.histogram.sum(axis=axis if axis >= 0 else axis - 1),
            self.edges,
            self.low,
            self.high,
        )

    @property
    def variance(self) -> np.ndarray:
        """Population variance (m2 / count), NaN where there are no values."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.m2 / self.count, np.nan)

    def quantile(self, q: float) -> np.ndarray:
        """The q-quantile read off the histogram: the upper edge of the bin holding the
        ceil(q x count)-th smallest value (numpy's `inverted_cdf` quantile), so at most one
        bin's width above it; edges[0] or edges[-1] where it falls in the underflow or overflow
        bin, NaN where there are no values."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q}: expected a number from 0 to 1")
        cumulative = np.cumsum(self.histogram, axis=-1)
        target = np.ceil(q * self.count.astype(np.float64))[..., None]
        first = (cumulative >= np.maximum(target, 1)).argmax(
            axis=-1
        )  # 0 underflow, 1..bins, bins+1 overflow
        tops = np.concatenate([self.edges[:1], self.edges[1:], self.edges[-1:]])
        return np.where(self.count > 0, tops[first], np.nan)

    def _same_bins(self, other: Stats) -> None:
        if (self.low, self.high) != (other.low, other.high) or not np.array_equal(
            self.edges, other.edges
        ):
            raise ValueError(
                "statistics over different bins or thresholds cannot be merged: "
                f"{self.edges[0]}..{self.edges[-1]} in {len(self.edges) - 1} bins, thresholds {self.low}, {self.high}; "
                f"against {other.edges[0]}..{other.edges[-1]} in {len(other.edges) - 1}, {other.low}, {other.high}"
            )


def pooled(
    count: np.ndarray, mean: np.ndarray, m2: np.ndarray, axis: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, mean and m2 of groups of values pooled along `axis`, from each group's own:
    m2 is the groups' m2 plus each group's count times its mean's squared distance from the
    pooled mean (Chan et al.'s merge, all groups at once)."""
    n = count.sum(axis=axis)
    weight = count.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        total_mean = (weight * np.where(count > 0, mean, 0.0)).sum(axis=axis) / n
        spread = np.where(count > 0, mean - np.expand_dims(total_mean, axis), 0.0)
        m2 = np.where(count > 0, m2, 0.0).sum(axis=axis) + (weight * spread * spread).sum(axis=axis)
    return n, total_mean, m2


def check_edges(edges) -> np.ndarray:
    """Bin edges as float64, refused in one line unless at least two and strictly increasing."""
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or len(e) < 2 or not np.all(np.isfinite(e)) or not np.all(np.diff(e) > 0):
        raise ValueError(
            f"bin edges {e.tolist()[:6]}{'...' if e.size > 6 else ''}: expected two or more finite numbers, each larger than the one before"
        )
    return e


def bin_of(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each value's histogram slot: 0 underflow, 1 to bins the bins, bins + 1 overflow, -1 NaN."""
    v = np.asarray(values, dtype=np.float64)
    slot = np.searchsorted(edges, v, side="right")  # 0 below, len(edges) at or above the top
    slot = np.where(v == edges[-1], len(edges) - 1, slot)  # the last bin is closed
    return np.where(np.isnan(v), -1, slot)


def cut_point(edge: float, dtype, closed: bool = False) -> np.ndarray:
    """The smallest value of `dtype` not below `edge` (above it, if `closed`): for every v of
    that type, v >= edge exactly when v >= the cut (v <= edge when v < the closed cut), so that
    values are compared with a float64 edge in their own type."""
    edge = np.float64(edge)  # compared as itself: a Python float would be compared in `dtype`
    c = np.asarray(edge).astype(dtype)
    if c < edge or (closed and c == edge):
        c = np.nextafter(c, np.asarray(np.inf, dtype))
    return c

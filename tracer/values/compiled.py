"""A column's summary statistics computed from its values in one compiled loop (numba).

`reduce` takes one column's values, [rows, steps, units] as a plan cuts them out of what a
batch fetched, and where they count ([rows, steps] booleans), and returns what the graph's
ops of `tracer.values.summaries` return for the same column: per step the count; per (step,
unit) the float64 mean and sum of squared deviations from it, the min and the max; and how
many values fall in each histogram slot, per unit and per step. A value's slot is found as
the graph finds it (`Slots`: floor(v * scale) + offset in float64, clipped, plus one for
each threshold mark it reaches; or, without that arithmetic, how many cut points are <= v),
so both give the same numbers. Each step's rows are read three times while they are in
the cache (sums, min and max; squared deviations; slots), and the loop runs without the
GIL, on the writer's threads while the next batch runs.

The loop is compiled at its first run and its machine code cached only in gatetrace's own
folder (`recorders.write.compiled`, which says why). `available()` says whether numba is
installed (`pip install ".[fast]"`). Without it, summaries are computed in the graph, or in
numpy for cells computed in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recorders.write.compiled import Loop, available, trusted_cache

__all__ = ["Slots", "available", "reduce", "trusted_cache"]


@dataclass(frozen=True)
class Slots:
    """How a value's histogram slot is found (see `tracer.values.summaries`' `_Bins`):
    floor(v * scale) + offset clipped to 0..last, `last - 1` where v equals `top`, plus one
    for each of `marks` v reaches; where `scale` is None, how many of `every` are <= v."""

    scale: float | None
    offset: int
    last: int
    top: float | None
    marks: np.ndarray
    every: np.ndarray

    @property
    def width(self) -> int:
        """How many slots there are: 0 to `last`, and one more for each mark."""
        return self.last + len(self.marks) + 1


def reduce(values: np.ndarray, valid: np.ndarray | None, slots: Slots) -> list[np.ndarray]:
    """[n, mean, m2, min, max, slot counts per unit, slot counts per step] of [rows, steps,
    units] float32 or float64 `values` where `valid` ([rows, steps]; None: everywhere), as
    the graph computes them (`tracer.values.summaries._reduce`)."""
    if values.dtype not in (np.float32, np.float64):
        raise TypeError(f"expected float32 or float64 values, got {values.dtype}")
    x = np.ascontiguousarray(values)
    rows, steps, units = x.shape
    keep = np.ones((rows, steps), np.bool_) if valid is None else np.ascontiguousarray(valid, bool)
    n = np.zeros(steps, np.int64)
    mean = np.zeros((steps, units))
    m2 = np.zeros((steps, units))
    lo = np.full((steps, units), np.inf, x.dtype)
    hi = np.full((steps, units), -np.inf, x.dtype)
    by_unit = np.zeros((units, slots.width), np.int64)
    by_step = np.zeros((steps, slots.width), np.int64)
    _kernel()(
        x,
        keep,
        np.nan if slots.scale is None else slots.scale,
        slots.offset,
        slots.last,
        np.nan if slots.top is None else slots.top,
        slots.marks.astype(x.dtype),
        slots.every.astype(x.dtype),
        n,
        mean,
        m2,
        lo,
        hi,
        by_unit,
        by_step,
    )
    return [n, mean, m2, lo, hi, by_unit, by_step]


def _loop(x, keep, scale, offset, last, top, marks, every, n, mean, m2, lo, hi, by_unit, by_step):
    """The loop `reduce` runs, compiled by numba (see the module docstring)."""
    rows, steps, units = x.shape
    width = by_unit.shape[1]
    counts = np.zeros((units, width), np.int64)  # one step's, per unit
    slot = np.empty(units, np.int64)
    arithmetic = not np.isnan(scale)
    for t in range(steps):
        total, spread, least, most = mean[t], m2[t], lo[t], hi[t]
        c = 0
        for b in range(rows):
            if keep[b, t]:
                c += 1
                row = x[b, t]
                for u in range(units):
                    v = row[u]
                    total[u] += v
                    least[u] = min(least[u], v)
                    most[u] = max(most[u], v)
        n[t] = c
        if c == 0:
            continue
        for u in range(units):
            total[u] /= c
        counts[:] = 0
        for b in range(rows):
            if not keep[b, t]:
                continue
            row = x[b, t]
            for u in range(units):
                d = np.float64(row[u]) - total[u]
                spread[u] += d * d
            if arithmetic:
                for u in range(units):
                    v = np.float64(row[u])
                    k = np.floor(v * scale) + offset
                    if not k > 0.0:  # (NaN too: refused later, by its mean)
                        k = 0.0
                    if k > last:
                        k = last
                    if v == top:
                        k = last - 1
                    slot[u] = np.int64(k)
                for m in marks:
                    for u in range(units):
                        slot[u] += row[u] >= m
            else:
                for u in range(units):
                    slot[u] = np.searchsorted(every, row[u], side="right")
            for u in range(units):
                counts[u, slot[u]] += 1
        for u in range(units):
            for k in range(width):
                by_unit[u, k] += counts[u, k]
                by_step[t, k] += counts[u, k]


_kernel = Loop(_loop)

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

The loop is compiled at its first run, about a second, and its machine code cached on disk
by numba. numba reads a cache's index with `pickle`, so whoever can write the cache folder
can run code as the user: the cache is kept only in gatetrace's own folder
(`$XDG_CACHE_HOME/gatetrace/numba`, else `~/.cache/gatetrace/numba`), created mode 0700 and
checked before numba is asked (`trusted_cache`: a folder, not a link, the user's own,
writable by no one else, in folders no one else can rename it out of), never in the folder
`NUMBA_CACHE_DIR` names nor beside this module; where that check fails the loop is compiled
in every process, without a cache. `available()` says whether numba is installed
(`pip install "gatetrace[fast]"`). Without it, summaries are computed in the graph, or in
numpy for cells computed in numpy.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Slots", "available", "reduce", "trusted_cache"]


@functools.cache
def available() -> bool:
    """Whether the compiled loop can run (numba, an optional dependency, is installed; it is
    imported only when the loop first runs)."""
    return importlib.util.find_spec("numba") is not None


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


_compiled: Any = None
# held while the loop is made: numba reads its cache folder from a global setting, which
# `_kernel` sets for that moment; two writer threads making it at once would each restore
# it under the other (seen: a cache folder named by a relative path, made in the user's
# current folder)
_making = threading.Lock()


def _safe(path: Path, own: bool) -> bool:
    """Whether `path` is a folder (not a link) that no one but the user, or root, can change:
    with `own`, the user's and writable by no one else; else owned by the user or root and
    writable by no one else, or sticky (no one else can rename what the user owns there)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if own:
        return st.st_uid == os.getuid() and not st.st_mode & 0o077
    others_write = st.st_mode & 0o022
    return st.st_uid in (0, os.getuid()) and (not others_write or bool(st.st_mode & stat.S_ISVTX))


def trusted_cache() -> Path | None:
    """gatetrace's own cache folder for numba's machine code, made mode 0700 where missing,
    or None where it is not safe to read code from (see the module docstring)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(os.path.abspath(base)) / "gatetrace" / "numba"
    try:
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not _safe(folder, own=True) or not _safe(folder.parent, own=True):
        return None
    if not all(_safe(p, own=False) for p in folder.parent.parents):
        return None
    return folder


def _kernel() -> Any:
    """`_loop` compiled (once per process), its machine code cached only in `trusted_cache()`:
    numba's cache folder is set to it while the function is made (where numba picks the
    folder), whatever `NUMBA_CACHE_DIR` says; without it, nothing is cached."""
    global _compiled
    with _making:
        if _compiled is None:
            folder = trusted_cache()  # checked before numba is imported
            import numba
            from numba.core import config

            if folder is None:
                _compiled = numba.njit(nogil=True, cache=False)(_loop)
                return _compiled
            before = getattr(config, "CACHE_DIR", "")
            setattr(config, "CACHE_DIR", str(folder))  # noqa: B010 (set at import from the environment)
            try:
                made = numba.njit(nogil=True, cache=True)(_loop)
            finally:
                setattr(config, "CACHE_DIR", before)  # noqa: B010
            # where numba will write (its cache's path): never a folder relative to wherever the
            # user is; a numba that keeps it elsewhere is taken at its word
            where = getattr(getattr(made, "_cache", None), "_cache_path", str(folder))
            if not os.path.isabs(str(where)):
                made = numba.njit(nogil=True, cache=False)(_loop)
            _compiled = made
    return _compiled

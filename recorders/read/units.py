"""Which units track a label: every unit of every recorded cell scored against the user's labels.

    labels = read_labels("inside_quote.npy")          # [examples, steps], or [examples], or a table
    scores = unit_scores(rec, labels)                 # best first
    scores.head()       # cell, table, name, column, unit, metric, score, direction, chance, n

Each unit of each gate column (preactivation, activation) and state (c, h) is scored over
exactly the (example, step) positions that have a label and a recorded row
(`recorders.read.labels`):
- binary labels by ROC AUC, from the ranks of the unit's values (ties at their mean rank, as
  scikit-learn's `roc_auc_score` counts them): `score` is max(AUC, 1 - AUC), `direction` "+"
  where the unit is higher on the positive label;
- numeric labels by Pearson's r in float64: `score` is |r|, `direction` its sign.
`chance` is the mean score of the same unit over `shuffles` random permutations of the labels
among those positions (a fixed seed, drawn in (example, step) order, so every cell and table
sees the same permutations): what a unit scores by chance. `DataFrame.attrs["chance_best"]`
is the best score any unit reached under any permutation: the line a real finding beats.

Cost: one read of each column, the columns in parallel threads; per column, 16 units at a
time (their sort stays in the processor's cache), one 64-bit sort of each unit's values packed
with their positions, and one matrix product of the real and shuffled labels with the ranks (or
centred values). The units are taken in groups whose values fit the recording's memory budget
(a column read once per group).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.read.labels import Gathered, Labels, covers, gather, read_labels
from recorders.read.reader import Recording

__all__ = ["unit_scores", "score_units", "targets", "COLUMNS"]

COLUMNS = [
    "cell",
    "table",
    "name",
    "column",
    "unit",
    "metric",
    "score",
    "direction",
    "chance",
    "n",
]
_CHUNK = 16  # units ranked at once: a chunk's keys, order and ranks fit a processor's cache
_BYTES_PER_VALUE = 48  # a chunk's value: its key, position, ranks and the tie bookkeeping


def targets(
    rec: Recording,
    cells: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    tables: Sequence[str] = ("gates", "states"),
    columns: Sequence[str] = ("preactivation", "activation"),
) -> list[tuple[str, str, str, str]]:
    """The (cell, table, name, column) a selection scores: each gate's `columns`, each
    state's value; `names` picks gates and states by name."""
    out = []
    for cell in cells or rec.cells:
        if "gates" in tables:
            out += [
                (cell, "gates", g, c)
                for g in rec.gates(cell)
                if names is None or g in names
                for c in columns
            ]
        if "states" in tables:
            out += [
                (cell, "states", s, "value")
                for s in rec.states(cell)
                if names is None or s in names
            ]
    if not out:
        raise SelectionError(
            f"the selection (cells {list(cells or rec.cells)}, names {list(names or [])}, tables {list(tables)}) "
            "leaves no gate or state to score"
        )
    return out


def unit_scores(
    rec: Recording,
    labels: Labels | object,
    cells: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    tables: Sequence[str] = ("gates", "states"),
    columns: Sequence[str] = ("preactivation", "activation"),
    step: int | None = None,
    shuffles: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Every unit of the selection scored against `labels` (`Labels`, an array, a table or a
    file: `recorders.read.labels`), best first: the columns of `COLUMNS` (see the module
    docstring). `step`: score only that input position."""
    labels = labels if isinstance(labels, Labels) else read_labels(labels, rec.memory)
    if step is not None:
        labels = labels.at_step(step)
    if not isinstance(shuffles, int) or shuffles < 0:
        raise SelectionError(f"shuffles {shuffles!r}: expected a count, 0 or more")
    chosen = targets(rec, cells, names, tables, columns)
    for cell in dict.fromkeys(c for c, _, _, _ in chosen):
        covers(rec, cell, labels)  # once a cell (it reads a column of steps)
    workers = max(1, min(len(chosen), os.cpu_count() or 1))
    budget = rec.memory // workers  # the columns are scored in parallel threads

    mine = threading.local()  # each thread's ranker: its buffers serve column after column

    def column_frame(target: tuple[str, str, str, str]) -> tuple[pd.DataFrame, np.ndarray]:
        cell, table, name, column = target
        frames, best = [], np.full(shuffles, -np.inf)
        for g in _groups(rec, table, cell, name, column, labels, budget):
            ranker = getattr(mine, "ranker", None)
            if labels.binary and (ranker is None or ranker.n != len(g.labels)):
                ranker = mine.ranker = _Ranker(len(g.labels))
            score, shuffled = score_units(g, labels.binary, shuffles, seed, ranker)
            if shuffles:
                best = np.fmax(best, np.nanmax(np.abs(shuffled), axis=1, initial=-np.inf))
            frames.append(
                pd.DataFrame(
                    {
                        "cell": cell,
                        "table": table,
                        "name": name,
                        "column": column,
                        "unit": np.arange(g.first, g.first + g.units),
                        "metric": "auc" if labels.binary else "pearson",
                        "score": np.abs(score),
                        "direction": np.where(score >= 0, "+", "-"),
                        "chance": np.abs(shuffled).mean(axis=0) if shuffles else np.nan,
                        "n": len(g.labels),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True), best

    with _one_blas_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(column_frame, chosen))
    frames = [frame for frame, _ in done]
    best = np.max([b for _, b in done], axis=0, initial=-np.inf) if shuffles else np.zeros(0)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values("score", ascending=False, na_position="last", kind="stable")
    out = out.reset_index(drop=True)[COLUMNS]
    out.attrs.update(
        chance_best=float(best.max()) if shuffles else float("nan"),
        shuffles=shuffles,
        positive=labels.positive,
        labels=labels.source,
    )
    return out


def _one_blas_thread() -> AbstractContextManager:
    """The BLAS library on one thread while the columns are scored (where threadpoolctl, which
    scikit-learn brings, is installed): its products here are small, and its idle threads spin
    on the cores the columns' threads need (measured: 7.5 s -> 5.5 s over bench/units.py's
    recording)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(1, user_api="blas")


def _groups(
    rec: Recording, table: str, cell: str, name: str, column: str, labels: Labels, budget: int
):
    """The gathered values of one column, in groups of units whose values fit `budget` bytes."""
    width = rec.width(table, cell, name)
    positions = max(int(np.count_nonzero(~np.isnan(labels.values))), 1)
    if positions >= 2**32:
        raise SelectionError(
            f"labels: {positions:,} labelled positions; at most {2**32 - 1:,} are scored at once: "
            "label fewer positions (a table of labels, or --step)"
        )
    take = min(width, (budget - _CHUNK * positions * _BYTES_PER_VALUE) // (positions * 4))
    if take < 1:
        rec.allot(
            (positions, _CHUNK * _BYTES_PER_VALUE + 4),
            1,
            f"scoring a unit over {positions:,} labelled positions",
        )
    for start in range(0, width, take):
        yield gather(
            rec, table, cell, name, column, labels, (start, min(start + take, width)), check=False
        )


def score_units(
    g: Gathered, binary: bool, shuffles: int, seed: int, ranker: _Ranker | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The signed score of each unit of `g` against its labels and against `shuffles`
    permutations of them: max(AUC, 1 - AUC), negative where the unit is lower on the positive
    label, or Pearson's r; arrays [units] and [shuffles, units]. The units are taken `_CHUNK`
    at a time, so that a chunk's sort and ranks stay in the processor's cache; `ranker`, one
    made for as many positions before, lends its buffers."""
    y = g.labels
    rng = np.random.default_rng(seed)
    ys = np.stack([y, *(y[rng.permutation(len(y))] for _ in range(shuffles))])
    units = g.units
    signed = np.empty((len(ys), units))
    if binary:
        positive = (ys == ys.max()).astype(np.float64)
        n1 = positive[0].sum()
        n0 = len(y) - n1
        if not n1 or not n0:
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; a binary label "
                "needs both values among the positions recorded"
            )
        midranks = ranker if ranker is not None and ranker.n == len(y) else _Ranker(len(y))
        for a in range(0, units, _CHUNK):
            sums = positive @ midranks(g, a).T  # [1 + shuffles, units]
            auc = (sums - n1 * (n1 + 1) / 2) / (n1 * n0)
            signed[:, a : a + _CHUNK] = np.where(auc >= 0.5, auc, -(1 - auc))
    else:
        yc = ys - ys.mean(axis=1, keepdims=True)
        if not yc[0].any():
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; Pearson's r needs "
                "labels that vary"
            )
        y_norm = np.sqrt((yc * yc).sum(axis=1))
        for a in range(0, units, _CHUNK):
            xc = g.columns(a, a + _CHUNK).astype(np.float64)  # [positions, units of the chunk]
            xc -= xc.mean(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                signed[:, a : a + _CHUNK] = (yc @ xc) / np.outer(
                    y_norm, np.sqrt((xc * xc).sum(axis=0))
                )
    finite = np.logical_and.reduce([np.isfinite(part).all(axis=0) for part in g.parts])
    signed[:, ~finite] = np.nan
    return signed[0], signed[1:]


class _Ranker:
    """Midranks of `_CHUNK` units at a time, over `n` positions, in buffers allocated once and
    used column after column (fresh arrays for each chunk cost as much again: the memory is
    mapped anew each time).

    Each value is sorted with its position packed beside it (one 64-bit sort, faster than an
    argsort): the float's bits made to order as the floats do (-0.0 as 0.0), then the position.
    The ties, at the mean of their ranks as scikit-learn counts them, are mended run by run
    (their cost grows with the tied values, not the row)."""

    def __init__(self, n: int):
        self.n = n
        shape = (_CHUNK, n)
        self.rows = np.empty((n, _CHUNK), np.float32)  # a chunk's values as the column holds them
        self.bits = np.empty(shape, np.float32)
        self.flip = np.empty(shape, np.uint32)
        self.key = np.empty(shape, np.uint64)
        self.tied = np.zeros(shape, bool)
        self.flat = np.empty(shape, np.intp)
        self.ranks = np.empty(shape)
        self.positions = np.arange(n, dtype=np.uint64)
        self.offsets = (np.arange(_CHUNK, dtype=np.intp) * n)[:, None]
        self.in_order = np.tile(np.arange(1.0, n + 1), _CHUNK)

    def __call__(self, g: Gathered, start: int) -> np.ndarray:
        """The midranks (1-based, float64) of units [start, start + _CHUNK) of `g` as [units,
        positions]: a view of this ranker's buffer, valid until the next call."""
        n = self.n
        width = min(_CHUNK, g.units - start)
        rows = g.columns(start, start + width, self.rows[:, :width])  # then turned in the cache
        bits, flip, key = self.bits[:width], self.flip[:width], self.key[:width]
        np.add(rows.T, np.float32(0), out=bits)  # -0.0 + 0.0 is 0.0: one key for zero
        np.right_shift(bits.view(np.int32), 31, out=flip.view(np.int32))  # all ones if negative
        flip |= np.uint32(0x80000000)
        flip ^= bits.view(np.uint32)
        key[...] = flip
        key <<= np.uint64(32)
        key |= self.positions
        key.sort(axis=1)
        if np.little_endian:  # the two halves of each key, read in place
            halves = key.view(np.uint32).reshape(width, n, 2)
            position, value = halves[..., 0], halves[..., 1]
        else:
            position, value = key & np.uint64(0xFFFFFFFF), key >> np.uint64(32)
        flat = self.flat[:width]
        np.add(position, self.offsets[:width], out=flat, casting="unsafe")  # in the whole chunk
        out = self.ranks[:width].reshape(-1)
        out[flat.reshape(-1)] = self.in_order[: width * n]  # each value's place in its row
        tied = self.tied[:width]
        np.equal(value[:, 1:], value[:, :-1], out=tied[:, 1:])  # equal to the value before it
        later = np.flatnonzero(tied)  # flat indices, never at a row's start
        if len(later):  # each run of equal values at the mean of its places
            breaks = np.flatnonzero(np.diff(later) != 1)
            first = later[np.r_[0, breaks + 1]] - 1  # each run's first ...
            last = later[np.r_[breaks, len(later) - 1]]  # ... and last flat index, sorted
            size = last - first + 1
            members = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
            sorted_at = np.repeat(first, size) + members
            out[flat.reshape(-1)[sorted_at]] = np.repeat((first % n + last % n) / 2 + 1, size)
        return self.ranks[:width]

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
is the best score of any unit under each permutation, at most: the line a real finding beats.

Cost: one read of each column; per column, one sort of each unit's values and one matrix
product of the real and shuffled labels with the ranks (or centred values). The units are
taken in groups that fit the recording's memory budget (a column read once per group).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.read.labels import Gathered, Labels, gather, read_labels
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
_BYTES_PER_VALUE = 48  # a value, its sort order, ranks, and the tie bookkeeping


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
    frames, best = [], np.full(shuffles, -np.inf)
    for cell, table, name, column in targets(rec, cells, names, tables, columns):
        for g in _groups(rec, table, cell, name, column, labels):
            score, shuffled = score_units(g, labels.binary, shuffles, seed)
            units = np.arange(g.first, g.first + len(g.values))
            if shuffles:
                best = np.fmax(best, np.nanmax(np.abs(shuffled), axis=1, initial=-np.inf))
            frames.append(
                pd.DataFrame(
                    {
                        "cell": cell,
                        "table": table,
                        "name": name,
                        "column": column,
                        "unit": units,
                        "metric": "auc" if labels.binary else "pearson",
                        "score": np.abs(score),
                        "direction": np.where(score >= 0, "+", "-"),
                        "chance": np.abs(shuffled).mean(axis=0) if shuffles else np.nan,
                        "n": g.values.shape[1],
                    }
                )
            )
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


def _groups(rec: Recording, table: str, cell: str, name: str, column: str, labels: Labels):
    """The gathered values of one column, in groups of units that fit the memory budget."""
    width = _width(rec, table, cell, name)
    positions = max(int(np.count_nonzero(~np.isnan(labels.values))), 1)
    take = min(width, rec.memory // (positions * _BYTES_PER_VALUE))
    if take < 1:
        rec.allot(
            (positions, _BYTES_PER_VALUE),
            1,
            f"scoring a unit over {positions:,} labelled positions",
        )
    for start in range(0, width, take):
        yield gather(rec, table, cell, name, column, labels, (start, min(start + take, width)))


def _width(rec: Recording, table: str, cell: str, name: str) -> int:
    units = rec.units(cell)
    if table == "states" and name == "h":
        return int(rec.cell(cell).get("output_size") or units)
    return units


def score_units(
    g: Gathered, binary: bool, shuffles: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The signed score of each unit of `g` (AUC - 0.5 folded to max(AUC, 1 - AUC) with the
    sign of the direction, or Pearson's r) against its labels and against `shuffles`
    permutations of them: arrays [units] and [shuffles, units]."""
    x, y = g.values, g.labels
    rng = np.random.default_rng(seed)
    ys = np.stack([y, *(y[rng.permutation(len(y))] for _ in range(shuffles))])
    if binary:
        positive = ys == ys.max()
        n1 = positive[0].sum()
        n0 = len(y) - n1
        if not n1 or not n0:
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; a binary label "
                "needs both values among the positions recorded"
            )
        sums = positive.astype(np.float64) @ _midranks(x).T  # [1 + shuffles, units]
        auc = (sums - n1 * (n1 + 1) / 2) / (n1 * n0)
        signed = np.where(auc >= 0.5, auc, -(1 - auc))
    else:
        xc = x.astype(np.float64)
        xc -= xc.mean(axis=1, keepdims=True)
        yc = ys - ys.mean(axis=1, keepdims=True)
        if not yc[0].any():
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; Pearson's r needs "
                "labels that vary"
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            signed = (yc @ xc.T) / np.outer(
                np.sqrt((yc * yc).sum(axis=1)), np.sqrt((xc * xc).sum(axis=1))
            )
    signed[:, ~np.isfinite(x).all(axis=1)] = np.nan
    return signed[0], signed[1:]


def _midranks(x: np.ndarray) -> np.ndarray:
    """The rank (1-based) of each value among its row, ties at the mean of their ranks: float64.
    The ties are mended run by run (their cost grows with the tied values, not the row)."""
    order = np.argsort(x, axis=1)
    s = np.take_along_axis(x, order, axis=1)
    n = x.shape[1]
    sorted_ranks = np.empty(x.shape)
    sorted_ranks[:] = np.arange(1.0, n + 1)
    tied = np.zeros(x.shape, bool)
    np.equal(s[:, 1:], s[:, :-1], out=tied[:, 1:])  # equal to the value before it
    later = np.flatnonzero(tied)  # flat indices, never at a row's start
    if len(later):
        breaks = np.flatnonzero(np.diff(later) != 1)
        first = later[np.r_[0, breaks + 1]] - 1  # each run of equal values: its first ...
        last = later[np.r_[breaks, len(later) - 1]]  # ... and last flat index
        size = last - first + 1
        mean = (first % n + last % n) / 2 + 1
        members = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
        sorted_ranks.flat[np.repeat(first, size) + members] = np.repeat(mean, size)
    ranks = np.empty(x.shape)
    np.put_along_axis(ranks, order, sorted_ranks, axis=1)
    return ranks

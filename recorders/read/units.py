"""Which units track a label: every unit of every recorded cell scored against the user's labels.

    labels = read_labels("inside_quote.npy")          # [examples, steps], or [examples], or a table
    scores = unit_scores(rec, labels)                 # best first
    scores.head()       # cell, table, name, column, unit, metric, score, direction, chance, separation, n

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

Units that score the same are ordered by `separation` (binary labels): how far apart the means
of the unit on the two labels are, in standard deviations of the unit over all positions (of
units that both separate the labels perfectly, the one with the wider gap first); then in the
recording's order. A gate's activation and its preactivation score the same (the activation is
ranked in its preactivation's order): `findings` keeps one row of the two, the activation's.

Cost: one read of each column, the gates and states in parallel threads; per gate or state,
16 units at a time (their sort stays in the processor's cache), one 64-bit sort of each unit's
values packed with their positions, and one matrix product of the real and shuffled labels with
the ranks (or centred values). A gate's activation rises with its preactivation (sigmoid, tanh,
...), so the order that sorts a unit's preactivations nearly sorts its activations: they are
put in that order and sorted from there by a stable sort, which passes over the runs already in
order (a few passes instead of a sort of their own; exact whatever the activation). The units
are taken in groups whose values fit the recording's memory budget (a column read once per
group).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.read.labels import Gathered, Labels, covers, gather, positions, read_labels
from recorders.read.reader import Recording

__all__ = ["unit_scores", "findings", "score_units", "score_columns", "targets", "COLUMNS"]

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
    "separation",
    "n",
]
_CHUNK = 16  # units ranked at once: a chunk's keys, order and ranks fit a processor's cache
_BYTES_PER_VALUE = 48  # a chunk's value: its key, position, ranks and the tie bookkeeping
_BYTES_PER_LABEL = 16  # a position's real or shuffled label as drawn, and whether it is positive


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
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Every unit of the selection scored against `labels` (`Labels`, an array, a table or a
    file: `recorders.read.labels`), best first: the columns of `COLUMNS` (see the module
    docstring). `step`: score only that input position. `progress(scored, units)`, called
    once the labels are checked and then as each group of units is scored (from the scoring
    threads): the units (a gate's unit once per column) scored so far, of all."""
    labels = labels if isinstance(labels, Labels) else read_labels(labels, rec.memory)
    if not isinstance(shuffles, int) or shuffles < 0:
        raise SelectionError(f"shuffles {shuffles!r}: expected a count, 0 or more")
    chosen = targets(rec, cells, names, tables, columns)
    if step is not None:
        labels = labels.at_step(step, positions(rec, [c for c, _, _, _ in chosen]))
    for cell in dict.fromkeys(c for c, _, _, _ in chosen):
        covers(rec, cell, labels)  # once a cell (it reads a column of steps)
    # a gate's columns together: the activation is ranked in its preactivation's order
    jobs: dict[tuple[str, str, str], list[str]] = {}
    for cell, table, name, column in chosen:
        jobs.setdefault((cell, table, name), []).append(column)
    units = sum(
        rec.width(table, cell, name) * len(wanted) for (cell, table, name), wanted in jobs.items()
    )
    so_far = [0]  # the units scored, over the threads
    counting = threading.Lock()

    def advance(done: int) -> None:
        if progress is not None:
            with counting:
                so_far[0] += done
                progress(so_far[0], units)

    advance(0)
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    budget = rec.memory // workers  # the gates and states are scored in parallel threads

    mine = threading.local()  # each thread's ranker: its buffers serve column after column

    def job_frames(
        job: tuple[tuple[str, str, str], list[str]],
    ) -> tuple[list[pd.DataFrame], np.ndarray]:
        (cell, table, name), wanted = job
        frames: list[list[pd.DataFrame]] = [[] for _ in wanted]
        best = np.full(shuffles, -np.inf)  # the best of each permutation over these units
        for gs in _groups(rec, table, cell, name, wanted, labels, shuffles, budget):
            ranker = getattr(mine, "ranker", None)
            if labels.binary and (ranker is None or ranker.n != len(gs[0].labels)):
                ranker = mine.ranker = _Ranker(len(gs[0].labels))
            scored = score_columns(gs, labels.binary, shuffles, seed, ranker)
            for into, column, g, (score, shuffled) in zip(frames, wanted, gs, scored, strict=True):
                if shuffles:
                    best = np.fmax(best, np.nanmax(np.abs(shuffled), axis=1, initial=-np.inf))
                into.append(
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
                            "separation": _separation(g, labels),
                            "n": len(g.labels),
                        }
                    )
                )
            advance(gs[0].units * len(gs))
        return [pd.concat(f, ignore_index=True) for f in frames], best

    with _one_blas_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(job_frames, jobs.items()))
    frames = [frame for job, _ in done for frame in job]  # in the order of `targets`
    best = np.max([b for _, b in done], axis=0, initial=-np.inf) if shuffles else np.zeros(0)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(
        ["score", "separation"], ascending=False, na_position="last", kind="stable"
    )
    out = out.reset_index(drop=True)[COLUMNS]
    out.attrs.update(
        chance_best=float(best.max()) if shuffles else float("nan"),
        shuffles=shuffles,
        positive=labels.positive,
        labels=labels.source,
    )
    return out


def _separation(g: Gathered, labels: Labels) -> np.ndarray:
    """Per unit, |mean on the positive label - mean on the other| / the unit's standard
    deviation over all positions (0 where it is constant); NaN for numeric labels."""
    positive = g.labels == labels.positive
    if not labels.binary or positive.all() or not positive.any():
        return np.full(g.units, np.nan)
    out = np.zeros(g.units)
    for a in range(0, g.units, _CHUNK):  # a chunk at a time, in the memory its ranking had
        values = g.columns(a, a + _CHUNK).astype(np.float64)
        gap = np.abs(values[positive].mean(axis=0) - values[~positive].mean(axis=0))
        spread = values.std(axis=0)
        np.divide(gap, spread, out=out[a : a + values.shape[1]], where=spread > 0)
    return out


def findings(out: pd.DataFrame) -> pd.DataFrame:
    """`unit_scores`' rows without a gate's preactivation where its activation scores the
    same: one row a finding, as `gatetrace units` lists them."""
    keys = ["cell", "table", "name", "unit"]
    act = out[out["column"] == "activation"].set_index(keys)["score"]
    pre = out["column"] == "preactivation"
    if not pre.any() or act.empty:
        return out
    paired = act.reindex(pd.MultiIndex.from_frame(out.loc[pre, keys])).to_numpy()
    same = np.zeros(len(out), bool)
    same[np.flatnonzero(pre)] = paired == out.loc[pre, "score"].to_numpy()
    return out[~same]


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
    rec: Recording,
    table: str,
    cell: str,
    name: str,
    columns: Sequence[str],
    labels: Labels,
    shuffles: int,
    budget: int,
) -> Iterator[list[Gathered]]:
    """The gathered values of a gate's (or state's) `columns`, in groups of units whose values
    fit `budget` bytes beside a chunk's ranks and the real and shuffled labels: the same units
    and positions of each column."""
    width = rec.width(table, cell, name)
    positions = max(int(np.count_nonzero(~np.isnan(labels.values))), 1)
    if positions >= 2**32:
        raise SelectionError(
            f"labels: {positions:,} labelled positions; at most {2**32 - 1:,} are scored at once: "
            "label fewer positions (a table of labels, or --step)"
        )
    # a position's bytes: a chunk's ranking, the labels drawn, and the real ones kept to compare
    fixed = _CHUNK * _BYTES_PER_VALUE + (1 + shuffles) * _BYTES_PER_LABEL + 8
    take = min(width, (budget - positions * fixed) // (positions * 4 * len(columns)))
    if take < 1:
        rec.allot(
            (positions, fixed + 4 * len(columns)),
            1,
            f"scoring a unit over {positions:,} labelled positions",
        )
    for start in range(0, width, take):
        units = (start, min(start + take, width))
        yield [
            gather(rec, table, cell, name, column, labels, units, check=False) for column in columns
        ]


def score_units(
    g: Gathered, binary: bool, shuffles: int, seed: int, ranker: _Ranker | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The signed score of each unit of `g` against its labels and against `shuffles`
    permutations of them: max(AUC, 1 - AUC), negative where the unit is lower on the positive
    label, or Pearson's r; arrays [units] and [shuffles, units]."""
    return score_columns([g], binary, shuffles, seed, ranker)[0]


def score_columns(
    gs: Sequence[Gathered],
    binary: bool,
    shuffles: int,
    seed: int,
    ranker: _Ranker | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`score_units` of each of `gs`, columns of the same units at the same positions (a
    gate's preactivation, then its activation): each unit of a later column is ranked in the
    order that sorted the unit before it (`_Ranker.follow`). The units are taken
    `_CHUNK` at a time, so that a chunk's sort and ranks stay in the processor's cache;
    `ranker`, one made for as many positions before, lends its buffers."""
    first = gs[0]
    for g in gs[1:]:
        same = np.array_equal(g.examples, first.examples) and np.array_equal(g.steps, first.steps)
        if g.units != first.units or not same:
            raise ValueError("score_columns: the columns hold other units or positions")
    y = first.labels
    units = first.units
    signed = [np.empty((1 + shuffles, units)) for _ in gs]
    if binary:
        midranks = ranker if ranker is not None and ranker.n == len(y) else _Ranker(len(y))
        positive = midranks.positive(y, shuffles, seed)
        n1 = positive[0].sum()
        n0 = len(y) - n1
        if not n1 or not n0:
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; a binary label "
                "needs both values among the positions recorded"
            )
        for a in range(0, units, _CHUNK):
            for k, (g, out) in enumerate(zip(gs, signed, strict=True)):
                ranks = midranks(g, a) if k == 0 else midranks.follow(g, a)
                sums = positive @ ranks.T  # [1 + shuffles, units]
                auc = (sums - n1 * (n1 + 1) / 2) / (n1 * n0)
                out[:, a : a + _CHUNK] = np.where(auc >= 0.5, auc, -(1 - auc))
    else:
        ys = _drawn(y, shuffles, seed)
        yc = ys - ys.mean(axis=1, keepdims=True)
        if not yc[0].any():
            raise SelectionError(
                f"labels: every scored position of this selection holds the label {y[0]:g}; Pearson's r needs "
                "labels that vary"
            )
        y_norm = np.sqrt((yc * yc).sum(axis=1))
        for g, out in zip(gs, signed, strict=True):
            for a in range(0, units, _CHUNK):
                xc = g.columns(a, a + _CHUNK).astype(np.float64)  # [positions, units of the chunk]
                xc -= xc.mean(axis=0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[:, a : a + _CHUNK] = (yc @ xc) / np.outer(
                        y_norm, np.sqrt((xc * xc).sum(axis=0))
                    )
    scores = []
    for g, out in zip(gs, signed, strict=True):
        finite = np.logical_and.reduce([np.isfinite(part).all(axis=0) for part in g.parts])
        out[:, ~finite] = np.nan
        scores.append((out[0], out[1:]))
    return scores


def _drawn(y: np.ndarray, shuffles: int, seed: int) -> np.ndarray:
    """The labels and `shuffles` permutations of them, [1 + shuffles, positions], drawn one
    after another from a generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    return np.stack([y, *(y[rng.permutation(len(y))] for _ in range(shuffles))])


class _Ranker:
    """Midranks of `_CHUNK` units at a time, over `n` positions, in buffers allocated once and
    used column after column (fresh arrays for each chunk cost as much again: the memory is
    mapped anew each time).

    Each value is sorted with its position packed beside it (one 64-bit sort, faster than an
    argsort): the float's bits made to order as the floats do (-0.0 as 0.0), then the position.
    The ties, at the mean of their ranks as scikit-learn counts them, are mended run by run
    (their cost grows with the tied values, not the row). `follow` ranks another column of
    the same positions starting from the order the last call found."""

    def __init__(self, n: int):
        self.n = n
        shape = (_CHUNK, n)
        self.rows = np.empty((n, _CHUNK), np.float32)  # a chunk's values as the column holds them
        self.bits = np.empty(shape, np.float32)
        self.flip = np.empty(shape, np.uint32)  # also a followed chunk's values in sorted order
        self.key = np.empty(shape, np.uint64)
        self.tied = np.zeros(shape, bool)
        self.flat = np.empty(shape, np.intp)
        self.ranks = np.empty(shape)
        self.positions = np.arange(n, dtype=np.uint64)
        self.offsets = (np.arange(_CHUNK, dtype=np.intp) * n)[:, None]
        self.in_order = np.tile(np.arange(1.0, n + 1), _CHUNK)
        self.width = 0  # the units of the last chunk sorted
        self.mended = np.zeros(0, np.intp)  # the sorted places whose ranks ties changed
        self.drawn: tuple[tuple[bytes, int, int], np.ndarray] | None = None

    def positive(self, y: np.ndarray, shuffles: int, seed: int) -> np.ndarray:
        """1.0 where each row of `_drawn(y, shuffles, seed)` holds the positive label (the
        larger), else 0.0; drawn once for the same labels (the columns of a cell)."""
        key = (y.tobytes(), shuffles, seed)
        if self.drawn is None or self.drawn[0] != key:
            ys = _drawn(y, shuffles, seed)
            self.drawn = (key, (ys == ys.max()).astype(np.float64))
        return self.drawn[1]

    def __call__(self, g: Gathered, start: int) -> np.ndarray:
        """The midranks (1-based, float64) of units [start, start + _CHUNK) of `g` as [units,
        positions]: a view of this ranker's buffer, valid until the next call."""
        self.width = min(_CHUNK, g.units - start)
        return self._sort(self._transposed(g, start, self.width))

    def _sort(self, bits: np.ndarray) -> np.ndarray:
        """The midranks of the values `bits` holds, [units, positions] (`_transposed`)."""
        n, width = self.n, len(bits)
        flip, key = self.flip[:width], self.key[:width]
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
        # each value's place in its row
        self.ranks[:width].reshape(-1)[flat.reshape(-1)] = self.in_order[: width * n]
        tied = self.tied[:width]
        np.equal(value[:, 1:], value[:, :-1], out=tied[:, 1:])  # equal to the value before it
        self._mend(tied)
        return self.ranks[:width]

    def follow(self, g: Gathered, start: int) -> np.ndarray:
        """As calling the ranker on units [start, start + _CHUNK) of `g`, a column of the
        positions the last call ranked (the same units of another column), where the order the
        last call found nearly sorts this column too: a gate's activation along its
        preactivation's order is sorted but for a few neighbours one float step apart (TensorFlow's
        float32 sigmoid is not monotone to the last bit), so a stable sort, which finds the
        runs already in order, puts it in order in a few passes instead of a sort of its own.
        A chunk far from that order (a third of its values below the value before) is sorted
        anew."""
        n, width = self.n, self.width
        if min(_CHUNK, g.units - start) != width:
            raise ValueError("follow: the chunk holds other units than the last one ranked")
        bits = self._transposed(g, start, width)
        flat = self.flat[:width].reshape(-1)
        along = self.flip[:width].view(np.float32)  # the values in the order the last call found
        np.take(bits.reshape(-1), flat, out=along.reshape(-1), mode="clip")
        tied = self.tied[:width]
        np.less(along[:, 1:], along[:, :-1], out=tied[:, 1:])  # lower than the value before it
        # values in no order (a third below the value before them) take a stable sort five
        # times as long as a sort of their own: they get one
        if np.count_nonzero(tied) > width * n // 3:
            return self._sort(bits)
        ranks = self.ranks[:width].reshape(-1)
        ranks[flat[self.mended]] = self.in_order[self.mended]  # each value's place, before ties
        order = along.argsort(axis=1, kind="stable")  # [units, places]: nearly 0, 1, 2, ...
        moved = np.flatnonzero(order != np.arange(n))  # the places whose value changes
        if len(moved):
            source = moved - moved % n + order.reshape(-1)[moved]  # where it comes from
            flat[moved] = flat[source]
            along.reshape(-1)[moved] = along.reshape(-1)[source]
            ranks[flat[moved]] = self.in_order[moved]
        np.equal(along[:, 1:], along[:, :-1], out=tied[:, 1:])  # equal to the value before it
        self._mend(tied)
        return self.ranks[:width]

    def _transposed(self, g: Gathered, start: int, width: int) -> np.ndarray:
        """Units [start, start + width) of `g` as [units, positions], -0.0 made 0.0."""
        rows = g.columns(start, start + width, self.rows[:, :width])  # then turned in the cache
        bits = self.bits[:width]
        np.add(rows.T, np.float32(0), out=bits)  # -0.0 + 0.0 is 0.0: one key for zero
        return bits

    def _mend(self, tied: np.ndarray) -> None:
        """Each run of equal values (`tied`: equal to the value before it in sorted order,
        never at a row's start) at the mean of its places; remembers the places changed."""
        n = self.n
        later = np.flatnonzero(tied)  # flat indices in sorted order
        if not len(later):
            self.mended = later
            return
        breaks = np.flatnonzero(np.diff(later) != 1)
        first = later[np.r_[0, breaks + 1]] - 1  # each run's first ...
        last = later[np.r_[breaks, len(later) - 1]]  # ... and last flat index, sorted
        size = last - first + 1
        members = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
        sorted_at = np.repeat(first, size) + members
        self.ranks.reshape(-1)[self.flat.reshape(-1)[sorted_at]] = np.repeat(
            (first % n + last % n) / 2 + 1, size
        )
        self.mended = sorted_at

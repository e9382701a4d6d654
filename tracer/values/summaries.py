"""A batch's summary statistics of every gate and state, computed where the values are.

A summary recording (`recorders.write.summary`) keeps, for each column (cell, gates or
states, gate or state, value column), `recorders.write.stats.Stats` per unit and per step.
`SummaryPlan` computes them for one batch, in one `Session.run` (one call of a Keras model):

- in the graph, for cells whose values are graph tensors (`FetchPlan.graph_values`: an
  unrolled cell's step tensors, stacked; what a forward loop emits): ops beside the gates
  reduce each column over the batch, per (step, unit): the float64 sum and the sum of squared
  deviations from its mean (matrix products with the row mask, which leaves padding out), the
  min and max, and a histogram of slots from `searchsorted` into cut points, counted by
  `bincount` per unit and per step. Only these aggregates are fetched, never the values.
- in numpy (`Stats.of`), for cells whose values are computed in numpy anyway: replayed and
  fused cells, reversed loops, Keras layers.

Both give the same numbers: counts, min, max, threshold counts and histograms exactly, means
and m2 to float64 rounding. The graph compares values in their own type (float32) with
float64 edges through cut points: a float32 value v is >= an edge e exactly when v >= the
smallest float32 not below e (`_cut`), and <= e (the last bin is closed) when v is below
the smallest float32 above e. Thresholds become cut points the same way, so one search gives
the bin and both threshold counts. A NaN or infinite value is refused (`SummaryError`): it
would make every statistic of its unit and step meaningless.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import RecordingError
from recorders.write.stats import Stats, pooled
from tracer._tf import tf
from tracer.values import running

__all__ = ["SummaryPlan", "SummaryError", "array_stats"]

_Key = tuple[str, str, str, str]  # cell, table (gates or states), gate or state, column


class SummaryError(RecordingError):
    """A value a summary cannot count (NaN or infinite)."""


@dataclass(frozen=True)
class Column:
    """One column of the summary: where its values are and how they are binned."""

    key: _Key
    cell: int  # the cell's number in the plan
    index: int  # the gate's or state's number in the cell
    edges: np.ndarray


def array_stats(
    values: np.ndarray, valid: np.ndarray | None, edges: np.ndarray, low: float, high: float
) -> tuple[Stats, Stats]:
    """Per unit and per step statistics of [examples, steps, units] `values` where `valid`
    ([examples, steps], None: everywhere), computed in numpy."""
    mask = None if valid is None else valid[:, :, None]
    grid = Stats.of(values, (0,), edges, low, high, mask)
    return grid.reduce(0), grid.reduce(1)


def _cut(edge: float, dtype: np.dtype, closed: bool = False) -> np.generic:
    """The smallest value of `dtype` not below `edge` (above it, if `closed`): for every v of
    that type, v >= edge exactly when v >= the cut (v <= edge when v < the closed cut)."""
    c = np.asarray(edge).astype(dtype)
    if c < edge or (closed and c == edge):
        c = np.nextafter(c, np.asarray(np.inf, dtype))
    return c


@dataclass(frozen=True)
class _Cuts:
    """A column's cut points, and what each slot between them counts towards."""

    points: np.ndarray  # increasing, in the values' type
    to_bin: np.ndarray  # [slots, bins + 2] 0/1: the histogram bin of each slot
    below: np.ndarray  # [slots] bool: the slot's values are < low
    above: np.ndarray  # [slots] bool: > high

    @classmethod
    def of(cls, edges: np.ndarray, low: float, high: float, dtype: np.dtype) -> _Cuts:
        bins = np.array([*(_cut(e, dtype) for e in edges[:-1]), _cut(edges[-1], dtype, True)])
        c_low, c_high = _cut(low, dtype), _cut(high, dtype, True)
        points = np.unique(np.concatenate([bins, [c_low, c_high]])).astype(dtype)
        # slot j holds the values in [points[j - 1], points[j]); slot 0 those below points[0]
        starts = np.concatenate([[-np.inf], points.astype(np.float64)])
        slot_bin = np.searchsorted(bins.astype(np.float64), starts, side="right")
        to_bin = np.zeros((len(starts), len(edges) + 1), np.int64)
        to_bin[np.arange(len(starts)), slot_bin] = 1
        ends = np.concatenate([points.astype(np.float64), [np.inf]])
        return cls(points, to_bin, ends <= float(c_low), starts >= float(c_high))


class SummaryPlan:
    """One batch's statistics of every column: see the module docstring.

    `plan` holds every cell (a `FetchPlan`, or a Keras plan, whose cells are all computed in
    numpy); `numpy_plan`, for a graph, holds those of them whose values are computed in
    numpy (None: none are). `columns` are as `recorders.write.summary.summary_columns` gives
    them, by cell name.
    """

    def __init__(
        self,
        plan: Any,
        numpy_plan: Any,
        columns: Sequence[tuple[str, str, str, str, np.ndarray]],
        low: float,
        high: float,
        graph: tf.Graph | None = None,
    ):
        self.plan, self.numpy_plan = plan, numpy_plan
        self.low, self.high = low, high
        number = {c.name: k for k, c in enumerate(plan.cells)}
        self.columns = []
        for cell, table, name, column, edges in columns:
            c = plan.cells[number[cell]]
            index = (c.gates if table == "gates" else c.spec.states).index(name)
            self.columns.append(Column((cell, table, name, column), number[cell], index, edges))
        self._in_graph: dict[_Key, tuple[list[tf.Tensor], _Cuts, np.ndarray]] = {}
        self.tensors: list[tf.Tensor] = []
        self.lengths: Any = None  # the rows' lengths placeholder (graph cells only)
        if graph is not None:
            with graph.as_default(), tf.name_scope("gatetrace_summary"):
                self._build()

    # -- the graph's part ------------------------------------------------------------------

    def _build(self) -> None:
        """Ops beside each column that the graph computes: see `_reduce`."""
        for col in self.columns:
            if not self.plan.in_graph(col.cell):
                continue
            x = self.plan.graph_values(col.cell, col.key[3], col.index)
            cell = self.plan.cells[col.cell]
            positions = (
                cell.positions if cell.path == "fetch" else None
            )  # a loop's steps are its positions
            if self.lengths is None:
                # how many steps of each row to count: 0 for a padding row (default: all)
                self.lengths = tf.compat.v1.placeholder_with_default(
                    tf.fill([tf.shape(x)[1]], tf.int32.max), [None], name="lengths"
                )
            valid = self._valid(x, positions, self.plan.graph_lengths(col.cell))
            dtype = np.dtype(x.dtype.as_numpy_dtype)
            cuts = _Cuts.of(col.edges, self.low, self.high, dtype)
            outputs = _reduce(x, valid, cuts.points)
            self._in_graph[col.key] = (outputs, cuts, positions)
            self.tensors.extend(outputs)

    def _valid(
        self, x: tf.Tensor, positions: np.ndarray | None, own: tf.Tensor | None
    ) -> tf.Tensor:
        """[steps, batch] booleans: the step's input position is below the row's length (and
        below the length the loop itself was run with)."""
        steps = tf.shape(x)[0]
        at = tf.range(steps) if positions is None else tf.constant(positions, tf.int32)
        valid = at[:, None] < self.lengths[None, :]
        if own is not None:
            valid = valid & (tf.range(steps)[:, None] < tf.cast(own, tf.int32)[None, :])
        return valid

    # -- one batch -------------------------------------------------------------------------

    def fetch(
        self,
        session: Any,
        feed_dict: Mapping,
        timeout: float | None = None,
        rows: int | None = None,
        keep: int | None = None,
        lengths: np.ndarray | None = None,
    ) -> tuple[list, list]:
        """Run one batch: the numpy cells' values (as their plan's `fetch` returns them) and
        the graph's statistics. `rows` is the batch's row count where known, `keep` how many
        of them are sequences (the rest padding), `lengths` the given lengths of those."""
        feed = dict(feed_dict)
        known = rows is not None and keep is not None
        if self.lengths is not None and known and (keep < rows or lengths is not None):
            steps = np.full(rows, np.iinfo(np.int32).max, np.int64)
            if lengths is not None:
                steps[:keep] = np.minimum(np.asarray(lengths)[:keep], steps[:keep])
            steps[keep:] = 0
            feed[self.lengths] = steps.astype(np.int32)
        mine = [] if self.numpy_plan is None else list(self.numpy_plan.tensors)
        got = list(running.run(session, [*mine, *self.tensors], feed, timeout))
        values = [] if self.numpy_plan is None else self.numpy_plan.finish(got[: len(mine)])
        return values, got[len(mine) :]

    def batch_of(self, values: Sequence, graph_values: Sequence) -> int:
        """How many rows the batch fetched held (for a stream whose batches say nothing)."""
        if self.numpy_plan is not None and values:
            return self.numpy_plan.batch_of(values)
        return int(np.max(graph_values[0], initial=0))  # each step's count, all rows counted

    def stats(
        self, values: Sequence, graph_values: Sequence, keep: int, lengths: np.ndarray | None
    ) -> Iterator[tuple[_Key, np.ndarray, Stats, Stats]]:
        """(key, step positions, per unit, per step) of every column for the batch fetched."""
        at = 0
        plan = self.numpy_plan if self.numpy_plan is not None else self.plan
        number = {c.name: k for k, c in enumerate(plan.cells)}
        for col in self.columns:
            if col.key in self._in_graph:
                outputs, cuts, positions = self._in_graph[col.key]
                got = graph_values[at : at + len(outputs)]
                at += len(outputs)
                yield col.key, *self._from_graph(col, got, cuts, positions)
            else:
                yield (
                    col.key,
                    *self._from_arrays(col, plan, number[col.key[0]], values, keep, lengths),
                )

    def _from_arrays(self, col: Column, plan: Any, k: int, values: Sequence, keep: int, lengths):
        cell, table, name, column = col.key
        rows = slice(0, keep)
        if table == "gates":
            a = plan.gate(values, k, col.index, column, rows)
        else:
            a = plan.state(values, k, name, rows)
        steps = np.asarray(plan.steps(values, k))
        given = plan.lengths(values, k, keep, None if lengths is None else lengths[:keep])
        valid = _as_mask(given, steps, a.shape[0])
        per_unit, per_step = array_stats(a, valid, col.edges, self.low, self.high)
        _check_finite(col.key, per_step, steps)
        return steps, per_unit, per_step

    def _from_graph(self, col: Column, got: Sequence, cuts: _Cuts, positions):
        n, mean, m2, lo, hi, by_unit, by_step = got
        steps = np.asarray(positions if positions is not None else np.arange(len(n)), np.int64)
        count = np.broadcast_to(n.astype(np.int64)[:, None], mean.shape)
        stats = []
        for axis, slots in ((0, by_unit), (1, by_step)):
            total, average, spread = pooled(count, np.where(count > 0, mean, np.nan), m2, axis)
            empty = count.sum(axis=axis) == 0
            histogram = slots.astype(np.int64) @ cuts.to_bin
            stats.append(
                Stats(
                    total,
                    np.where(empty, np.nan, average),
                    np.where(empty, 0.0, spread),
                    np.where(empty, np.inf, lo.min(axis=axis).astype(np.float64)),
                    np.where(empty, -np.inf, hi.max(axis=axis).astype(np.float64)),
                    slots[:, cuts.below].sum(axis=1).astype(np.int64),
                    slots[:, cuts.above].sum(axis=1).astype(np.int64),
                    histogram,
                    col.edges,
                    self.low,
                    self.high,
                )
            )
        _check_finite(col.key, stats[1], steps)
        return steps, stats[0], stats[1]


def _reduce(x: tf.Tensor, valid: tf.Tensor, points: np.ndarray) -> list[tf.Tensor]:
    """Ops reducing [steps, batch, units] `x` over the rows `valid` ([steps, batch]): per step
    the count; per (step, unit) the mean and m2 (float64), min and max; the counts of each
    slot between `points` per unit and per step."""
    shape = tf.shape(x)
    steps, units = shape[0], shape[2]
    keep = valid[:, :, None]
    w = tf.cast(valid, tf.float64)[:, None, :]  # [steps, 1, batch]
    n = tf.reduce_sum(w, axis=[1, 2])
    x64 = tf.where(keep, tf.cast(x, tf.float64), tf.zeros([], tf.float64))
    mean = tf.matmul(w, x64)[:, 0, :] / tf.maximum(n, 1.0)[:, None]
    deviation = x64 - mean[:, None, :]
    m2 = tf.matmul(w, deviation * deviation)[:, 0, :]
    big = tf.constant(np.inf, x.dtype)
    lo = tf.reduce_min(tf.where(keep, x, big), axis=1)
    hi = tf.reduce_max(tf.where(keep, x, -big), axis=1)
    slots = len(points) + 1
    found = tf.searchsorted(
        tf.constant(points[None, :], x.dtype),
        tf.reshape(x, [1, -1]),
        side="right",
        out_type=tf.int32,
    )
    found = tf.reshape(found, shape)

    def counts(place: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
        """[size, slots] counts of each value's slot at its `place`; padding in a last, dropped place."""
        where = tf.where(keep, found + place * slots, size * slots)
        got = tf.math.bincount(
            tf.reshape(where, [-1]), minlength=size * slots + 1, maxlength=size * slots + 1
        )
        return tf.reshape(got[:-1], [size, slots])

    by_unit = counts(tf.range(units)[None, None, :], units)
    by_step = counts(tf.range(steps)[:, None, None], steps)
    return [n, mean, m2, lo, hi, by_unit, by_step]


def _as_mask(given: np.ndarray | None, steps: np.ndarray, rows: int) -> np.ndarray | None:
    """[rows, steps] booleans from lengths per row, or a mask as it is (None: all valid)."""
    if given is None:
        return None
    given = np.asarray(given)
    if given.ndim == 2:
        return given[:rows].astype(bool)
    return steps[None, :] < given[:rows, None]


def _check_finite(key: _Key, per_step: Stats, steps: np.ndarray) -> None:
    """Refuse NaN or infinite values: their sums are not finite (those of finite float32
    values always are, in float64)."""
    bad = (per_step.count > 0) & ~np.isfinite(per_step.mean)
    if bad.any():
        cell, table, name, column = key
        what = f"gate {name} {column}" if table == "gates" else f"state {name}"
        raise SummaryError(
            f"cell {cell} {what}: a value at step {int(steps[np.argmax(bad)])} is NaN or infinite, which a summary "
            "cannot count; record these sequences in full (without --summary) to see where"
        )

"""A batch's summary statistics of every gate and state, computed where the values are.

A summary recording (`recorders.write.summary`) keeps, for each column (cell, gates or
states, gate or state, value column), `recorders.write.stats.Stats` per unit and per step.
`Summary` computes them for one batch, from one `Session.run` (one call of a Keras model),
where `in_graph` says:

- from the arrays a full recording fetches (on a CPU, where numba is installed): the
  compiled loop of `tracer.values.compiled` reduces each column on the writer's threads
  while the next batch runs; also for the cells computed in numpy anyway (replayed and fused
  cells, reversed loops, Keras layers, TensorFlow Lite files), without numba by `Stats.of`.
- in the graph (on a GPU, or without numba), for cells whose values are graph tensors
  (`FetchPlan.graph_values`: an unrolled cell's step tensors, stacked; what a forward loop
  emits): ops beside the gates reduce each column over the batch, per (step, unit): the
  float64 sum and the sum of squared deviations from its mean (matrix products with the row
  mask, which leaves padding out), the min and max, and each value's histogram slot (its
  arithmetic compiled by XLA into one loop), counted by `bincount` per unit and per step.
  Only these aggregates are fetched, never the values.

Both give the same numbers: counts, min, max, threshold counts and histograms exactly, means
and m2 to float64 rounding. The graph compares values in their own type (float32) with
float64 edges through cut points: a float32 value v is >= an edge e exactly when v >= the
smallest float32 not below e (`recorders.write.stats.cut_point`), and <= e (the last bin is
closed) when v is below the smallest float32 above e. The thresholds' cut points split the bins they fall in, so one
count of slots gives the histogram and the threshold counts. A value's bin is found by one
float64 multiply (`_Bins`), checked against the cut points when the plan is made, or else by
`searchsorted`. A NaN or infinite value is refused (`SummaryError`): it would make every
statistic of its unit and step meaningless. TensorFlow's CPU kernels treat denormal float32
values as zero: one below 1.2e-38 in magnitude is binned and compared as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np

from recorders.errors import RecordingError
from recorders.write.stats import Stats, cut_point, pooled
from recorders.write.summary import Key as _Key  # cell, table, gate or state, column
from tracer._tf import tf
from tracer.values import compiled
from tracer.values.compiled import Slots
from tracer.values.fetch import FetchPlan
from tracer.values.plan import ValuePlan
from tracer.values.replayed import ReplayedPlan

__all__ = ["Summary", "SummaryError", "Column", "array_stats", "in_graph"]


class SummaryError(RecordingError):
    """A value a summary cannot count (NaN or infinite)."""


@dataclass(frozen=True)
class Column:
    """One column of the summary: where its values are and how they are binned."""

    key: _Key
    cell: int  # the cell's number in the plan
    index: int  # the gate's or state's number in the cell
    edges: np.ndarray


def in_graph() -> bool:
    """Whether a graph's summary statistics are computed in the graph, beside the gates: on a
    GPU (where the values never leave the device), or where the compiled loop is not
    installed. Elsewhere they are computed from the arrays a full recording fetches, by the
    compiled loop (`tracer.values.compiled`) on the writer's threads while the next batch
    runs: on a CPU, about a third of the CPU time the graph's ops take (docs/summaries.md)."""
    return not compiled.available() or bool(tf.config.list_physical_devices("GPU"))


def array_stats(
    values: np.ndarray, valid: np.ndarray | None, edges: np.ndarray, low: float, high: float
) -> tuple[Stats, Stats]:
    """Per unit and per step statistics of [examples, steps, units] `values` where `valid`
    ([examples, steps], None: everywhere), computed in numpy."""
    mask = None if valid is None else valid[:, :, None]
    grid = Stats.of(values, (0,), edges, low, high, mask)
    return grid.reduce(0), grid.reduce(1)


@dataclass(frozen=True)
class _Bins:
    """How the graph finds a value's slot, and what each slot counts toward.

    `points` are the cut points of the edges in the values' type: `cut_point` of each edge (of the
    last, closed, edge: the smallest value above it). The thresholds have cut points too: a
    value is below `low` exactly when it is below `cut_point(low)`, above `high` exactly when it is
    >= `cut_point(high, closed)`; `marks` are those of them that are not among the points. A
    value's slot is how many of the points and marks together are <= it. Where `scale` is set,
    the points' count is computed as floor(v * scale) + `offset` in float64 (clipped to
    0..n+1; a value equal to the last edge, `top`, put in bin n): one rounding, so monotone in
    v, and checked against the points on both sides of every cut (`_arithmetic`), hence equal
    to the count everywhere; each mark adds one comparison. Elsewhere `searchsorted` counts
    both. Of each slot, `bin_of` gives its histogram slot (0 underflow, 1 to n the bins, n + 1
    overflow), `below` and `above` whether its values are below `low` or above `high`."""

    points: np.ndarray
    marks: np.ndarray
    scale: float | None
    offset: int
    top: float | None
    bin_of: np.ndarray
    below: np.ndarray
    above: np.ndarray

    @classmethod
    def of(cls, edges: np.ndarray, low: float, high: float, dtype: np.dtype) -> _Bins:
        points = np.array(
            [*(cut_point(e, dtype) for e in edges[:-1]), cut_point(edges[-1], dtype, True)],
            dtype=dtype,
        )
        thresholds = np.array([cut_point(low, dtype), cut_point(high, dtype, True)], dtype=dtype)
        marks = np.setdiff1d(thresholds, points)  # those that are not cut points already
        top = float(edges[-1]) if np.asarray(edges[-1]).astype(dtype) == edges[-1] else None
        scale, offset = _arithmetic(edges, points, dtype, top)
        # slot j holds the values that j of `every` are <= to: below low while j is at most
        # how many are below low's cut, above high once j passes high's cut
        every = np.sort(np.r_[points, marks])
        j = np.arange(len(every) + 1)
        before = np.searchsorted(every, thresholds, side="left")
        bin_of = np.r_[0, np.searchsorted(points, every, side="right")]  # the points passed
        return cls(points, marks, scale, offset, top, bin_of, j <= before[0], j > before[1])

    @property
    def width(self) -> int:
        """How many slots there are."""
        return len(self.points) + len(self.marks) + 1

    def slots(self, x: tf.Tensor, x64: tf.Tensor) -> tf.Tensor:
        """Each value's slot, int32, shaped as `x` (`x64`: the same values in float64)."""
        if self.scale is None:
            found = tf.searchsorted(
                tf.constant(np.sort(np.r_[self.points, self.marks])[None, :]),
                tf.reshape(x, [1, -1]),
                side="right",
                out_type=tf.int32,
            )
            return tf.reshape(found, tf.shape(x))
        last = len(self.points)
        slot = tf.cast(tf.floor(x64 * self.scale), tf.int32) + self.offset
        slot = tf.clip_by_value(slot, 0, last)
        if self.top is not None:
            slot = tf.where(tf.equal(x64, self.top), last - 1, slot)
        for mark in self.marks:
            slot += tf.cast(tf.greater_equal(x, tf.constant(mark, x.dtype)), tf.int32)
        return slot

    @cached_property
    def compiled(self) -> Slots:
        """The same slots, as the compiled loop finds them (`tracer.values.compiled`); made
        once, as the bins are (`Summary._bins`)."""
        every = np.sort(np.r_[self.points, self.marks])
        return Slots(self.scale, self.offset, len(self.points), self.top, self.marks, every)

    def histogram(self, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(histogram, below, above) counts from the counts of each slot (along the last axis)."""
        into = np.zeros((self.width, len(self.points) + 1), np.int64)
        into[np.arange(self.width), self.bin_of] = 1
        return counted @ into, counted[..., self.below].sum(-1), counted[..., self.above].sum(-1)


def _arithmetic(
    edges: np.ndarray, points: np.ndarray, dtype: np.dtype, top: float | None
) -> tuple[float | None, int]:
    """(scale, offset) when floor(v * scale) + offset gives every value of `dtype` the slot
    that counting `points` gives it (see `_Bins`), else (None, 0). Even bins whose first edge
    is a whole number of bin widths from 0 qualify; the check is made on both sides of every
    cut point, which, the formula being monotone, makes it hold everywhere."""
    n = len(edges) - 1
    scale = n / (edges[-1] - edges[0])
    offset = 1 - edges[0] * scale
    if not (np.isfinite(scale) and float(offset).is_integer() and abs(offset) < 2**30):
        return None, 0
    if not np.allclose(np.diff(edges), 1 / scale, rtol=1e-9, atol=0):
        return None, 0
    offset = int(offset)
    lowest = np.asarray(-np.inf, dtype)
    probes = np.concatenate([points, np.nextafter(points, lowest)]).astype(dtype)

    def arithmetic(v: np.ndarray) -> np.ndarray:  # as `_Bins.slots` computes it, in float64
        v64 = v.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            slot = np.clip(np.floor(v64 * scale) + offset, 0, n + 1)
        return np.where(v64 == top, n, slot) if top is not None else slot

    counted = np.searchsorted(points, probes, side="right")
    if np.array_equal(arithmetic(probes), counted):
        return float(scale), offset
    return None, 0


class Summary:
    """The statistics of every column of a batch: see the module docstring.

    `plan` holds every cell (a `FetchPlan`, or a Keras or TensorFlow Lite plan, whose cells are
    all computed in numpy). The columns the graph computes get ops beside the gates (`graph_run` says what
    to fetch and feed for a batch); the others are computed from a plan's arrays (`stats`:
    those of the cells computed in numpy, a plan of their own). `columns` are as
    `recorders.write.totals.summary_columns` gives them, by cell name.
    """

    def __init__(
        self,
        plan: FetchPlan | ReplayedPlan[Any],
        columns: Sequence[tuple[str, str, str, str, np.ndarray]],
        low: float,
        high: float,
        graph: tf.Graph | None = None,
    ):
        self.low, self.high = low, high
        number = {c.name: k for k, c in enumerate(plan.cells)}
        self.columns = []
        for cell, table, name, column, edges in columns:
            c = plan.cells[number[cell]]
            index = (c.gates if table == "gates" else c.spec.states).index(name)
            self.columns.append(Column((cell, table, name, column), number[cell], index, edges))
        # the columns the graph computes: their values, step positions, loop lengths, bins
        self._in_graph: dict[_Key, tuple[tf.Tensor, Any, Any, _Bins]] = {}
        # per kind of batch (with rows or steps to leave out, or without), each column's outputs
        self._outputs: dict[bool, dict[_Key, list[tf.Tensor]]] = {}
        self.lengths: Any = None  # the rows' lengths placeholder (graph cells only)
        self._made: dict[tuple[bytes, str], _Bins] = {}  # the slots of array columns
        self._graph = graph
        if graph is not None and isinstance(plan, FetchPlan):  # a Keras plan's: all in numpy
            with graph.as_default(), tf.name_scope("gatetrace_summary"):
                self._find(plan)

    # -- the graph's part ------------------------------------------------------------------

    def _find(self, plan: FetchPlan) -> None:
        """The values of each column the graph computes, and the lengths placeholder."""
        for col in self.columns:
            x = plan.graph_values(col.cell, col.key[3], col.index)
            if x is None:
                continue  # computed in numpy
            if self.lengths is None:
                # how many steps of each row to count: 0 for a padding row (default: all)
                self.lengths = tf.compat.v1.placeholder_with_default(
                    tf.fill([tf.shape(x)[1]], tf.int32.max), [None], name="lengths"
                )
            bins = _Bins.of(col.edges, self.low, self.high, np.dtype(x.dtype.as_numpy_dtype))
            positions = plan.graph_positions(col.cell)
            self._in_graph[col.key] = (x, positions, plan.graph_lengths(col.cell), bins)

    def graph_ops(self, masked: bool = False) -> dict[_Key, list[tf.Tensor]]:
        """Each graph column's outputs (`_reduce`) for a batch whose rows all count (not
        `masked`), or one with padding rows or lengths; made when first asked (ask before the
        graph is finalized: a `SessionRunHook` adds them to a run of its own)."""
        if not self._in_graph:
            return {}
        if masked not in self._outputs:
            assert self._graph is not None  # (only graph columns have ops)
            outputs = {}
            with self._graph.as_default(), tf.name_scope("gatetrace_summary"):
                for key, (x, positions, own, bins) in self._in_graph.items():
                    valid = self._valid(x, positions, own) if masked or own is not None else None
                    outputs[key] = _reduce(x, valid, bins)
            self._outputs[masked] = outputs
        return self._outputs[masked]

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

    def graph_run(
        self, rows: int | None, keep: int | None, lengths: np.ndarray | None
    ) -> tuple[dict[_Key, list[tf.Tensor]], dict[Any, np.ndarray]]:
        """What a batch's run fetches for the graph's columns, and what it feeds them: `rows`
        is the batch's row count where known, `keep` how many of them are sequences (the
        rest padding), `lengths` the given lengths of those."""
        if self.lengths is None or rows is None or keep is None:
            return self.graph_ops(False), {}
        if keep == rows and lengths is None:
            return self.graph_ops(False), {}
        steps = np.full(rows, np.iinfo(np.int32).max, np.int64)
        if lengths is not None:
            steps[:keep] = np.minimum(np.asarray(lengths)[:keep], steps[:keep])
        steps[keep:] = 0
        return self.graph_ops(True), {self.lengths: steps.astype(np.int32)}

    @staticmethod
    def counted(graph_values: Mapping[_Key, Sequence[np.ndarray]]) -> int:
        """How many rows a batch held, from the graph's statistics (each step's count, all
        rows counted): for a stream whose batches say nothing, without numpy cells."""
        first = next(iter(graph_values.values()))
        return int(np.max(first[0], initial=0))

    # -- one batch -------------------------------------------------------------------------

    def stats(
        self,
        plan: ValuePlan | None,
        values: Sequence[Any],
        graph_values: Mapping[_Key, Sequence[np.ndarray]],
        keep: int,
        lengths: np.ndarray | None,
    ) -> list[Callable[[], tuple[_Key, np.ndarray, Stats, Stats]]]:
        """For every column, a function giving its (key, step positions, per unit, per step):
        from the graph's statistics (`graph_values`, as `graph_run`'s ops gave them), or from
        the `values` of `plan`, the plan of the cells computed in numpy. A writer calls them
        on its threads (`recorders.write.summary.SummaryWriter.add_later`)."""
        number = {} if plan is None else {c.name: k for k, c in enumerate(plan.cells)}
        out: list[Callable[[], tuple[_Key, np.ndarray, Stats, Stats]]] = []
        for col in self.columns:
            if col.key in self._in_graph:
                _, positions, _, bins = self._in_graph[col.key]
                out.append(partial(self._from_reduced, col, graph_values[col.key], bins, positions))
            else:
                assert plan is not None  # (a column not in the graph is in the numpy plan)
                k = number[col.key[0]]
                out.append(partial(self._from_arrays, col, plan, k, values, keep, lengths))
        return out

    def _from_arrays(
        self,
        col: Column,
        plan: ValuePlan,
        k: int,
        values: Sequence[Any],
        keep: int,
        lengths: np.ndarray | None,
    ) -> tuple[_Key, np.ndarray, Stats, Stats]:
        cell, table, name, column = col.key
        rows = slice(0, keep)
        if table == "gates":
            a = plan.gate(values, k, col.index, column, rows)
        else:
            a = plan.state(values, k, name, rows)
        steps = np.asarray(plan.steps(values, k))
        given = plan.lengths(values, k, keep, None if lengths is None else lengths[:keep])
        valid = _as_mask(given, steps, a.shape[0])
        if compiled.available():
            if a.dtype not in (np.float32, np.float64):  # float16 widened exactly
                a = a.astype(np.float32 if a.dtype == np.float16 else np.float64)
            bins = self._bins(col.edges, a.dtype)
            return self._from_reduced(col, compiled.reduce(a, valid, bins.compiled), bins, steps)
        per_unit, per_step = array_stats(a, valid, col.edges, self.low, self.high)
        _check_finite(col.key, per_step, steps)
        return col.key, steps, per_unit, per_step

    def _bins(self, edges: np.ndarray, dtype: np.dtype) -> _Bins:
        """The slots of values of `dtype` binned by `edges` (made once for each)."""
        key = (edges.tobytes(), dtype.str)
        if key not in self._made:
            self._made[key] = _Bins.of(edges, self.low, self.high, dtype)
        return self._made[key]

    def _from_reduced(
        self, col: Column, got: Sequence[np.ndarray], cuts: _Bins, positions: np.ndarray | None
    ) -> tuple[_Key, np.ndarray, Stats, Stats]:
        """A column's Stats from `_reduce`'s outputs, or the compiled loop's (the same)."""
        n, mean, m2, lo, hi, by_unit, by_step = got
        steps = np.asarray(positions if positions is not None else np.arange(len(n)), np.int64)
        count = np.broadcast_to(n.astype(np.int64)[:, None], mean.shape)
        stats = []
        for axis, slots in ((0, by_unit), (1, by_step)):
            total, average, spread = pooled(count, np.where(count > 0, mean, np.nan), m2, axis)
            empty = total == 0
            histogram, below, above = cuts.histogram(slots.astype(np.int64))
            stats.append(
                Stats(
                    total,
                    np.where(empty, np.nan, average),
                    np.where(empty, 0.0, spread),
                    np.where(empty, np.inf, lo.min(axis=axis).astype(np.float64)),
                    np.where(empty, -np.inf, hi.max(axis=axis).astype(np.float64)),
                    below,
                    above,
                    histogram,
                    col.edges,
                    self.low,
                    self.high,
                )
            )
        _check_finite(col.key, stats[1], steps)
        return col.key, steps, stats[0], stats[1]


def _reduce(x: tf.Tensor, valid: tf.Tensor | None, bins: _Bins) -> list[tf.Tensor]:
    """Ops reducing [steps, batch, units] `x` over the rows `valid` ([steps, batch]; None:
    all): per step the count; per (step, unit) the mean and m2 (float64), min and max; the
    counts of each of `bins`' slots per unit and per step."""
    shape = tf.shape(x)
    steps, units = shape[0], shape[2]
    if valid is None:
        w = tf.ones([steps, 1, shape[1]], tf.float64)  # [steps, 1, batch]: each row weighs 1
    else:
        w = tf.cast(valid, tf.float64)[:, None, :]  # ...or 0, where left out
    n = tf.reduce_sum(w, axis=[1, 2])
    x64 = tf.cast(x, tf.float64)
    mean = tf.matmul(w, x64)[:, 0, :] / tf.maximum(n, 1.0)[:, None]
    deviation = x64 - mean[:, None, :]
    m2 = tf.matmul(w, deviation * deviation)[:, 0, :]
    big = tf.constant(np.inf, x.dtype)
    keep = None if valid is None else valid[:, :, None]
    lo = tf.reduce_min(x if keep is None else tf.where(keep, x, big), axis=1)
    hi = tf.reduce_max(x if keep is None else tf.where(keep, x, -big), axis=1)
    width = bins.width
    place = (tf.range(steps)[:, None, None] * units + tf.range(units)[None, None, :]) * width
    size = steps * units * width
    # the slots' arithmetic (with its own cast, fused too), compiled by XLA into one loop (else
    # a pass over the values per op), where the steps are fixed: XLA compiles once per shape,
    # and batch sizes rarely vary
    fixed = x.shape[0] is not None and x.shape[2] is not None
    with tf.xla.experimental.jit_scope(compile_ops=bins.scale is not None and fixed):
        grid = bins.slots(x, tf.cast(x, tf.float64)) + place
        if keep is not None:
            grid = tf.where(keep, grid, size)  # left out: in a last place, dropped
    counted = tf.math.bincount(tf.reshape(grid, [-1]), minlength=size + 1, maxlength=size + 1)
    counted = tf.reshape(counted[:-1], [steps, units, width])
    return [n, mean, m2, lo, hi, tf.reduce_sum(counted, 0), tf.reduce_sum(counted, 1)]


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

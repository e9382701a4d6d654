"""A graph cell's way to its values within a `tracer.values.fetch.FetchPlan`: one type per way.

The plan fetches every tensor once, in one run. What the graph does not give as it is, a
`Computer` makes from the fetched values, one per cell that needs it, lower layers first:

    Emitting    a loop rewritten to emit its cell's values (`tracer.values.emit`): the
                emitted tensors, batch-major (`Emitted`); a fused op's in a loop, its
                outputs (`tracer.values.fused`); with `verify`, replayed too and compared
    Replaying   a loop whose cell is recomputed in numpy from what enters and leaves it
                (`tracer.values.replay`), checked against the loop's outputs and final state
    FusedOp     a fused op outside loops: its outputs and inputs (`tracer.values.fused`)

Each cell's arrays then come through its `Source`:

    Unrolled    the graph's own gate ops, one per step (`static_rnn` and the like)
    Computed    what its `Computer` made, by input position, in the plan's step window
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.found import Cell
from tracer.values.fused import fused_values
from tracer.values.plan import Read
from tracer.values.replay import Replayed, check, compare, replay
from tracer.values.slots import Emitted, LoopSlots, examples_steps, graph_piece, piece
from tracer.values.weights import stacked

__all__ = [
    "Computer",
    "Emitting",
    "Replaying",
    "FusedOp",
    "Source",
    "Unrolled",
    "Computed",
    "Layout",
]

# what a computer made for a cell: a replay (or a fused op's values), or what a loop emitted
Made = Replayed | Emitted
# the values made for the cells before (a stacked layer's replay reads the layer below's)
Before = Callable[[str], Made]
# per step, the slots of its preactivation tensors, activation tensors and states
Layout = list[tuple[list[int], list[int], list[int]]]


class Computer(ABC):
    """What makes one cell's values out of a batch's fetched values."""

    def __init__(self, cell: Cell):
        self.cell = cell

    @abstractmethod
    def make(self, values: list[Any], before: Before) -> Made:
        """The cell's values, from the fetched `values` (by slot) and those made `before`."""


class Replaying(Computer):
    """A loop cell recomputed in numpy from what enters and leaves its loop (`where`)."""

    def __init__(self, cell: Cell, where: LoopSlots):
        super().__init__(cell)
        self.where = where
        if not cell.spec.math.replays:
            raise GraphPatternError(
                f"cell {cell.name}: its ops run in the while loop {where.loop.loop}, whose body must be rewritten "
                "to emit them, and this graph cannot be (a live session's): record the model from its file"
            )

    def make(self, values: list[Any], before: Before, check_outputs: bool = True) -> Replayed:
        cell, where = self.cell, self.where
        if cell.fused is not None:
            raise GraphPatternError(
                f"cell {cell.name}: its {cell.fused.op_type} op runs inside a while loop, whose values gatetrace takes from "
                "the loop rewritten to emit them; the graph of a live session cannot be rebuilt: record the model from its file"
            )
        loop, slots = where.loop, where.replay
        if slots is None:
            raise ValueError(f"cell {cell.name}: nothing its replay starts from was fetched")
        if slots.inputs is not None:
            inputs = np.swapaxes(values[slots.inputs], 0, 1)  # the loop reads time-major
        elif where.reads is not None:  # what the step itself read, emitted by the loop
            inputs = np.swapaxes(values[where.reads[0]], 0, 1)
        elif not loop.direct or loop.below is None:
            raise GraphPatternError(
                f"cell {cell.name} reads the layer below ({loop.below}) through other ops (a residual add, a dropout), "
                "which a replay cannot rebuild; record the model from its file, whose loop then emits what the cell reads"
            )
        else:
            inputs = before(loop.below).states["h"]
        lengths = None if where.lengths is None else values[where.lengths]
        got = replay(
            cell.kind,
            stacked({role: values[k] for role, k in where.weights.items()}),
            inputs,
            dict(zip(cell.spec.states, (values[k] for k in slots.initial), strict=True)),
            lengths,
            forget_bias=cell.forget_bias,
            activation=cell.activation,
            recurrent_activation=cell.recurrent_activation or "sigmoid",
            cell_clip=cell.cell_clip,
            proj_clip=cell.proj_clip,
        )
        outputs = None if slots.outputs is None else np.swapaxes(values[slots.outputs], 0, 1)
        if outputs is not None and outputs.shape[1] == 1 and got.outputs.shape[1] > 1:
            # a Keras loop that keeps its last output only (return_sequences=False)
            outputs = outputs[:, 0]
        final = {
            state: values[k]
            for state, k in zip(cell.spec.states, slots.final, strict=True)
            if k is not None
        }
        if check_outputs:
            check(cell.name, got, outputs, final)
        return got


class Emitting(Computer):
    """A loop cell's values as its rewritten loop emitted them (each tensor of its step
    stacked [iterations, batch, ...], turned batch-major; gates cut apart as for an unrolled
    step), or a fused op's in a loop; with `verify`, replayed too and compared."""

    def __init__(self, cell: Cell, where: LoopSlots, verify: bool):
        super().__init__(cell)
        self.where, self.verify = where, verify

    def make(self, values: list[Any], before: Before) -> Made:
        cell, where = self.cell, self.where
        if where.fused is not None:  # the op's outputs and inputs, each stacked over the steps
            weights = {role: values[k] for role, k in where.weights.items()}
            return fused_values(cell, {name: values[k] for name, k in where.fused.items()}, weights)
        if where.emitted is None:
            raise ValueError(f"cell {cell.name}: its loop emits nothing; it is replayed")
        pre, act, states = ([values[k] for k in slots] for slots in where.emitted)
        got = Emitted(
            cell,
            {"preactivation": pre, "activation": act},
            {s: np.swapaxes(v, 0, 1) for s, v in zip(cell.spec.states, states, strict=True)},
        )
        if where.reads is not None:
            x, previous = where.reads
            got.inputs = np.swapaxes(values[x], 0, 1)
            got.read = {
                s: np.swapaxes(values[k], 0, 1)
                for s, k in zip(cell.spec.states, previous, strict=True)
            }
        if self.verify:
            replayed = Replaying(cell, where).make(values, before, check_outputs=False)
            lengths = None if where.lengths is None else values[where.lengths]
            compare(cell.name, replayed, got, lengths)
        return got


class FusedOp(Computer):
    """A fused op's cell outside loops: its op's outputs and inputs (`slots`, by name)."""

    def __init__(self, cell: Cell, slots: dict[str, int]):
        super().__init__(cell)
        self.slots = slots

    def make(self, values: list[Any], before: Before) -> Replayed:
        cell, slots = self.cell, self.slots
        weights = {role: values[slots[name]] for role, name in cell.weights.items()}
        return fused_values(cell, {name: values[k] for name, k in slots.items()}, weights)


def reversed_within(a: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[examples, steps, ...] values of steps that read their input reversed within each
    example's length (`reverse_sequence`) as a new array in input-position order: position p
    of an example of length n is step n - 1 - p where p < n, step p past it."""
    n, steps = a.shape[:2]
    lengths = np.minimum(np.asarray(lengths)[:n].astype(np.int64), steps)
    p = np.arange(steps)[None, :]
    order = np.where(p < lengths[:, None], lengths[:, None] - 1 - p, p)
    return np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)


class Source(ABC):
    """How one cell's arrays come out of a batch's values (a `FetchPlan`'s, by slot)."""

    def __init__(self, cell: Cell):
        self.cell = cell

    @abstractmethod
    def examples(self, values: Sequence[Any]) -> int:
        """How many examples the batch held."""

    @abstractmethod
    def steps(self, values: Sequence[Any]) -> np.ndarray:
        """The input positions of the recorded steps."""

    @abstractmethod
    def ran(self, values: Sequence[Any]) -> int:
        """How many steps the cell ran (those a window keeps, and those before and after)."""

    def lengths(
        self, values: Sequence[Any], keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        """Per example, how many steps to record (the `given` lengths, unless the cell's own
        loop says fewer)."""
        return given

    @abstractmethod
    def gate(self, values: Sequence[Any], gate: int, column: str, rows: slice) -> np.ndarray:
        """One gate's `preactivation` or `activation`: a new [examples, steps, units] array."""

    @abstractmethod
    def state(self, values: Sequence[Any], state: str, rows: slice) -> np.ndarray:
        """One state (`c` or `h`): a new [examples, steps, width] array."""

    @abstractmethod
    def read(self, values: Sequence[Any], rows: slice) -> Read:
        """What the cell read at each recorded step (a plan made with `parts`)."""

    def graph_values(
        self, tensors: Sequence[tf.Tensor], column: str, index: int
    ) -> tf.Tensor | None:
        """Gate number `index` (`column` preactivation or activation) or state number `index`
        (`column` value) at every step, as one graph tensor [steps, batch, units]; None
        where the values are made in numpy or not in input order (see `in_graph`)."""
        return None

    def in_graph(self, tensors: Sequence[tf.Tensor]) -> bool:
        """Whether `graph_values` gives the cell's values."""
        return False

    def graph_lengths(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor | None:
        """The sequence lengths the cell's own loop compares time with (None: none)."""
        return None

    def graph_positions(self) -> np.ndarray | None:
        """The input positions of `graph_values`' steps (None: 0, 1, ..., as a loop runs)."""
        return None


class Unrolled(Source):
    """An unrolled cell: its gates and states fetched from its own ops, step by step
    (`layout`), and with `parts` what each step read (`reads`: the input's slot and the
    previous states' slots). `ran` counts the steps it runs, where `cell` keeps fewer.
    Where the graph copies the state through past each sequence's length (static_rnn given
    sequence_length), `lengths` is the slot of those lengths, and where its input was reversed
    by them (the backward half), `reversal` too: step k of an example of length n read input
    position n - 1 - k, and the plan's `window` of positions is kept once they are in input
    order. Nothing is recorded past a length.
    """

    def __init__(
        self,
        cell: Cell,
        layout: Layout,
        reads: list[tuple[int, list[int]]],
        ran: int | None = None,
        *,
        lengths: int | None = None,
        reversal: int | None = None,
        window: slice = slice(None),
    ):
        super().__init__(cell)
        self.layout, self.reads = layout, reads
        self.own, self.reversal, self.window = lengths, reversal, window
        self._ran = len(cell.steps) if ran is None else ran

    def examples(self, values: Sequence[Any]) -> int:
        return len(values[self.layout[0][1][0]])

    def steps(self, values: Sequence[Any]) -> np.ndarray:
        return self.cell.positions[self.window]

    def ran(self, values: Sequence[Any]) -> int:
        return self._ran

    def lengths(
        self, values: Sequence[Any], keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        if self.own is None:
            return given
        own = np.asarray(values[self.own])[:keep]
        return own if given is None else np.minimum(own, given)

    def _by_position(self, values: Sequence[Any], a: np.ndarray, rows: slice) -> np.ndarray:
        """[examples, steps, ...] new values of the examples `rows` in input-position order,
        NaN at the steps the model did not run: at or past the batch's longest length every
        step only copies the state through (its cell is computed there once the conditional is
        drawn straight, `tracer.load.conds`, and thrown away)."""
        if self.own is not None:
            a[:, self.cell.positions >= np.max(values[self.own], initial=0)] = np.nan
        if self.reversal is None:
            return a
        a = reversed_within(a, np.asarray(values[self.reversal])[rows])
        return np.ascontiguousarray(a[:, self.window])

    def gate(self, values: Sequence[Any], gate: int, column: str, rows: slice) -> np.ndarray:
        c, which = self.cell, 0 if column == "preactivation" else 1
        first = piece(c, [values[i] for i in self.layout[0][which]], gate)
        out = np.empty((first[rows].shape[0], len(self.layout), c.units), np.float32)
        for t, slots in enumerate(self.layout):
            out[:, t] = piece(c, [values[i] for i in slots[which]], gate)[rows]
        return self._by_position(values, out, rows)

    def state(self, values: Sequence[Any], state: str, rows: slice) -> np.ndarray:
        k = self.cell.spec.states.index(state)
        out = np.stack([values[slots[2][k]][rows] for slots in self.layout], axis=1)
        return self._by_position(values, out, rows)

    def read(self, values: Sequence[Any], rows: slice) -> Read:
        x = np.stack([values[k][rows] for k, _ in self.reads], axis=1)
        previous = {
            s: np.stack([values[p[j]][rows] for _, p in self.reads], axis=1)
            for j, s in enumerate(self.cell.spec.states)
        }
        x, previous = (
            self._by_position(values, x, rows),
            {s: self._by_position(values, v, rows) for s, v in previous.items()},
        )
        return Read(x, previous["h"], previous.get("c"))

    def graph_values(
        self, tensors: Sequence[tf.Tensor], column: str, index: int
    ) -> tf.Tensor | None:
        if not self.in_graph(tensors):
            return None
        which = ("preactivation", "activation", "value").index(column)
        steps = [[tensors[k] for k in slots[which]] for slots in self.layout]
        if which == 2:
            return tf.stack([step[index] for step in steps])
        return tf.stack([piece(self.cell, step, index) for step in steps])

    def in_graph(self, tensors: Sequence[tf.Tensor]) -> bool:
        return self.reversal is None  # (a reversal by lengths: no step is one input position)

    def graph_lengths(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor | None:
        return None if self.own is None else tensors[self.own]

    def graph_positions(self) -> np.ndarray | None:
        return self.cell.positions


class Computed(Source):
    """A cell whose values a `Computer` made (`values[at]`): a loop's (`where` says where
    its lengths and emitted tensors are) or a fused op's (`where` None), by input position
    in the step `window`. A reversed loop's step t of an example of length n read input
    position n - 1 - t (positions at or past n are not recorded)."""

    def __init__(self, cell: Cell, at: int, where: LoopSlots | None, window: slice):
        super().__init__(cell)
        self.at, self.where, self.window = at, where, window

    def examples(self, values: Sequence[Any]) -> int:
        return examples_steps(values[self.at])[0]

    def steps(self, values: Sequence[Any]) -> np.ndarray:
        return np.arange(self.ran(values), dtype=np.int32)[self.window]

    def ran(self, values: Sequence[Any]) -> int:
        return examples_steps(values[self.at])[1]

    def lengths(
        self, values: Sequence[Any], keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        if self.where is None or self.where.lengths is None:
            return given
        own = np.asarray(values[self.where.lengths])[:keep]
        return own if given is None else np.minimum(own, given)

    def _by_position(self, values: Sequence[Any], a: np.ndarray, rows: slice) -> np.ndarray:
        """[examples, loop steps, ...] values of the examples `rows` as a new array ordered by
        input position, in the window."""
        loop = self.cell.loop
        if loop is not None and loop.reversed and self.where is not None:
            n, steps = a.shape[:2]
            where = self.where.reverse_lengths
            lengths = np.full(n, steps) if where is None else np.asarray(values[where])[rows]
            a = reversed_within(a, lengths)
        return np.ascontiguousarray(a[:, self.window])

    def gate(self, values: Sequence[Any], gate: int, column: str, rows: slice) -> np.ndarray:
        return self._by_position(values, values[self.at].gate(column, gate)[rows], rows)

    def state(self, values: Sequence[Any], state: str, rows: slice) -> np.ndarray:
        return self._by_position(values, values[self.at].states[state][rows], rows)

    def read(self, values: Sequence[Any], rows: slice) -> Read:
        got = values[self.at]
        x = self._by_position(values, got.inputs[rows], rows)
        previous = {
            s: self._by_position(values, got.previous(s)[rows], rows)
            for s in self.cell.spec.states
            if s in got.read or s in got.initial
        }
        return Read(x, previous["h"], previous.get("c"))

    def in_graph(self, tensors: Sequence[tf.Tensor]) -> bool:
        c, where = self.cell, self.where
        return (  # (emitted: a loop rewritten to emit its cell's values)
            c.fused is None
            and where is not None
            and where.emitted is not None
            and not c.in_loop.reversed
            and self.window == slice(None)
            and all(
                len(where.emitted[k]) in (1, len(c.gates))
                or all(tensors[i].shape.rank is not None for i in where.emitted[k])
                for k in (0, 1)
            )
        )

    def graph_values(
        self, tensors: Sequence[tf.Tensor], column: str, index: int
    ) -> tf.Tensor | None:
        if not self.in_graph(tensors):
            return None
        assert self.where is not None and self.where.emitted is not None  # (in_graph)
        which = ("preactivation", "activation", "value").index(column)
        stacked_ = [tensors[k] for k in self.where.emitted[which]]
        return stacked_[index] if which == 2 else graph_piece(self.cell, stacked_, index)

    def graph_lengths(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor | None:
        where = self.where
        return None if where is None or where.lengths is None else tensors[where.lengths]

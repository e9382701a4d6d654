"""The one-run fetch plan: every gate of every cell at every step in one `Session.run`.

A plan lists each tensor once (a tensor shared by several uses is fetched once) and
remembers, per cell and step, which fetched values make up its preactivations,
activations and states. `run` returns a `tracer.values.trace.Trace`, steps ordered by
input position (see `tracer.find.graph.Step.position`). Where each loop cell's values sit
among the fetched ones, and what a rewritten loop emits: `tracer.values.slots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer._tf import tf, v1
from tracer.cells.found import Cell
from tracer.values import running
from tracer.values.fused import fused_values
from tracer.values.parts import plan_parts
from tracer.values.plan import Read
from tracer.values.replay import Replayed, check, compare, replay
from tracer.values.slots import (
    Emitted,
    check_something_checks,
    examples_steps,
    graph_piece,
    loop_slots,
    piece,
    replay_order,
)
from tracer.values.trace import Trace, assemble
from tracer.values.weights import gate_weights, stacked

__all__ = ["FetchPlan"]


class FetchPlan:
    """The tensors to fetch for `cells`, and how to put the fetched values back together.

    An unrolled cell's gates are fetched from its own ops. A cell inside a while loop
    (`cell.loop`) is fetched from what its rewritten loop emits (`cell.loop.emitted`, see
    `tracer.values.emit`), or else replayed (`tracer.values.replay`): the plan fetches what
    enters and leaves its loop in the same run, and `fetch` recomputes its gates and checks
    them. With `verify`, emitted cells are replayed too and must agree within 1e-4. A fused
    op's cell (`cell.fused`) has its op's inputs and outputs fetched (`tracer.find.fused`). A stacked
    layer needs the layer below it: `context` (all cells found) supplies those that are
    not among `cells`. `steps` keeps a [start, stop) window of a replayed cell's steps.
    With `parts`, the plan also fetches what each step read and each cell's weights, for
    the preactivations' parts (`parts`, `tracer.values.parts`); an emitted loop must then
    emit what its steps read (`tracer.values.emit.emitting(..., reads=True)`).
    """

    def __init__(
        self,
        graph: tf.Graph,
        cells: Sequence[Cell],
        context: Sequence[Cell] = (),
        steps: tuple[int | None, int | None] = (None, None),
        verify: bool = False,
        parts: bool = False,
    ):
        self.cells = list(cells)
        self._names: list[str] = []
        self._steps = slice(*steps)
        slots: dict[str, int] = {}

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(self._names)
                self._names.append(name)
            return slots[name]

        # Per cell and step: slots of the preactivation tensors, activation tensors, states.
        self._layout = [
            [
                (
                    [slot(n) for n in step.preactivation],
                    [slot(n) for n in step.activation],
                    [slot(n) for n in step.states],
                )
                for step in cell.steps
            ]
            for cell in self.cells
        ]
        # Loop cells, lower layers first: emitted by their rewritten loop (`tracer.values.emit`),
        # or replayed from the slots of what enters and leaves it. With `verify`, emitted ones
        # are replayed too, and the two compared.
        self._loops = replay_order(self.cells, context)
        self._verify = verify
        # (a fused op's cell is checked by its own outputs, tracer.values.fused: no replay)
        replayed = [c for c in self._loops if c.path == "replay" or (verify and c.fused is None)]
        self._loop_slots = {
            c.name: loop_slots(c, slot, replayed=c in replayed, parts=parts) for c in self._loops
        }
        # With parts: per unrolled step, the slots of what it read (input, previous states);
        # per cell, its weights. An emitted loop cell's reads come with its `Emitted`.
        self._reads = [
            [(slot(step.input), [slot(n) for n in step.previous]) for step in cell.steps]
            if parts
            else []
            for cell in self.cells
        ]
        self._weight_slots = (
            {c.name: {role: slot(t) for role, t in c.weights.items()} for c in self.cells}
            if parts
            else {}
        )
        for c in self.cells:
            if parts and c.path == "loop" and not c.in_loop.emitted_step.input:
                raise GraphPatternError(
                    f"cell {c.name}: its loop does not emit what its steps read; rebuild it with emitting(..., reads=True)"
                )
        # Fused cells outside loops: what their ops read and return, by name.
        self._fused = [c for c in self.cells if c.fused is not None and c.loop is None]
        self._fused_slots = {
            c.name: {n: slot(n) for n in [*c.in_fused.tensors(), *c.weights.values()]}
            for c in self._fused
        }
        self.tensors = [graph.get_tensor_by_name(n) for n in self._names]
        computed = [*self._loops, *self._fused]  # each gets a `Replayed` after the fetched values
        self._replayed_at = {c.name: len(self.tensors) + k for k, c in enumerate(computed)}

    def __len__(self) -> int:
        return len(self.tensors)

    def check_verifiable(self) -> None:
        """Refuse a replayed cell whose replay nothing fetched in this plan would confirm."""
        check_something_checks([c for c in self._loops if c.path == "replay"])

    def batch_of(self, values: Sequence) -> int:
        """How many examples the fetched `values` hold (when nothing fed says so)."""
        c = self.cells[0]
        if c.path == "fetch":
            return len(values[self._layout[0][0][1][0]])
        return examples_steps(values[self._replayed_at[c.name]])[0]

    def run(
        self,
        session: v1.Session,
        feed_dict: Mapping[Any, Any] | None = None,
        examples: np.ndarray | None = None,
    ) -> Trace:
        """Fetch everything in one `session.run` and assemble a Trace."""
        return self.assemble(self.fetch(session, feed_dict), examples)

    def fetch(
        self,
        session: v1.Session,
        feed_dict: Mapping[Any, Any] | None = None,
        timeout: float | None = None,
    ) -> list:
        """The fetched values, in the order of `self.tensors`, then one `Replayed` per
        replayed cell (see `gate`, `state` and `steps`). `timeout` limits the run in seconds;
        Ctrl-C cancels it (see `tracer.values.running`)."""
        return self.finish(list(running.run(session, self.tensors, feed_dict, timeout)))

    def finish(self, values: list) -> list:
        """The fetched `values` (in the order of `self.tensors`) with one `Replayed` appended
        per replayed cell, as `fetch` returns them."""
        for cell in self._loops:
            if cell.path == "loop":
                values.append(self._emitted(cell, values))
                if self._verify and cell.fused is None:
                    lengths = self._loop_slots[cell.name].lengths
                    replayed = self._replay(cell, values, check_outputs=False)
                    compare(
                        cell.name,
                        replayed,
                        values[-1],
                        None if lengths is None else values[lengths],
                    )
            else:
                values.append(self._replay(cell, values))
        for cell in self._fused:
            slots = self._fused_slots[cell.name]
            weights = {role: values[slots[name]] for role, name in cell.weights.items()}
            values.append(
                fused_values(cell, {name: values[k] for name, k in slots.items()}, weights)
            )
        return values

    def graph_values(self, cell: int, column: str, index: int) -> tf.Tensor | None:
        """Cell number `cell`'s gate number `index` (`column` preactivation or activation), or
        its state number `index` (`column` value), at every step as one graph tensor [steps,
        batch, units], steps as `steps` orders them: an unrolled cell's step tensors stacked,
        or what a forward loop emits. None where the values are computed in numpy (replayed
        and fused cells), where steps are not in input order (a reversed loop) or where the
        plan keeps a window of a loop's steps."""
        if not self.in_graph(cell):
            return None
        c = self.cells[cell]
        which = ("preactivation", "activation", "value").index(column)
        if c.path == "fetch":
            steps = [[self.tensors[k] for k in slots[which]] for slots in self._layout[cell]]
            if which == 2:
                return tf.stack([step[index] for step in steps])
            return tf.stack([piece(c, step, index) for step in steps])
        emitted = self._loop_slots[c.name].emitted
        assert emitted is not None  # (in_graph)
        stacked_ = [self.tensors[k] for k in emitted[which]]
        return stacked_[index] if which == 2 else graph_piece(c, stacked_, index)

    def in_graph(self, cell: int) -> bool:
        """Whether `graph_values` gives cell number `cell`'s values (see there)."""
        c = self.cells[cell]
        if c.path == "fetch":
            return True
        where = self._loop_slots.get(c.name)
        return (
            c.path == "loop"
            and c.fused is None
            and where is not None
            and where.emitted is not None
            and not c.in_loop.reversed
            and self._steps == slice(None)
            and all(
                len(where.emitted[k]) in (1, len(c.gates))
                or all(self.tensors[i].shape.rank is not None for i in where.emitted[k])
                for k in (0, 1)
            )
        )

    def graph_lengths(self, cell: int) -> tf.Tensor | None:
        """The sequence lengths a loop cell's own loop compares time with (None: none)."""
        where = self._loop_slots.get(self.cells[cell].name)
        return None if where is None or where.lengths is None else self.tensors[where.lengths]

    def _emitted(self, cell: Cell, values: list) -> Replayed | Emitted:
        """A loop cell's values as its rewritten loop emitted them: each tensor of its step
        stacked [iterations, batch, ...], turned [batch, iterations, ...] (gates cut apart as
        for an unrolled step)."""
        where = self._loop_slots[cell.name]
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
        return got

    def _replay(self, cell: Cell, values: list, check_outputs: bool = True) -> Replayed:
        if cell.fused is not None:
            raise GraphPatternError(
                f"cell {cell.name}: its {cell.fused.op_type} op runs inside a while loop, whose values gatetrace takes from "
                "the loop rewritten to emit them; the graph of a live session cannot be rebuilt: record the model from its file"
            )
        where = self._loop_slots[cell.name]
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
            inputs = values[self._replayed_at[loop.below]].states["h"]
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

    def _by_position(
        self, values: Sequence, cell: Cell, a: np.ndarray, rows: slice = slice(None)
    ) -> np.ndarray:
        """A replayed cell's [examples, loop steps, ...] values (of the examples `rows`) as a
        new array ordered by input position, in the plan's step window. A reversed loop's
        step t of an example of length n read input position n - 1 - t (positions at or
        past n are not recorded)."""
        if cell.loop is not None and cell.loop.reversed:
            n, steps = a.shape[:2]
            where = self._loop_slots[cell.name].reverse_lengths
            lengths = np.full(n, steps) if where is None else np.asarray(values[where])[rows][:n]
            p = np.arange(steps)[None, :]
            order = np.where(p < lengths[:, None], lengths[:, None] - 1 - p, p)
            a = np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)
        return np.ascontiguousarray(a[:, self._steps])

    def steps(self, values: Sequence, cell: int) -> np.ndarray:
        """The input positions of cell number `cell`'s recorded steps."""
        c = self.cells[cell]
        if c.path == "fetch":
            return c.positions
        n = examples_steps(values[self._replayed_at[c.name]])[1]
        return np.arange(n, dtype=np.int32)[self._steps]

    def lengths(
        self, values: Sequence, cell: int, keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        """Per example, how many steps of cell number `cell` to record: the `given` lengths and,
        for a replayed cell, the sequence lengths its loop was run with (the smaller of the two)."""
        c = self.cells[cell]
        slots = self._loop_slots.get(c.name)
        where = None if slots is None else slots.lengths
        if where is None:
            return given
        own = np.asarray(values[where])[:keep]
        return own if given is None else np.minimum(own, given)

    def gate(
        self,
        values: Sequence[Any],
        cell: int,
        gate: int,
        column: str,
        rows: slice = slice(None),
    ) -> np.ndarray:
        """One gate's `preactivation` or `activation` of cell number `cell`, for the examples
        `rows` of the batch: a new contiguous [examples, steps, units] array."""
        c = self.cells[cell]
        if c.path != "fetch":
            got = values[self._replayed_at[c.name]]
            a = (
                got.gate(column, gate)
                if isinstance(got, Emitted)
                else getattr(got, column)[:, :, gate]
            )
            return self._by_position(values, c, a[rows], rows)
        units, which = c.units, 0 if column == "preactivation" else 1
        layout = self._layout[cell]
        first = piece(c, [values[i] for i in layout[0][which]], gate)
        out = np.empty((first[rows].shape[0], len(layout), units), np.float32)
        for t, slots in enumerate(layout):
            out[:, t] = piece(c, [values[i] for i in slots[which]], gate)[rows]
        return out

    def state(
        self, values: Sequence[Any], cell: int, state: str, rows: slice = slice(None)
    ) -> np.ndarray:
        """One state (`c` or `h`) of cell number `cell`, for the examples `rows`: a new [examples, steps, width] array."""
        c = self.cells[cell]
        if c.path != "fetch":
            return self._by_position(
                values, c, values[self._replayed_at[c.name]].states[state][rows], rows
            )
        k = c.spec.states.index(state)
        return np.stack([values[slots[2][k]][rows] for slots in self._layout[cell]], axis=1)

    def read(self, values: Sequence, cell: int, rows: slice = slice(None)) -> Read:
        """What cell number `cell` read at each recorded step, for the examples `rows` (a plan made with `parts`)."""
        c = self.cells[cell]
        states = c.spec.states
        if c.path == "fetch":
            reads = self._reads[cell]
            x = np.stack([values[k][rows] for k, _ in reads], axis=1)
            previous = {
                s: np.stack([values[p[j]][rows] for _, p in reads], axis=1)
                for j, s in enumerate(states)
            }
        else:
            got = values[self._replayed_at[c.name]]
            x = self._by_position(values, c, got.inputs[rows], rows)
            previous = {
                s: self._by_position(values, c, got.previous(s)[rows], rows)
                for s in states
                if s in got.read or s in got.initial
            }
        return Read(x, previous["h"], previous.get("c"))

    def parts(
        self, values: Sequence, cell: int, gate: int, rows: slice = slice(None)
    ) -> dict[str, np.ndarray | None]:
        """The parts of gate number `gate`'s preactivation (`tracer.values.parts`) for the
        examples `rows`: {part: [examples, steps, units] float32, or None where the cell has
        no such part}. For a plan made with `parts`."""
        c = self.cells[cell]
        weights = stacked({role: values[k] for role, k in self._weight_slots[c.name].items()})
        return plan_parts(self, values, cell, gate, gate_weights(c, weights), rows)

    def assemble(self, values: Sequence[Any], examples: np.ndarray | None = None) -> Trace:
        """Build a Trace from the fetched values, in the order of `self.tensors`."""
        return assemble(self, values, examples)

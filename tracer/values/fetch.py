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
from tracer.values.outputs import Output, tell, watch
from tracer.values.parts import plan_parts
from tracer.values.plan import Read
from tracer.values.slots import LoopSlots, check_something_checks, loop_slots, replay_order
from tracer.values.sources import (
    Computed,
    Computer,
    Emitting,
    FusedOp,
    Layout,
    Replaying,
    Source,
    Unrolled,
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
    Each way to a cell's values is a type of `tracer.values.sources`. `outputs` names tensors
    of the model's own (its outputs: [batch], [batch, units], [batch, steps, units] or
    [steps, batch, units]) fetched in the same run (`output`), once `tell_outputs` has told
    which of their dimensions hold the examples (`tracer.values.outputs`); `fetch_as` names,
    for an output the graph holds (`tracer.values.hold`), the held tensor to fetch instead.
    `ran` gives, by name, how many steps an unrolled cell runs where `cells` keep fewer
    (a selection's steps): an output as long matches the cells' steps (`output_steps`).
    """

    def __init__(
        self,
        graph: tf.Graph,
        cells: Sequence[Cell],
        context: Sequence[Cell] = (),
        steps: tuple[int | None, int | None] = (None, None),
        verify: bool = False,
        parts: bool = False,
        outputs: Sequence[str] = (),
        fetch_as: Mapping[str, str] | None = None,
        ran: Mapping[str, int] | None = None,
    ):
        self.cells = list(cells)
        self.outputs = tuple(outputs)
        self.told: tuple[Output, ...] = ()  # the outputs, once told (`tell_outputs`)
        self._names: list[str] = []
        window = self._window = slice(*steps)
        slots: dict[str, int] = {}

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(self._names)
                self._names.append(name)
            return slots[name]

        # Per unrolled cell and step: slots of the preactivation tensors, activation tensors,
        # states; with parts, of what the step read (input, previous states).
        layouts: list[Layout] = [
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
        reads = [
            [(slot(step.input), [slot(n) for n in step.previous]) for step in cell.steps]
            if parts
            else []
            for cell in self.cells
        ]
        # per unrolled cell, the slots of the lengths its graph stops each sequence at and of
        # those its input was reversed by (static_rnn given sequence_length), whose steps are
        # kept whole and windowed once in input order
        bounds: dict[str, dict[str, Any]] = {
            c.name: {
                "lengths": None if c.lengths is None else slot(c.lengths),
                "reversal": None if c.reverse_lengths is None else slot(c.reverse_lengths),
                "window": slice(None) if c.reverse_lengths is None else window,
            }
            for c in self.cells
        }
        # per cell, its weights (parts); an emitted loop cell's reads come with its `Emitted`
        self._weight_slots = (
            {c.name: {role: slot(t) for role, t in c.weights.items()} for c in self.cells}
            if parts
            else {}
        )
        # What is made from the fetched values, lower layers first: each loop cell (emitted
        # by its rewritten loop, or replayed from what enters and leaves it; with verify, an
        # emitted one is replayed too), then each fused op's cell outside loops.
        self._computers: list[Computer] = []
        loop_where: dict[str, LoopSlots] = {}
        for c in replay_order(self.cells, context):
            emits = c.path == "loop"
            # (a fused op's cell is checked by its own outputs, tracer.values.fused: no replay)
            replayed = not emits or (verify and c.fused is None)
            where = loop_where[c.name] = loop_slots(c, slot, replayed=replayed, parts=parts)
            if parts and emits and not c.in_loop.emitted_step.input:
                raise GraphPatternError(
                    f"cell {c.name}: its loop does not emit what its steps read; rebuild it with emitting(..., reads=True)"
                )
            self._computers.append(
                Emitting(c, where, verify and c.fused is None) if emits else Replaying(c, where)
            )
        for c in self.cells:
            if c.fused is not None and c.loop is None:
                names = [*c.in_fused.tensors(), *c.weights.values()]
                self._computers.append(FusedOp(c, {n: slot(n) for n in names}))
        # an output a hold replaced is fetched as the held tensor its readers read
        self._output_slots = [slot((fetch_as or {}).get(n, n)) for n in self.outputs]
        self.tensors = [graph.get_tensor_by_name(n) for n in self._names]
        # each computer's values come after the fetched ones, in order
        made_at = {k.cell.name: len(self.tensors) + i for i, k in enumerate(self._computers)}
        self._made_at = made_at
        self._sources: list[Source] = [
            Unrolled(c, layout, read, (ran or {}).get(c.name), **bounds[c.name])
            if c.loop is None and c.fused is None
            else Computed(c, made_at[c.name], loop_where.get(c.name), window)
            for c, layout, read in zip(self.cells, layouts, reads, strict=True)
        ]

    def __len__(self) -> int:
        return len(self.tensors)

    def tell_outputs(
        self, session: v1.Session, feed_dict: Mapping[Any, Any], timeout: float | None = None
    ) -> tuple[Output, ...]:
        """Tell which dimension of each output holds the examples and which the steps, by
        running the outputs on batches of other sizes (`tracer.values.outputs.watch`), before
        `output` can give them."""
        if self.outputs:
            fetched = [self._names[slot] for slot in self._output_slots]
            seen = watch(
                self.outputs, feed_dict, lambda feeds: running.run(session, fetched, feeds, timeout)
            )
            tensors = [self.tensors[0].graph.get_tensor_by_name(t) for t in fetched]
            self.told = tuple(
                tell(name, t.shape.as_list(), t.dtype.name, seen, k)
                for k, (name, t) in enumerate(zip(self.outputs, tensors, strict=True))
            )
        return self.told

    def output_steps(self, values: Sequence[Any], k: int) -> tuple[np.ndarray, bool]:
        """The steps of output number `k` that `output` gives (0 where it is not a sequence),
        and whether they run along the cells' steps: as many steps as every cell ran (before a
        window of them was kept). Those are cut as the cells' are: the plan's window of steps
        keeps the same positions, and the sequences' lengths apply to them."""
        told, value = self.told[k], values[self._output_slots[k]]
        length = told.step_count(value)
        along = told.steps is not None and length > 1
        along = along and all(source.ran(values) == length for source in self._sources)
        positions = np.arange(length, dtype=np.int32)
        return (positions[self._window] if along else positions), along

    def output(self, values: Sequence[Any], k: int, rows: slice = slice(None)) -> np.ndarray:
        """Output number `k` (of `outputs`) for the examples `rows`: [examples, steps, units]
        float32 (an output that is not a sequence as one step), the steps `output_steps` gives.
        SelectionError where the output is not as `tell_outputs` told, or holds what float32
        cannot."""
        value = self.told[k].rows(values[self._output_slots[k]], self.batch_of(values), rows)
        positions, along = self.output_steps(values, k)
        if along and len(positions) < value.shape[1]:
            value = np.ascontiguousarray(value[:, positions])
        return value

    def check_verifiable(self) -> None:
        """Refuse a replayed cell whose replay nothing fetched in this plan would confirm."""
        check_something_checks([k.cell for k in self._computers if isinstance(k, Replaying)])

    def batch_of(self, values: Sequence) -> int:
        """How many examples the fetched `values` hold (when nothing fed says so)."""
        return self._sources[0].examples(values)

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
        """The fetched values, in the order of `self.tensors`, then what each computer made
        (see `gate`, `state` and `steps`). `timeout` limits the run in seconds; Ctrl-C
        cancels it (see `tracer.values.running`)."""
        return self.finish(list(running.run(session, self.tensors, feed_dict, timeout)))

    def finish(self, values: list) -> list:
        """The fetched `values` (in the order of `self.tensors`) with what each computer made
        appended, as `fetch` returns them."""
        for computer in self._computers:
            values.append(computer.make(values, lambda name: values[self._made_at[name]]))
        return values

    def graph_values(self, cell: int, column: str, index: int) -> tf.Tensor | None:
        """Cell number `cell`'s gate number `index` (`column` preactivation or activation), or
        its state number `index` (`column` value), at every step as one graph tensor [steps,
        batch, units], steps as `steps` orders them: an unrolled cell's step tensors stacked,
        or what a forward loop emits. None where the values are computed in numpy (replayed
        and fused cells), where steps are not in input order (a reversed loop) or where the
        plan keeps a window of a loop's steps."""
        return self._sources[cell].graph_values(self.tensors, column, index)

    def in_graph(self, cell: int) -> bool:
        """Whether `graph_values` gives cell number `cell`'s values (see there)."""
        return self._sources[cell].in_graph(self.tensors)

    def graph_positions(self, cell: int) -> np.ndarray | None:
        """The input positions of `graph_values`' steps (None: 0, 1, ..., as a loop runs)."""
        return self._sources[cell].graph_positions()

    def graph_lengths(self, cell: int) -> tf.Tensor | None:
        """The sequence lengths a loop cell's own loop compares time with (None: none)."""
        return self._sources[cell].graph_lengths(self.tensors)

    def steps(self, values: Sequence, cell: int) -> np.ndarray:
        """The input positions of cell number `cell`'s recorded steps."""
        return self._sources[cell].steps(values)

    def lengths(
        self, values: Sequence, cell: int, keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        """Per example, how many steps of cell number `cell` to record: the `given` lengths and,
        for a replayed cell, the sequence lengths its loop was run with (the smaller of the two)."""
        return self._sources[cell].lengths(values, keep, given)

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
        return self._sources[cell].gate(values, gate, column, rows)

    def state(
        self, values: Sequence[Any], cell: int, state: str, rows: slice = slice(None)
    ) -> np.ndarray:
        """One state (`c` or `h`) of cell number `cell`, for the examples `rows`: a new [examples, steps, width] array."""
        return self._sources[cell].state(values, state, rows)

    def read(self, values: Sequence, cell: int, rows: slice = slice(None)) -> Read:
        """What cell number `cell` read at each recorded step, for the examples `rows` (a plan made with `parts`)."""
        return self._sources[cell].read(values, rows)

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

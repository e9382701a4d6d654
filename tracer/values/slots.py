"""Where a cell's values sit among what one run fetched, and what a rewritten loop emits.

`piece` cuts one gate's columns out of a step's fetched tensors (its gates side by side, in
gate order, as a split's input or outputs hold them); `LoopSlots` and `ReplaySlots` say where
a loop cell's emitted values, lengths and replay inputs are among a `FetchPlan`'s tensors;
`Emitted` is a loop cell's batch as its rewritten loop emitted it; `replay_order` orders
replays so that a stacked layer follows the layer it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.found import Cell, Loop

__all__ = [
    "piece",
    "graph_piece",
    "Emitted",
    "LoopSlots",
    "ReplaySlots",
    "loop_slots",
    "examples_steps",
    "check_something_checks",
    "replay_order",
]


def piece(cell: Cell, parts: list[np.ndarray], gate: int) -> np.ndarray:
    """Gate number `gate`'s [batch, units] columns among one step's fetched tensors.

    `parts` hold the step's gates side by side, in gate order: one [batch, gates *
    units] tensor (a split's input), one [batch, units] tensor per gate (a split's
    outputs), or a mix (GRUCell: r and u together, then c).
    """
    units, at = cell.units, 0
    want = gate * units
    for part in parts:  # [batch, width], or [steps, batch, width] as a loop stacks them
        width = part.shape[-1] if part.ndim >= 2 else -1
        if at == want and width == units:
            return part  # the gate's own tensor
        if at <= want and want + units <= at + width:
            return part[..., want - at : want - at + units]
        at += max(width, 0)
    widths = [list(p.shape) for p in parts]
    raise GraphPatternError(
        f"cell {cell.name}: expected gate values of width {len(cell.gates)} x {units} side by side, fetched shapes {widths}"
    )


class Emitted:
    """A loop cell's values for one batch as its rewritten loop emitted them: each tensor of
    its step stacked [iterations, batch, ...]. `gate` cuts one gate out as a [batch,
    iterations, units] view (no copy); `preactivation` and `activation` build the whole
    [batch, iterations, gates, units] arrays of a `Replayed` only when asked (`--verify`)."""

    def __init__(
        self, cell: Cell, parts: dict[str, list[np.ndarray]], states: dict[str, np.ndarray]
    ):
        self.cell, self.parts, self.states = cell, parts, states
        # what each step read, where the loop emits it (reads=True)
        self.inputs: np.ndarray | None = None
        self.read: dict[str, np.ndarray] = {}
        self.initial: dict[str, np.ndarray] = {}  # (every state read is emitted: see `read`)

    def previous(self, state: str) -> np.ndarray:
        return self.read[state]

    def gate(self, column: str, gate: int) -> np.ndarray:
        return np.swapaxes(piece(self.cell, self.parts[column], gate), 0, 1)

    def _all(self, column: str) -> np.ndarray:
        return np.stack([self.gate(column, g) for g in range(len(self.cell.gates))], axis=2)

    preactivation = property(lambda self: self._all("preactivation"))
    activation = property(lambda self: self._all("activation"))


def graph_piece(cell: Cell, parts: list[tf.Tensor], gate: int) -> tf.Tensor:
    """`piece` of graph tensors whose widths a loop's stacking may have left
    unknown: one part per gate, or one part of every gate side by side, each checked when
    it runs (a part of another width stops the run with InvalidArgumentError)."""
    if all(p.shape.rank is not None and p.shape[-1] is not None for p in parts):
        return piece(cell, parts, gate)
    units, gates = cell.units, len(cell.gates)
    if len(parts) == gates:
        part, width, at = parts[gate], units, 0
    elif len(parts) == 1:
        part, width, at = parts[0], gates * units, gate * units
    else:
        raise GraphPatternError(
            f"cell {cell.name}: {len(parts)} emitted tensors of unknown widths hold its {gates} gates"
        )
    check = tf.debugging.assert_equal(
        tf.shape(part)[-1], width, message=f"cell {cell.name}: an emitted gate tensor's width"
    )
    with tf.control_dependencies([check]):
        return tf.identity(part)[..., at : at + units]


def examples_steps(got: Any) -> tuple[int, int]:
    """(examples, steps) of a loop cell's values for one batch (`Replayed` or `Emitted`): its
    states', or (a cell of your own named without states) its first gate's."""
    if got.states:
        return next(iter(got.states.values())).shape[:2]
    return got.gate("activation", 0).shape[:2]


@dataclass(frozen=True)
class ReplaySlots:
    """Where the values a replay starts from are among the fetched ones."""

    inputs: int | None  # None for a stacked layer: it reads the replay of the layer below
    initial: list[int]  # one per state
    final: list[int | None]  # one per state; None where a pruned graph dropped it
    outputs: int | None


@dataclass(frozen=True)
class LoopSlots:
    """Where a loop cell's values are among the fetched ones (indexes into `FetchPlan.tensors`)."""

    loop: Loop
    lengths: int | None
    reverse_lengths: int | None
    # emitted by the rewritten loop: the preactivations', activations' and states' slots
    emitted: tuple[list[int], list[int], list[int]] | None
    # what its emitted step read: the input's slot and the previous states' slots
    reads: tuple[int, list[int]] | None
    # a fused op inside the loop: the slot of each tensor of its step, by name in the loop body
    fused: dict[str, int] | None
    # its weights by role (a fused or replayed cell's; empty for the others)
    weights: dict[str, int]
    replay: ReplaySlots | None  # a replayed cell's (or, with verify, an emitted one's)


def loop_slots(c: Cell, slot: Callable[[str], int], replayed: bool, parts: bool) -> LoopSlots:
    """The slots of loop cell `c`'s tensors, each given one by `slot` (and fetched) as it is named."""
    loop = c.in_loop
    emits, fused = c.path == "loop", c.fused is not None
    lengths = None if loop.lengths is None else slot(loop.lengths)
    reverse_lengths = None if loop.reverse_lengths is None else slot(loop.reverse_lengths)
    emitted, reads, by_name = None, None, None
    if emits:
        step = loop.emitted_step
        emitted = (
            [slot(n) for n in step.preactivation],
            [slot(n) for n in step.activation],
            [slot(n) for n in step.states],
        )
        if (parts or not loop.direct) and not fused:
            reads = (slot(step.input), [slot(n) for n in step.previous])
        if fused:
            by_name = {body: slot(n) for body, n in _pairs(loop.step, step)}
    weights = (
        {role: slot(t) for role, t in c.weights.items()} if (emits and fused) or replayed else {}
    )
    replay = (
        ReplaySlots(
            inputs=None if loop.inputs is None else slot(loop.inputs),
            initial=[slot(t) for t in loop.initial],
            final=[None if t is None else slot(t) for t in loop.final],
            outputs=None if loop.outputs is None else slot(loop.outputs),
        )
        if replayed
        else None
    )
    return LoopSlots(loop, lengths, reverse_lengths, emitted, reads, by_name, weights, replay)


def _pairs(body, emitted) -> Iterator[tuple[str, str]]:
    """(tensor in the loop, its stack outside) for each tensor of a loop cell's step."""
    for field_ in ("preactivation", "activation", "states", "previous"):
        yield from zip(getattr(body, field_), getattr(emitted, field_), strict=True)
    yield body.input, emitted.input


def check_something_checks(replays: Sequence[Cell]) -> None:
    """Refuse a loop whose replay nothing in the graph can confirm: no outputs, no final
    state (a graph pruned down to something else), and no layer above it whose check
    would fail with it."""
    above = {c.in_loop.below for c in replays}
    for c in replays:
        loop = c.in_loop
        if loop.outputs is None and all(t is None for t in loop.final) and c.name not in above:
            raise GraphPatternError(
                f"cell {c.name}: nothing its loop {loop.loop} computes is left in the graph (no outputs, no final state), "
                "so its replay cannot be checked; record it from a graph that keeps the loop's outputs or final state"
            )


def replay_order(cells: Sequence[Cell], context: Sequence[Cell]) -> list[Cell]:
    """The loop cells of `cells` and the layers below them, each after the one it reads."""
    known = {c.name: c for c in [*context, *cells]}
    order: list[Cell] = []

    def add(cell: Cell) -> None:
        if any(c.name == cell.name for c in order):
            return
        below = cell.in_loop.below
        if below is not None:
            if below not in known:
                raise GraphPatternError(
                    f"cell {cell.name} reads the outputs of cell {below}, which is not among the cells found"
                )
            add(known[below])
        order.append(cell)

    for cell in cells:
        if cell.loop is not None:
            add(cell)
    return order

"""Values held inside the model's own computation (`--hold`): the graph rewritten so that
every op reading a held tensor reads the held one instead, and nothing else changes.

For each step tensor a `tracer.cells.holds.Hold` names (a cell's state, a gate's value after
its activation, or its preactivation, as `tracer.cells.found.Step` lists them), at the
GraphDef level:

    set:    held = SelectV2(mask, value, tensor)    mask[width]: true at the held columns
    scale:  held = Mul(tensor, factor)              factor[width]: F at the held columns, 1 elsewhere
    every input naming `tensor` (not a control input, not the new ops) then names `held`

so later steps and later layers compute from the held value, the columns not held are the
very values the model computed (a select, or a product by exactly 1), and a hold of nothing
records exactly what the model records. The cells' step tensors are renamed to the held
ones: what is recorded is what the model's next ops read.

Held: cells unrolled in a graph (`static_rnn`, `static_bidirectional_rnn`, cells found by
pattern). Refused in one line: cells inside a while loop or a fused op, Keras layers and
TensorFlow Lite ops (their steps run inside one op or one loop), and a live session's graph
(it cannot be rebuilt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from tracer._tf import tf, v1
from tracer.cells.found import AnyCell, Cell, Step
from tracer.cells.holds import Hold
from tracer.load.loaded import Model
from tracer.load.rebuild import rebuilt

__all__ = ["Held", "holding", "resolve"]

_PREFIX = "gatetrace_hold"


@dataclass(frozen=True)
class Held:
    """The model with its holds in place, the holds as resolved (full cell names), and the
    new name of each held tensor (`renamed` gives a cell its held tensors)."""

    model: Model
    holds: tuple[Hold, ...]
    names: dict[str, str]

    def renamed(self, cell: AnyCell) -> AnyCell:
        if not self.names or not isinstance(cell, Cell):
            return cell
        n = self.names

        def step(s: Step) -> Step:
            return replace(
                s,
                preactivation=tuple(n.get(t, t) for t in s.preactivation),
                activation=tuple(n.get(t, t) for t in s.activation),
                states=tuple(n.get(t, t) for t in s.states),
                input=n.get(s.input, s.input),
                previous=tuple(n.get(t, t) for t in s.previous),
            )

        return replace(cell, steps=tuple(step(s) for s in cell.steps))


def _cell_named(name: str, cells: Sequence[AnyCell]) -> AnyCell:
    exact = [c for c in cells if c.name == name]
    ends = [c for c in cells if c.name.endswith("/" + name)]
    found = exact or ends
    if len(found) == 1:
        return found[0]
    listed = ", ".join(c.name for c in (ends if len(ends) > 1 else cells))
    said = "several cells' names end" if len(ends) > 1 else "no cell is named so or ends"
    raise SelectionError(f"--hold {name}: {said} with /{name}; name one of: {listed}")


def _refusal(cell: AnyCell) -> str | None:
    if not isinstance(cell, Cell):
        kind = "a Keras layer" if cell.__class__.__name__ == "KerasCell" else "a TensorFlow Lite op"
        return f"{cell.name} is {kind}, whose steps run inside one op or loop that gatetrace does not rewrite"
    if cell.fused is not None:
        return f"{cell.name} is computed by one fused op ({cell.fused.op_type}), which keeps its gates inside"
    if cell.loop is not None:
        return f"{cell.name} runs inside a while loop; gatetrace holds values of cells unrolled in the graph"
    return None


def resolve(hold: Hold, cells: Sequence[AnyCell]) -> Hold:
    """`hold` with its cell's full name, checked against the cell: what it names, its units
    and its steps (`SelectionError`, one line, where they do not fit)."""
    cell = _cell_named(hold.cell, cells)
    spec = hold.describe()
    refused = _refusal(cell)
    if refused:
        raise SelectionError(f"--hold {spec}: cannot hold it: {refused}")
    assert isinstance(cell, Cell)
    gates, states = cell.spec.gates, cell.spec.states
    if (
        hold.preactivation
        and hold.name not in gates
        or (not hold.preactivation and hold.name not in (*states, *gates))
    ):
        raise SelectionError(
            f"--hold {spec}: {cell.name} ({cell.spec.kind}) has states {', '.join(states)} and gates "
            f"{', '.join(gates)} (a gate's preactivation: {gates[0]}.pre); found {hold.what!r}"
        )
    positions = [s.position for s in cell.steps]
    if not any(hold.held_at(p) for p in positions):
        raise SelectionError(
            f"--hold {spec}: holds no step of {cell.name}, whose steps are {min(positions)} to {max(positions)}"
        )
    return replace(hold, cell=cell.name)


def _columns(graph: tf.Graph, names: Sequence[str], first: int, width: int, cell: str):
    """Which tensor of `names` (side by side along their last axis) holds the columns
    [first, first + width), and where they start in it."""
    at = 0
    for name in names:
        size = graph.get_tensor_by_name(name).shape[-1]
        if size is None:
            raise SelectionError(
                f"--hold: cannot hold {name} of {cell}: its last dimension is not known before the graph runs"
            )
        if at <= first and first + width <= at + size:
            return name, first - at, size
        at += size
    raise SelectionError(f"--hold: {cell}: no single tensor of {list(names)} holds its gate")


def _targets(graph: tf.Graph, hold: Hold, cell: Cell):
    """(tensor, its width, the held columns) for each step `hold` holds."""
    for step in cell.steps:
        if not hold.held_at(step.position):
            continue
        if not hold.preactivation and hold.name in cell.spec.states:
            name = step.states[cell.spec.states.index(hold.name)]
            width = graph.get_tensor_by_name(name).shape[-1]
            if width is None:
                raise SelectionError(
                    f"--hold {hold.describe()}: the width of {name} is not known before the graph runs"
                )
            offset, size = 0, width
        else:
            gate = cell.spec.gates.index(hold.name)
            names = step.preactivation if hold.preactivation else step.activation
            name, offset, size = _columns(graph, names, gate * cell.units, cell.units, cell.name)
            width = cell.units
        units = range(width) if hold.units is None else hold.units
        if units and max(units) >= width:
            raise SelectionError(
                f"--hold {hold.describe()}: {cell.name}'s {hold.what} has {width} units (0 to {width - 1}); "
                f"found unit {max(units)}"
            )
        yield name, size, [offset + u for u in units]


def _const(graph_def, name: str, array: np.ndarray) -> None:
    node = graph_def.node.add(name=name, op="Const")
    node.attr["dtype"].type = tf.as_dtype(array.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array))


def _hold_tensor(graph_def, graph: tf.Graph, name: str, size: int, holds, number: int) -> str:
    """Add the ops holding `name` (each of `holds`: (Hold, columns), applied in order)."""
    dtype = graph.get_tensor_by_name(name).dtype
    if not dtype.is_floating:
        raise SelectionError(f"--hold: {name} holds {dtype.name} values, not floating point ones")
    numpy_type = dtype.as_numpy_dtype
    current = name
    for k, (hold, columns) in enumerate(holds):
        scope = f"{_PREFIX}/{number}_{k}"
        if hold.scale:
            factor = np.ones(size, numpy_type)
            factor[columns] = hold.value
            _const(graph_def, f"{scope}/factor", factor)
            node = graph_def.node.add(name=f"{scope}/held", op="Mul")
            node.input.extend([current, f"{scope}/factor"])
        else:
            mask = np.zeros(size, np.bool_)
            mask[columns] = True
            _const(graph_def, f"{scope}/mask", mask)
            _const(graph_def, f"{scope}/value", np.full(size, hold.value, numpy_type))
            node = graph_def.node.add(name=f"{scope}/held", op="SelectV2")
            node.input.extend([f"{scope}/mask", f"{scope}/value", current])
        node.attr["T"].type = dtype.as_datatype_enum
        current = f"{scope}/held"
    return current + ":0"


def _spelled(name: str) -> set[str]:
    """The ways a GraphDef input names tensor `name` (`op:0` is also written `op`)."""
    op, _, index = name.rpartition(":")
    return {name, op} if index == "0" else {name}


def holding(
    model: Model | Any, cells: Sequence[AnyCell], holds: Sequence[Hold], restore: bool = True
) -> Held:
    """`model` rebuilt (`tracer.load.rebuild.rebuilt`, restored if `restore`) with `holds`
    in its graph; `cells` are the cells found in it (every one, not only those recorded).
    The new Model is the caller's to close; with no holds, `model` comes back as it is."""
    if not holds:
        return Held(model, (), {})
    if not isinstance(model, Model):
        kind = (
            "a Keras model"
            if model.__class__.__name__ == "KerasModel"
            else "a TensorFlow Lite file"
        )
        raise SelectionError(
            f"--hold: {model.source} is {kind}, whose cells run inside ops and loops that gatetrace does not "
            "rewrite; values are held in TensorFlow graphs (checkpoints, SavedModels, frozen graphs) with "
            "cells unrolled in the graph"
        )
    resolved = tuple(resolve(h, cells) for h in holds)
    if model.load_plan is None and model.format != "frozen":
        raise SelectionError(
            f"--hold: {model.source} is a live session's graph, which cannot be rebuilt with values held; "
            "save it (a checkpoint) and record the saved model"
        )
    by_name = {c.name: c for c in cells}
    per_tensor: dict[str, tuple[int, list]] = {}
    for hold in resolved:
        cell = by_name[hold.cell]
        assert isinstance(cell, Cell)
        for name, size, columns in _targets(model.graph, hold, cell):
            per_tensor.setdefault(name, (size, []))[1].append((hold, columns))
    with model.graph.as_default():
        meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
    graph_def = meta.graph_def
    readers = list(graph_def.node)
    names: dict[str, str] = {}
    for number, (name, (size, held)) in enumerate(per_tensor.items()):
        names[name] = _hold_tensor(graph_def, model.graph, name, size, held, number)
    inputs = {spelling: new for name, new in names.items() for spelling in _spelled(name)}
    for node in readers:
        for i, read in enumerate(node.input):
            if read in inputs:
                node.input[i] = inputs[read]
    return Held(rebuilt(model, meta, restore), resolved, names)

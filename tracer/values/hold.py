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
pattern) and inside a while loop whose body gatetrace takes them from (its body rewritten).
A Keras model's holds are only resolved here: its held layers return their cells' replay
with the holds in it (`tracer.values.keras`), a ConvLSTM's unit being a channel. Refused in
one line: cells replayed from a loop, a fused op's, a Keras layer over a cell of your own
(or a stack holding one) or a stateful one, TensorFlow Lite ops, and a live session's graph
(it cannot be rebuilt).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from tracer._tf import control_flow_util_v2, tf, v1
from tracer.cells.found import AnyCell, Cell, KerasCell, Step
from tracer.cells.holds import Hold
from tracer.load.keras import KerasModel
from tracer.load.loaded import Model
from tracer.load.rebuild import rebuilt
from tracer.values.emit import loop_functions

__all__ = ["Held", "holding", "resolve"]

_PREFIX = "gatetrace_hold"


@dataclass(frozen=True)
class Held:
    """The model with its holds in place, the holds as resolved (full cell names), and the
    new name of each held tensor: `names[None]` for tensors of the graph, `names[loop]` for
    tensors of a loop's body (`renamed` gives a cell its held tensors)."""

    model: Model | KerasModel
    holds: tuple[Hold, ...]
    names: dict[str | None, dict[str, str]]

    def renamed(self, cell: AnyCell) -> AnyCell:
        if not self.names or not isinstance(cell, Cell):
            return cell
        cell = replace(cell, steps=tuple(_step(s, self.names.get(None, {})) for s in cell.steps))
        loop = cell.loop
        if loop is not None and loop.body is not None:
            # a TF1 frame's tensors are the graph's; a While op's are its body's
            inside = self.names.get(None if loop.control_flow == "v1" else loop.loop, {})
            cell = replace(cell, loop=replace(loop, body=_step(loop.body, inside)))
        return cell


def _step(s: Step, n: dict[str, str]) -> Step:
    return replace(
        s,
        preactivation=tuple(n.get(t, t) for t in s.preactivation),
        activation=tuple(n.get(t, t) for t in s.activation),
        states=tuple(n.get(t, t) for t in s.states),
        input=n.get(s.input, s.input),
        previous=tuple(n.get(t, t) for t in s.previous),
    )


def _cell_named(name: str, cells: Sequence[AnyCell]) -> AnyCell:
    exact = [c for c in cells if c.name == name]
    ends = [c for c in cells if c.name.endswith("/" + name)]
    found = exact or ends
    if len(found) == 1:
        return found[0]
    listed = ", ".join(c.name for c in (ends if len(ends) > 1 else cells))
    said = "several cells' names end" if len(ends) > 1 else "no cell is named so or ends"
    raise SelectionError(f"--hold: {said} with /{name}; name one of: {listed}")


def _keras_refusal(cell: KerasCell, cells: Sequence[AnyCell]) -> str | None:
    """Why a Keras layer's `hold` cannot be held (None if it can): its cells are replayed with
    the hold in them and the layer returns that (`tracer.values.keras`), for built-in cells
    (a stack's every one: the layer returns its last cell's outputs)."""
    if cell.step is not None:
        return f"{cell.name} runs a cell of your own, which gatetrace traces but does not replay with a hold"
    if cell.stack[1] > 1:
        stack = [c for c in cells if isinstance(c, KerasCell) and c.layer is cell.layer]
        if any(c.conv is not None or c.step is not None for c in stack):
            return (
                f"{cell.name} is a cell of a stack (StackedRNNCells) that runs a ConvLSTM cell or a "
                "cell of your own, which gatetrace does not replay with a hold"
            )
    if getattr(cell.layer, "stateful", False):
        return (
            f"{cell.name} is stateful, and a hold would change the state it carries between batches"
        )
    return None


def _refusal(cell: AnyCell, hold: Hold, cells: Sequence[AnyCell]) -> str | None:
    if isinstance(cell, KerasCell):
        return _keras_refusal(cell, cells)
    if not isinstance(cell, Cell):
        return f"{cell.name} is a TensorFlow Lite op, whose steps run inside one op that gatetrace does not rewrite"
    if cell.fused is not None:
        return f"{cell.name} is computed by one fused op ({cell.fused.op_type}), which keeps its gates inside"
    loop = cell.loop
    if loop is None:
        if hold.steps != (None, None) and cell.reverse_lengths is not None:
            return (
                f"{cell.name} reads its input reversed within each sequence's length "
                f"({cell.reverse_lengths}), so a step is not one input position for every example: hold it "
                "at every step (leave @STEPS out)"
            )
        return None
    if loop.body is None or loop.masked or not loop.carried:
        return (
            f"{cell.name} is replayed from its weights, not taken from its loop (gatetrace inspect says "
            "why), and a replay would not hold it"
        )
    if hold.steps != (None, None) and loop.control_flow != "v2":
        return (
            f"{cell.name} runs in a TF1 while loop (control flow v1), whose steps gatetrace does not tell "
            "apart inside the loop: hold it at every step (leave @STEPS out)"
        )
    if hold.steps != (None, None) and loop.reversed:
        return (
            f"{cell.name} reads its input reversed inside its loop, so a loop step is not one input position "
            "for every example: hold it at every step (leave @STEPS out)"
        )
    return None


def _check_names(hold: Hold, cell: Cell | KerasCell) -> None:
    """Refuse a hold of a state or gate `cell`'s kind does not compute (a gate's
    preactivation: of a gate)."""
    gates, states = cell.spec.gates, cell.spec.states
    if (
        hold.preactivation
        and hold.name not in gates
        or (not hold.preactivation and hold.name not in (*states, *gates))
    ):
        raise SelectionError(
            f"--hold '{hold.describe()}': {cell.name} ({cell.spec.kind}) has states {', '.join(states)} and gates "
            f"{', '.join(gates)} (a gate's preactivation: {gates[0]}.pre); found {hold.what!r}"
        )


def resolve(hold: Hold, cells: Sequence[AnyCell]) -> Hold:
    """`hold` with its cell's full name, checked against the cell: what it names, its units
    and its steps (`SelectionError`, one line, where they do not fit)."""
    spec = hold.describe()
    if hold.mean:
        raise SelectionError(
            f"--hold '{spec}': each unit's mean comes from another recording of the model: give it "
            "with --means-from RUN (in Python, tracer.holds_at_means(holds, Recording(RUN)))"
        )
    cell = _cell_named(hold.cell, cells)
    refused = _refusal(cell, hold, cells)
    if refused:
        raise SelectionError(f"--hold '{spec}': cannot hold it: {refused}")
    assert isinstance(cell, (Cell, KerasCell))  # (a TensorFlow Lite op's is refused)
    _check_names(hold, cell)
    if isinstance(cell, KerasCell):  # its steps are its length
        # a ConvLSTM's units are its channels, each held at every position
        width, what = (
            (cell.units, "units") if cell.conv is None else (cell.conv.filters, "channels")
        )
        if hold.units and max(hold.units) >= width:
            raise SelectionError(
                f"--hold '{spec}': {cell.name}'s {hold.what} has {width} {what} (0 to {width - 1}); "
                f"found unit {max(hold.units)}"
            )
        if cell.length and not any(hold.held_at(p) for p in range(cell.length)):
            raise SelectionError(
                f"--hold '{spec}': holds no step of {cell.name}, whose steps are 0 to {cell.length - 1}"
            )
        return replace(hold, cell=cell.name)
    assert isinstance(cell, Cell)
    if cell.loop is None:
        positions: list[int] | None = [s.position for s in cell.steps]
    elif cell.loop.length:
        positions = list(range(cell.loop.length))
    else:
        positions = None  # the loop's length is known once it runs
    if positions is not None and not any(hold.held_at(p) for p in positions):
        raise SelectionError(
            f"--hold '{spec}': holds no step of {cell.name}, whose steps are {min(positions)} to {max(positions)}"
        )
    return replace(hold, cell=cell.name)


def _columns(
    tensor_of: Callable[[str], tf.Tensor], names: Sequence[str], first: int, width: int, cell: str
):
    """Which tensor of `names` (side by side along their last axis) holds the columns
    [first, first + width), and where they start in it."""
    at = 0
    for name in names:
        size = tensor_of(name).shape[-1]
        if size is None:
            raise SelectionError(
                f"--hold: cannot hold {name} of {cell}: its last dimension is not known before the graph runs"
            )
        if at <= first and first + width <= at + size:
            return name, first - at, size
        at += size
    raise SelectionError(f"--hold: {cell}: no single tensor of {list(names)} holds its gate")


def _target(tensor_of: Callable[[str], tf.Tensor], hold: Hold, cell: Cell, step: Step):
    """(tensor, its width, the held columns) of `hold` at `step`."""
    if not hold.preactivation and hold.name in cell.spec.states:
        name = step.states[cell.spec.states.index(hold.name)]
        # where the graph leaves it open (a TF1 frame's Merge), the cell says it: c is units
        # wide, h its output size (num_proj, where it projects)
        width = tensor_of(name).shape[-1] or (cell.output_size if hold.name == "h" else cell.units)
        offset, size = 0, width
    else:
        gate = cell.spec.gates.index(hold.name)
        names = step.preactivation if hold.preactivation else step.activation
        name, offset, size = _columns(tensor_of, names, gate * cell.units, cell.units, cell.name)
        width = cell.units
    units = range(width) if hold.units is None else hold.units
    if units and max(units) >= width:
        raise SelectionError(
            f"--hold '{hold.describe()}': {cell.name}'s {hold.what} has {width} units (0 to {width - 1}); "
            f"found unit {max(units)}"
        )
    if not tensor_of(name).dtype.is_floating:
        raise SelectionError(
            f"--hold '{hold.describe()}': {name} holds {tensor_of(name).dtype.name} values, not floating point ones"
        )
    return name, size, [offset + u for u in units]


# -- in the graph (unrolled cells, and TF1 frames: control flow v1) ---------------------------


def _const(graph_def, name: str, array: np.ndarray, frame_of: str | None) -> None:
    node = graph_def.node.add(name=name, op="Const")
    node.attr["dtype"].type = tf.as_dtype(array.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array))
    if (
        frame_of is not None
    ):  # in the frame (and iteration) of the op it holds, as TF1 draws a constant in a loop
        node.input.append(f"^{frame_of}")


def _merged(held, size: int, numpy_type) -> list[tuple[bool, tuple, np.ndarray, np.ndarray]]:
    """`held` ([(Hold, columns)], applied in order) as few ops: each run of holds of one kind
    (set, or multiplied) and the same steps as one (scale, steps, mask, values), `values` per
    column: a set hold's value where it holds (a later one wins, as it would applied after), a
    factor where it scales (1 elsewhere; a scale of columns the run already scales starts another
    run: products taken one after the other round as they would). A `mean` hold (one hold a unit, `tracer.cells.holds.holds_at_means`) is one op, not one a unit."""
    runs: list[tuple[bool, tuple, np.ndarray, np.ndarray]] = []
    for hold, columns in held:
        if (
            not runs
            or runs[-1][:2] != (hold.scale, hold.steps)
            or (hold.scale and runs[-1][2][columns].any())
        ):
            start = np.ones(size, numpy_type) if hold.scale else np.zeros(size, numpy_type)
            runs.append((hold.scale, hold.steps, np.zeros(size, np.bool_), start))
        _, _, mask, values = runs[-1]
        mask[columns] = True
        if hold.scale:
            values[columns] = hold.value
        else:
            values[columns] = hold.value
    return runs


def _hold_tensor(
    graph_def, dtype: tf.DType, name: str, size: int, holds, scope: str, in_frame: bool
) -> str:
    """Add the ops holding `name` (each of `holds`: (Hold, columns), applied in order)."""
    numpy_type = dtype.as_numpy_dtype
    current = name
    frame_of = name.rpartition(":")[0] if in_frame else None
    for k, (scale, _, mask, values) in enumerate(_merged(holds, size, numpy_type)):
        at = f"{scope}_{k}"
        if scale:
            _const(graph_def, f"{at}/factor", values, frame_of)
            node = graph_def.node.add(name=f"{at}/held", op="Mul")
            node.input.extend([current, f"{at}/factor"])
        else:
            _const(graph_def, f"{at}/mask", mask, frame_of)
            _const(graph_def, f"{at}/value", values, frame_of)
            node = graph_def.node.add(name=f"{at}/held", op="SelectV2")
            node.input.extend([f"{at}/mask", f"{at}/value", current])
        node.attr["T"].type = dtype.as_datatype_enum
        current = f"{at}/held"
    return current + ":0"


def _spelled(name: str) -> set[str]:
    """The ways a GraphDef input names tensor `name` (`op:0` is also written `op`)."""
    op, _, index = name.rpartition(":")
    return {name, op} if index == "0" else {name}


def _in_graph(
    graph_def, graph: tf.Graph, per_tensor, frames: set[str], last: set[str]
) -> dict[str, str]:
    """Hold each tensor of `per_tensor` ({name: (width, [(Hold, columns)])}) in `graph_def`;
    the held tensors' names. Tensors inside a TF1 frame (`frames`: their names) get their
    constants in the frame. A held tensor no op reads is refused, but for a cell's last step's
    (`last`: the model's final state or output, which only a fetch reads)."""
    readers = list(graph_def.node)
    names = {
        name: _hold_tensor(
            graph_def,
            graph.get_tensor_by_name(name).dtype,
            name,
            size,
            held,
            f"{_PREFIX}/{number}",
            name in frames,
        )
        for number, (name, (size, held)) in enumerate(per_tensor.items())
    }
    inputs = {spelling: new for name, new in names.items() for spelling in _spelled(name)}
    read: set[str] = set()
    for node in readers:
        for i, name in enumerate(node.input):
            if name in inputs:
                node.input[i] = inputs[name]
                read.add(inputs[name])
    _refuse_unread([n for n, new in names.items() if new not in read and n not in last])
    return names


def _refuse_unread(names: Sequence[str]) -> None:
    """A held tensor no op reads would change the recording and nothing the model computes."""
    if names:
        raise SelectionError(
            f"--hold: no op of the model reads {names[0]}, so holding it would change the recording and "
            "nothing the model computes; hold a tensor the cell's next step reads (its gates, c or h)"
        )


# -- in a While op's body (control flow v2) -----------------------------------------------------


def _counter(body: tf.Graph, loop: str) -> tf.Tensor:
    """The loop's iteration counter in its body: `while_v2`'s first loop variable, which the
    body returns plus one."""
    counter = body.inputs[0] if body.inputs else None
    step = body.outputs[0].op if body.outputs else None
    if (
        counter is None
        or counter.dtype != tf.int32
        or step is None
        or step.type not in ("AddV2", "Add")
        or counter not in list(step.inputs)
    ):
        raise SelectionError(
            f"--hold: the loop {loop} carries no iteration counter gatetrace recognises; hold at every step "
            "(leave @STEPS out)"
        )
    return counter


def _in_body(body: tf.Graph, loop: str, per_tensor) -> dict[str, str]:
    """Hold each tensor of `per_tensor` in the FuncGraph `body` of `loop`: its readers (and the
    body's outputs, the next iteration's loop variables) read the held one. Steps are told by
    the loop's counter. The held tensors' names in the body."""
    names = {}
    for number, (name, (size, held)) in enumerate(per_tensor.items()):
        tensor = body.get_tensor_by_name(name)
        readers = [
            (op, i) for op in body.get_operations() for i, t in enumerate(op.inputs) if t is tensor
        ]
        current = tensor
        with body.as_default(), tf.name_scope(f"{_PREFIX}_{number}/"):
            for scale, steps, mask, values in _merged(held, size, current.dtype.as_numpy_dtype):
                where = tf.constant(mask)
                if steps != (None, None):
                    counter = _counter(body, loop)
                    start, stop = steps
                    now = tf.constant(True)
                    if start is not None:
                        now = tf.logical_and(now, counter >= start)
                    if stop is not None:
                        now = tf.logical_and(now, counter < stop)
                    where = tf.logical_and(where, now)
                if scale:
                    current = tf.where(where, current * tf.constant(values), current)
                else:
                    current = tf.where(where, tf.constant(values), current)
        carried = any(t is tensor for t in body.outputs)
        if not readers and not carried:
            _refuse_unread([name])
        for op, i in readers:
            op._update_input(i, current)  # the TF1 graph editor's way: one edge moved
        body.outputs = [current if t is tensor else t for t in body.outputs]
        names[name] = current.name
    return names


def _in_loops(graph_def, per_loop) -> dict[str, dict[str, str]]:
    """Hold the tensors of each While op's body in `per_loop` ({loop: per_tensor}): the loop's
    body replaced by a held copy (its cond as it is). The held tensors' names per loop."""
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes = {n.name: n for n in graph_def.node}
    scratch = tf.Graph()
    names: dict[str, dict[str, str]] = {}
    for loop, per_tensor in per_loop.items():
        node = nodes[loop]
        body, _ = loop_functions(library, node, scratch)
        names[loop] = _in_body(body, loop, per_tensor)
        digest = hashlib.sha256(
            library[node.attr["body"].func.name].SerializeToString(deterministic=True)
        )
        digest.update(
            repr(
                sorted(
                    (n, [(h.describe(), c) for h, c in held]) for n, (_, held) in per_tensor.items()
                )
            ).encode()
        )
        body.name = f"{node.attr['body'].func.name}_{_PREFIX}_{digest.hexdigest()[:16]}"
        with scratch.as_default():
            control_flow_util_v2.create_new_tf_function(body)
        node.attr["body"].func.name = body.name
    ours = {nodes[loop].attr["body"].func.name for loop in per_loop}
    taken = sorted(ours & set(library))
    if taken:  # a model's own function of that name cannot stand for the held body
        raise SelectionError(
            f"--hold: the model already has a function named {taken[0]}, where gatetrace would put a "
            "loop's held body"
        )
    for function in scratch.as_graph_def().library.function:
        if function.signature.name not in library:  # (the functions the body calls are there)
            graph_def.library.function.add().CopyFrom(function)
    return names


def _loop_tensor(model: Model, cell: Cell, library) -> Callable[[str], tf.Tensor]:
    """How to look a tensor of `cell`'s step up: in the graph, or in its While op's body."""
    loop = cell.loop
    if loop is None or loop.control_flow == "v1":
        return model.graph.get_tensor_by_name
    node = next(n for n in library["nodes"] if n.name == loop.loop)
    body, _ = loop_functions(library["functions"], node, tf.Graph())
    return body.get_tensor_by_name


def holding(
    model: Model | Any, cells: Sequence[AnyCell], holds: Sequence[Hold], restore: bool = True
) -> Held:
    """`model` rebuilt (`tracer.load.rebuild.rebuilt`, restored if `restore`) with `holds`
    in its graph; `cells` are the cells found in it (every one, not only those recorded).
    The new Model is the caller's to close; with no holds, `model` comes back as it is."""
    if not holds:
        return Held(model, (), {})
    if isinstance(model, KerasModel):  # its layers return their outputs held, as it runs
        return Held(model, tuple(resolve(h, cells) for h in holds), {})
    if not isinstance(model, Model):
        raise SelectionError(
            f"--hold: {model.source} is a TensorFlow Lite file, whose cells run inside ops that gatetrace "
            "does not rewrite; values are held in TensorFlow graphs and Keras models"
        )
    resolved = tuple(resolve(h, cells) for h in holds)
    if model.load_plan is None and model.format != "frozen":
        raise SelectionError(
            f"--hold: {model.source} is a live session's graph, which cannot be rebuilt with values held; "
            "save it (a checkpoint) and record the saved model"
        )
    with model.graph.as_default():
        meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
    graph_def = meta.graph_def
    taken = [n.name for n in graph_def.node if n.name.startswith(f"{_PREFIX}/")]
    if taken:
        raise SelectionError(
            f"--hold: {model.source} already has an op named {taken[0]}, where gatetrace would put a held value"
        )
    looked_up = {
        "nodes": list(graph_def.node),
        "functions": {f.signature.name: f for f in graph_def.library.function},
    }
    by_name = {c.name: c for c in cells}
    # where each held tensor lives: None (the graph, a TF1 frame included) or a While op's body
    places: dict[str | None, dict[str, tuple[int, list]]] = {}
    frames: set[str] = set()
    for hold in resolved:
        cell = by_name[hold.cell]
        assert isinstance(cell, Cell)
        tensor_of = _loop_tensor(model, cell, looked_up)
        if cell.loop is None:
            steps = [s for s in cell.steps if hold.held_at(s.position)]
            place = None
        else:
            assert cell.loop.body is not None
            steps = [cell.loop.body]
            place = None if cell.loop.control_flow == "v1" else cell.loop.loop
        for step in steps:
            name, size, columns = _target(tensor_of, hold, cell, step)
            places.setdefault(place, {}).setdefault(name, (size, []))[1].append((hold, columns))
            if cell.loop is not None and place is None:
                frames.add(name)
    names: dict[str | None, dict[str, str]] = {}
    last = {t for c in cells if isinstance(c, Cell) and c.steps for t in c.steps[-1].states}
    if None in places:
        names[None] = _in_graph(graph_def, model.graph, places.pop(None), frames, last)
    if places:
        names.update(_in_loops(graph_def, places))
    return Held(rebuilt(model, meta, restore), resolved, names)

"""Cells inside while loops (`dynamic_rnn`): where each one meets the outside of its loop.

A cell inside a loop body is found by the same patterns as an unrolled one
(`tracer.find.steps`), but its gate ops run once per iteration inside the loop and cannot be
fetched. What can be fetched is what enters and leaves the loop; this module follows
edges from the cell's ops to those tensors, for both kinds of TensorFlow loops:

- control flow v1 (TF1-era graphs, `disable_control_flow_v2()`): the loop's ops sit in
  the graph between `Enter` and `Exit`; a loop variable is `Enter -> Merge -> Switch ->
  Identity` inside, and `Switch -> Exit` after the last iteration;
- control flow v2: one `While`/`StatelessWhile` op whose body is a function; the body's
  k-th argument is the op's k-th input, and its k-th output the op's k-th output.

For each cell, a `Loop` names: the input sequence (the tensor `dynamic_rnn` scatters
into a TensorArray, time-major) or the cell below it in a stack; the initial and final
state; the sequence lengths (the tensor compared with the loop's time in its
`GreaterEqual`); and the stacked outputs. `tracer.values.replay` recomputes the gates from them.
"""

from __future__ import annotations

from collections.abc import Callable

from recorders.errors import GraphPatternError
from tracer._tf import function_def_to_graph, tf
from tracer.cells.found import Fused, Loop
from tracer.find.application import cell_of, step_of
from tracer.find.edges import cell_name, in_v1_frame, variables_of, weight_op, weight_source
from tracer.find.fused import fused_steps
from tracer.find.steps import find_steps

__all__ = ["in_v1_loop", "v1_loop_cells", "v2_loop_cells", "loop_body", "outer_value"]


def _through_identity(t: tf.Tensor) -> tf.Tensor:
    while t.op.type == "Identity":
        t = t.op.inputs[0]
    return t


def _consumer(t: tf.Tensor, types: set[str], index: int | None = None) -> tf.Operation | None:
    """The first op of `types` reading `t` (at input `index`), looking through Identity and Select."""
    seen, todo = set(), [t]
    while todo:
        t = todo.pop(0)
        if t.name in seen:
            continue
        seen.add(t.name)
        for op in t.consumers():
            if op.type in types and (index is None or op.inputs[index].name == t.name):
                return op
            if op.type in ("Identity", "Select", "SelectV2"):
                todo.append(op.outputs[0])
    return None


def _lengths_compare(h_new: tf.Tensor) -> tf.Tensor | None:
    """`dynamic_rnn(sequence_length=...)` keeps the state where `time >= length`
    (`Select(GreaterEqual(time, length), state, new_state)`): the length operand."""
    for op in h_new.consumers():
        if op.type in ("Select", "SelectV2") and op.inputs[0].op.type == "GreaterEqual":
            return op.inputs[0].op.inputs[1]
    return None


def _carries(out: tf.Tensor, new: tf.Tensor) -> bool:
    """Whether the body returns the cell's new state `new` as the loop variable `out`, as it
    is (through Identity, or a Select keeping it or the old one); not if a wrapper changes it."""
    todo, seen = [out], set()
    while todo:
        t = todo.pop()
        if t.name == new.name:
            return True
        if t.name in seen:
            continue
        seen.add(t.name)
        if t.op.type == "Identity":
            todo.append(t.op.inputs[0])
        elif t.op.type in ("Select", "SelectV2"):
            todo += [t.op.inputs[1], t.op.inputs[2]]
    return False


def _selected(h_new: tf.Tensor) -> bool:
    """Whether the loop keeps its state or the new one by a `Select` (Keras' mask inside `K.rnn`)."""
    return any(op.type in ("Select", "SelectV2") for op in h_new.consumers())


def _loop_cell(graph: tf.Graph, app, weights: dict[str, str], loop: Loop):
    """A `tracer.cells.found.Cell` for `app`, whose weights are read from the outer tensors `weights`.
    A fused op's cell (`LSTMBlockCell`, `GRUBlockCell`) also gets its `Fused`, of the body's
    tensors, which the rewritten loop stacks (`tracer.values.emit`)."""
    kernel = graph.get_tensor_by_name(weights["kernel"])
    variables = variables_of(graph, weights, f"{loop.loop}: the cell at {app.gate_op.name}")
    projection = (
        graph.get_tensor_by_name(weights["projection"]) if "projection" in weights else None
    )
    name = cell_name(weight_op(kernel), app.spec)
    fused = None
    if app.gate_op.type in ("LSTMBlockCell", "GRUBlockCell"):
        peephole = "w_i_diag" in weights
        fused = Fused(
            app.gate_op.type,
            (app.gate_op.name,),
            x=(app.input.name,),
            h_prev=(app.previous[-1].name,),
            c_prev=(app.previous[0].name,) if peephole else (),
            use_peephole=peephole,
            length=loop.length,
            stacked=True,
        )
    return cell_of(
        app,
        name,
        kernel,
        projection,
        weights=weights,
        variables=variables,
        steps=(),
        loop=loop,
        backward=loop.reversed,
        fused=fused,
    )


def _value(t: tf.Tensor) -> tf.Tensor:
    """A fetchable value for an outer tensor: for a resource handle, the variable's read."""
    if t.dtype != tf.resource:
        return t
    for op in t.consumers():
        if op.type == "ReadVariableOp":
            return op.outputs[0]
    # Only the loop body reads it (TF 2.2-2.4 exports, whose layers read their weights inside
    # the step): add the read outside, as the body does it.
    handle = t
    while handle.op.type == "Identity":
        handle = handle.op.inputs[0]
    if handle.op.type != "VarHandleOp":
        raise GraphPatternError(
            f"{t.name}: a resource entering a while loop as the cell's weight, made by {handle.op.type} "
            f"({handle.op.name}) where a VarHandleOp was expected, and no read of it outside the loop to fetch"
        )
    with t.graph.as_default(), t.graph.name_scope(None):
        return tf.raw_ops.ReadVariableOp(
            resource=t, dtype=handle.op.get_attr("dtype"), name=f"{handle.op.name}/gatetrace_read"
        )


def _whole(t: tf.Tensor) -> tf.Tensor:
    """The weight a loop argument is a row of: tf-keras' standard_gru unstacks its [2, 3u]
    bias (input and recurrent rows) before the loop, and the cell reads it whole."""
    return t.op.inputs[0] if t.op.type == "Unpack" else t


def _length(graph: tf.Graph, inputs: str | None, below) -> int | None:
    """The static number of steps of the loop's input (time-major), or the layer below's."""
    if below is not None:
        return below.loop.length
    shape = graph.get_tensor_by_name(inputs).shape
    return shape[0] if shape.rank else None


def _reversal(graph: tf.Graph, inputs: str | None, below) -> dict:
    """Loop fields saying whether the input sequence was reversed before the loop, and by what lengths."""
    if below is not None:
        return {"reversed": below.loop.reversed, "reverse_lengths": below.loop.reverse_lengths}
    t = graph.get_tensor_by_name(inputs)
    if t.op.type == "Transpose":  # batch-major input made time-major
        t = t.op.inputs[0]
    if t.op.type == "ReverseSequence":
        return {"reversed": True, "reverse_lengths": t.op.inputs[1].name}
    if t.op.type == "ReverseV2":
        return {"reversed": True, "reverse_lengths": None}
    return {}


def _stack(apps, one: Callable) -> list:
    """Apply `one(app, below)` to each app, lower layers first: `below` is the Cell built for
    the app whose output this one reads (a stacked layer), or None."""
    out_of = {app.states[-1].name: app for app in apps}
    built: dict[int, object] = {}

    def build(app):
        if id(app) not in built:
            lower = _below(app.input, out_of)
            built[id(app)] = one(app, None if lower is None else build(lower))
        return built[id(app)]

    return [build(app) for app in apps]


# What a wrapper between two stacked layers does to the output on its way up: DropoutWrapper's
# `tf.nn.dropout` (`where(keep, x * scale, 0)`, or `x * scale * mask` in older TensorFlow),
# ResidualWrapper's add of the layer's own input (GNMT's stacking).
_ELEMENTWISE = {
    "Identity": (0,),
    "Mul": (0, 1),
    "RealDiv": (0,),
    "Select": (1, 2),
    "SelectV2": (1, 2),
    "AddV2": (0, 1),
    "Add": (0, 1),
}


def _direct(app, below) -> bool:
    """Whether a stacked step reads the output of the layer below as it is (through Identity only)."""
    return below is None or _through_identity(app.input).name == below.loop.body.states[-1]


def _below(x: tf.Tensor, out_of: dict, depth: int = 4):
    """The step whose new state `x` is, directly or through a dropout between the layers."""
    if x.name in out_of:
        return out_of[x.name]
    if depth == 0 or x.op.type not in _ELEMENTWISE:
        return None
    for k in _ELEMENTWISE[x.op.type]:
        found = _below(x.op.inputs[k], out_of, depth - 1)
        if found is not None:
            return found
    return None


# -- control flow v1 ------------------------------------------------------------------------


def _v1_merge(t: tf.Tensor) -> tf.Operation | None:
    """The Merge of the loop variable read as `t` (`Identity(Switch(Merge(Enter, NextIteration)))`)."""
    if t.op.type == "Identity" and t.op.inputs[0].op.type == "Switch":
        merge = t.op.inputs[0].op.inputs[0].op
        if merge.type == "Merge":
            return merge
    return None


def _v1_variable(t: tf.Tensor) -> tf.Operation:
    """The Merge of the loop variable `t` is known to be (a state a cell inside the loop reads)."""
    merge = _v1_merge(t)
    if merge is None:
        raise GraphPatternError(
            f"{t.name}: expected a variable of the while loop (Identity of Switch of Merge), found a {t.op.type} op"
        )
    return merge


def in_v1_loop(app) -> bool:
    """Whether a cell application found in a graph runs inside a control-flow-v1 while loop."""
    return _v1_merge(app.previous[-1]) is not None


def _v1_outside(t: tf.Tensor) -> tf.Tensor:
    """The outer tensor that enters the loop as `t` (a loop variable or an `Enter`); `t`
    itself when it is computed outside the loop (Keras 2 slices its kernels before it)."""
    merge = _v1_merge(t)
    if merge is not None:
        t = merge.inputs[0]
    start = t
    # a resource variable is read inside the loop
    while t.op.type in ("Identity", "ReadVariableOp"):
        t = t.op.inputs[0]
    if t.op.type == "Enter":
        return t.op.inputs[0]
    if not in_v1_frame(start):
        return start
    raise GraphPatternError(
        f"{t.name}: expected a value entering the while loop (Enter), found a {t.op.type} op"
    )


def _v1_after(t: tf.Tensor) -> str | None:
    """The loop variable read as `t`, after the loop (its Exit); None where a graph pruned
    for deployment dropped it (nothing outside the loop used it)."""
    merge = _v1_variable(t)
    for switch in merge.outputs[0].consumers():
        if switch.type == "Switch":
            for op in switch.outputs[0].consumers():
                if op.type == "Exit":
                    return op.outputs[0].name
    return None


def _v1_array_source(handle: tf.Tensor, types: set[str], index: int) -> str | None:
    """For a TensorArray handle inside the loop: input `index` (or output) of the outer op of `types` on it."""
    array = _v1_outside(handle).op
    for op in array.outputs[0].consumers():
        if op.type in types:
            return (op.inputs[index] if index >= 0 else op.outputs[0]).name
    return None


def not_read(app, where: str, kind: str, stop: set[str]) -> GraphPatternError:
    """The one line for a cell inside a loop whose input is not its sequence's element: that
    it passes through a random draw (dropout made anew on every run), where it does."""
    drawn = _random_before(app.input, stop)
    if drawn is None:
        return GraphPatternError(
            f"{where}: expected the cell's input to be read from a {kind}, found a {app.input.op.type} op"
        )
    return GraphPatternError(
        f"{where}: the cell's input passes through {drawn.name} ({drawn.type}), a random draw made anew on "
        "every run (dropout: DropoutWrapper's input_keep_prob, or tf.nn.dropout), so its gates change from run "
        "to run and are not recorded; record the model with its dropout off: build its graph again with the "
        "keep probabilities at 1.0 (or without the dropout), restore this checkpoint into it and record that "
        "session (tracer.from_session)"
    )


def _random_before(t: tf.Tensor, stop: set[str], most: int = 2000) -> tf.Operation | None:
    """A random op among what `t` is computed from within the loop: an op with TensorFlow's
    `seed` and `seed2` attributes (every random draw has both); None if there is none."""
    seen: set[str] = set()
    todo = [t.op]
    while todo and len(seen) < most:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if {"seed", "seed2"} <= set(op.node_def.attr):
            return op
        if op.type not in stop:
            todo.extend(i.op for i in op.inputs)
    return None


def v1_loop_cells(graph: tf.Graph, apps) -> list:
    """Cells for the apps found inside control-flow-v1 loops of `graph`."""

    def one(app, below):
        frame = _v1_variable(app.previous[-1]).inputs[0].op.get_attr("frame_name").decode()
        inputs = None
        if below is None:
            if app.input.op.type != "TensorArrayReadV3":
                raise not_read(app, app.gate_op.name, "TensorArray", {"Enter", "TensorArrayReadV3"})
            inputs = _v1_array_source(app.input.op.inputs[0], {"TensorArrayScatterV3"}, 2)
        lengths = _lengths_compare(app.states[-1])
        write = _consumer(app.states[-1], {"TensorArrayWriteV3"}, index=2)
        loop = Loop(
            control_flow="v1",
            loop=frame,
            inputs=inputs,
            below=None if below is None else below.name,
            initial=tuple(_v1_outside(t).name for t in app.previous),
            final=tuple(_v1_after(t) for t in app.previous),
            lengths=None if lengths is None else _v1_outside(lengths).name,
            outputs=None
            if write is None
            else _v1_array_source(write.inputs[0], {"TensorArrayGatherV3"}, -1),
            length=_length(graph, inputs, below),
            masked=lengths is None and _selected(app.states[-1]),
            carried=all(
                _carries(_v1_variable(p).inputs[1].op.inputs[0], new)
                for p, new in zip(app.previous, app.states, strict=True)
            ),
            direct=_direct(app, below),
            body=step_of(app, 0),
            **_reversal(graph, inputs, below),
        )
        weights = {role: _value(_v1_outside(t)).name for role, t in app.weights.items()}
        return _loop_cell(graph, app, weights, loop)

    return _stack(apps, one)


# -- control flow v2 ------------------------------------------------------------------------


def loop_body(op: tf.Operation, library: dict) -> tf.Graph:
    """The body function of the While op `op` as a graph (`library`: the graph's functions by
    name), its loop-invariant arguments marked for `weight_source`: those the body returns
    unchanged (weights, lengths), named after the variables they carry, which tell a kernel
    from a recurrent one."""
    body = function_def_to_graph(library[op.get_attr("body").name])
    body.loop_op = op
    body.loop_invariants = {
        i.name
        for i, o in zip(body.inputs, body.outputs, strict=True)
        if _through_identity(o).name == i.name
    }
    outer = {
        i.name: weight_source(t)
        for i, t in zip(body.inputs, op.inputs, strict=True)
        if i.name in body.loop_invariants
    }
    body.outer_names = {name: source.name for name, source in outer.items() if source is not None}
    return body


def outer_value(t: tf.Tensor) -> tf.Tensor:
    """A weight inside a loop's body as a tensor a session can fetch: for a v2 body's
    loop-invariant argument, the While op's input it carries; for a value entering a v1 loop,
    the variable or constant it is read from; a resource handle's read either way."""
    source = weight_source(t)
    if source is None:
        raise GraphPatternError(f"{t.name}: not read from a variable or constant")
    if source.type == "Placeholder":  # a v2 body's argument
        loop = getattr(source.graph, "loop_op", None)
        if loop is None:
            raise GraphPatternError(f"{t.name}: an argument of a loop body gatetrace did not mark")
        index = [i.name for i in source.graph.inputs].index(source.outputs[0].name)
        return _value(loop.inputs[index])
    return _value(source.outputs[0])


def v2_loop_cells(graph: tf.Graph) -> list:
    """Cells inside the body functions of the `While`/`StatelessWhile` ops of `graph`."""
    loops = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    if not loops:
        return []
    library = {f.signature.name: f for f in graph.as_graph_def().library.function}
    cells = []
    for op in loops:
        body = loop_body(op, library)
        apps = find_steps(body) + fused_steps(body)
        if not apps:
            continue
        index = {t.name: k for k, t in enumerate(body.inputs)}

        def arg(t: tf.Tensor, op=op, index=index) -> int:
            start = t
            while t.op.type in ("Identity", "ReadVariableOp") and t.name not in index:
                t = t.op.inputs[0]
            if t.name not in index:
                raise GraphPatternError(
                    f"{op.name}: expected {start.name} of its body to be a loop argument, found a {t.op.type} op"
                )
            return index[t.name]

        def one(app, below, op=op, arg=arg, body=body):
            inputs = None
            if below is None:
                if app.input.op.type != "TensorListGetItem":
                    raise not_read(app, op.name, "TensorList", {"TensorListGetItem", "Placeholder"})
                source = op.inputs[arg(app.input.op.inputs[0])]
                if source.op.type != "TensorListFromTensor":
                    raise GraphPatternError(
                        f"{op.name}: expected its input sequence to come from TensorListFromTensor, found {source.op.type}"
                    )
                inputs = source.op.inputs[0].name
            lengths = _lengths_compare(app.states[-1])
            write = _consumer(app.states[-1], {"TensorListSetItem"}, index=2)
            stacked = (
                None
                if write is None
                else _consumer(op.outputs[arg(write.inputs[0])], {"TensorListStack"}, index=0)
            )
            loop = Loop(
                control_flow="v2",
                loop=op.name,
                inputs=inputs,
                below=None if below is None else below.name,
                initial=tuple(op.inputs[arg(t)].name for t in app.previous),
                final=tuple(op.outputs[arg(t)].name for t in app.previous),
                lengths=None if lengths is None else op.inputs[arg(lengths)].name,
                outputs=None if stacked is None else stacked.outputs[0].name,
                length=_length(graph, inputs, below),
                masked=lengths is None and _selected(app.states[-1]),
                carried=all(
                    _carries(body.outputs[arg(p)], new)
                    for p, new in zip(app.previous, app.states, strict=True)
                ),
                direct=_direct(app, below),
                body=step_of(app, 0),
                **_reversal(graph, inputs, below),
            )
            weights = {
                role: _value(_whole(op.inputs[arg(t)])).name for role, t in app.weights.items()
            }
            return _loop_cell(graph, app, weights, loop)

        cells += _stack(apps, one)
    return cells

"""Loops rewritten to emit their own tensors: every step's value of chosen tensors inside a
while loop, as TensorFlow computed them, out of a `While`/`StatelessWhile` op or a TF1 frame.

A cell inside a while loop computes its gates in the loop's body, where nothing can be
fetched. `while_v2` keeps the intermediates its gradient needs by giving the loop one more
loop variable per tensor, a `TensorList` that the body appends the tensor to; `emit_loops`
does the same to a loaded graph, at the GraphDef level (control flow v2):

    body:  new arguments acc_k (variant), new outputs TensorListPushBack(acc_k, tensor_k)
    cond:  the same new arguments, unused
    While: the same node (same name, so every reader of its outputs is unchanged), with
           inputs + EmptyTensorList per tensor, types + variant, the new body and cond
    after: TensorListStack(While:n+k): the tensor's value at every iteration, stacked [T, ...]

In a TF1 frame (control flow v1: Enter, Merge, Switch, NextIteration, Exit) it draws what
`dynamic_rnn` draws for its output array: a `TensorArray` per tensor, written at each
iteration's index (a counter of its own), its flow a loop variable leaving by an `Exit`, then
gathered (`_frame_accumulators`).

Only TensorList ops, or TensorArray ops and the frame's own control flow ops (with the Consts
they read), are added; the loop computes exactly what it computed before, so the model's
outputs are the same bit for bit, and so are the emitted values (the very tensors of the body).

`emitting` does this for the loops of found cells (`Loop.body`, the cell's step inside the
loop) and rebuilds the model from the rewritten graph: the cells' `Loop.emitted` name the
stacked tensors, fetched like any other (`tracer.values.fetch`). A cell whose loop keeps its
state by a mask, or carries another state than the cell computes, is left to the replay
(`tracer.values.replay`), as is every cell of a live session's graph, which cannot be rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

from recorders.errors import GraphPatternError
from tracer._tf import control_flow_util_v2, function_def_to_graph, list_ops, tf, v1
from tracer.cells.found import Cell
from tracer.load.loaded import Model
from tracer.load.rebuild import rebuilt

__all__ = ["emit_loops", "emitting", "loop_functions", "LOOP_TYPES"]

LOOP_TYPES = ("While", "StatelessWhile")
_PREFIX = "gatetrace_emit"


def loop_functions(library: dict, node, outer: tf.Graph):
    """The body and cond of the loop `node` as FuncGraphs whose outer graph is `outer`."""
    graphs = []
    for attr in ("body", "cond"):
        name = node.attr[attr].func.name
        if name not in library:
            raise GraphPatternError(
                f"{node.name}: its {attr} function {name} is not in the graph's library"
            )
        with outer.as_default():
            graph = function_def_to_graph(library[name])
        graph.outer_graph = outer
        graphs.append(graph)
    return graphs


def _suffix(library: dict, node, names: Sequence[str]) -> str:
    """What the rewritten body and cond of loop `node` emitting `names` are named after: their
    names, then `gatetrace_emit` and a digest of the two functions and the tensors. TensorFlow
    keeps every function it makes in one registry a process, by name: a rewrite emitting other
    tensors, or another model's loop of the same name, must not share a name with one made
    before (it is refused as a duplicate of a different definition)."""
    digest = hashlib.sha256()
    for attr in ("body", "cond"):
        digest.update(library[node.attr[attr].func.name].SerializeToString(deterministic=True))
    digest.update("\0".join(names).encode())
    return f"{_PREFIX}_{digest.hexdigest()[:16]}"


def _extended(
    node, body: tf.Graph, cond: tf.Graph, tensors: list[tf.Tensor], scratch: tf.Graph, suffix: str
) -> list[str]:
    """Give `body` and `cond` one more argument per tensor (the body appending the tensor to it),
    add both to `scratch`'s library under their names and `suffix`, and draw there the
    EmptyTensorList inputs (named `<loop>/gatetrace_emit/acc_k`) and the TensorListStack outputs
    (reading placeholders `<loop>/gatetrace_emit/out_k`). Returns the stacks' names."""
    scope = f"{node.name}/{_PREFIX}"
    with body.as_default():
        for t in tensors:
            acc = v1.placeholder(tf.variant, [])
            body.inputs.append(acc)
            body.outputs.append(list_ops.tensor_list_push_back(acc, t))
    with cond.as_default():
        for _ in tensors:
            cond.inputs.append(v1.placeholder(tf.variant, []))
    body.name = f"{node.attr['body'].func.name}_{suffix}"
    cond.name = f"{node.attr['cond'].func.name}_{suffix}"
    stacks = []
    with scratch.as_default():
        control_flow_util_v2.create_new_tf_function(body)
        control_flow_util_v2.create_new_tf_function(cond)
    with scratch.as_default(), scratch.name_scope(f"{scope}/"):  # every op drawn under the scope
        for k, t in enumerate(tensors):
            list_ops.empty_tensor_list(
                element_shape=t.shape, element_dtype=t.dtype, max_num_elements=-1, name=f"acc_{k}"
            )
            out = v1.placeholder(tf.variant, [], name=f"out_{k}")
            stacks.append(
                list_ops.tensor_list_stack(
                    out, element_dtype=t.dtype, element_shape=t.shape, name=f"stack_{k}"
                ).name
            )
    return stacks


def emit_loops(
    graph_def: v1.GraphDef, wanted: Mapping[str, Sequence[str]], graph: tf.Graph | None = None
) -> tuple[v1.GraphDef, dict[tuple[str, str], str]]:
    """`graph_def` with each loop named in `wanted` emitting the tensors named there: a `While`
    op's name with tensors of its body function (as `function_def_to_graph` names them), or a
    control-flow-v1 frame's name with tensors of the graph inside it (`graph`, the graph
    imported from `graph_def`, tells their types). Returns the new GraphDef and, for each
    (loop, tensor), the name of the tensor holding its value at every iteration, stacked on axis 0."""
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes = {n.name: n for n in graph_def.node}
    scratch = tf.Graph()
    emitted: dict[tuple[str, str], str] = {}
    counts: dict[str, tuple[int, str]] = {}  # loop -> (tensors emitted, its functions' suffix)
    fed: dict[str, str] = {}  # scratch placeholder -> the graph's tensor it stands for
    for loop, names in wanted.items():
        node = nodes.get(loop)
        if node is not None and node.op in LOOP_TYPES:
            body, cond = loop_functions(library, node, scratch)
            tensors = [body.get_tensor_by_name(name) for name in names]
            suffix = _suffix(library, node, names)
            stacks = _extended(node, body, cond, tensors, scratch, suffix)
            data = len([i for i in node.input if not i.startswith("^")])
            fed.update(
                {f"{loop}/{_PREFIX}/out_{k}": f"{loop}:{data + k}" for k in range(len(tensors))}
            )
            counts[loop] = (len(tensors), suffix)
        elif graph is not None:
            stacks = _frame_accumulators(
                loop, [graph.get_tensor_by_name(n) for n in names], nodes, scratch, fed
            )
        else:
            raise GraphPatternError(
                f"{loop}: expected a While or StatelessWhile op, or a while loop's frame, found neither"
            )
        emitted.update({(loop, name): stack for name, stack in zip(names, stacks, strict=True)})
    drawn = scratch.as_graph_def()

    out = v1.GraphDef()
    out.CopyFrom(graph_def)
    have = set(library)
    for function in drawn.library.function:
        if function.signature.name not in have:
            out.library.function.add().CopyFrom(function)
    taken = set(nodes)
    for node in drawn.node:
        if node.name in fed:  # a placeholder standing for a tensor of the graph
            continue
        if node.name in taken:
            raise GraphPatternError(
                f"{node.name}: the graph already has an op of this name; it cannot emit its loops"
            )
        added = out.node.add()
        added.CopyFrom(node)
        inputs = [_fed(i, fed) for i in node.input]
        del added.input[:]
        added.input.extend(inputs)
    for node in out.node:
        if node.name in counts:
            _extend_loop(node, *counts[node.name])
    return out, emitted


def _fed(name: str, fed: dict[str, str]) -> str:
    """A drawn op's input, a placeholder replaced by the tensor it stands for."""
    control, op = name.startswith("^"), name.lstrip("^").partition(":")[0]
    if op not in fed:
        return name
    return f"^{fed[op].partition(':')[0]}" if control else fed[op]


def _frame_accumulators(
    frame: str, tensors: list[tf.Tensor], nodes: dict, scratch: tf.Graph, fed: dict[str, str]
) -> list[str]:
    """Draw in `scratch` what `dynamic_rnn` draws for its output TensorArray, once per tensor of
    the control-flow-v1 loop `frame`: a TensorArray outside, its handle and flow entering
    the frame, the flow a loop variable (Merge, Switch on the loop's condition, NextIteration)
    that each iteration writes the tensor to at the iteration's index (a counter of its own),
    the flow leaving by an Exit and the array gathered after the loop. Placeholders stand
    for the loop's condition, the tensors and the back edges (`fed`). Returns the gathered
    tensors' names."""
    enters = {
        n.name
        for n in nodes.values()
        if n.op in ("Enter", "RefEnter") and n.attr["frame_name"].s.decode() == frame
    }
    merges = {
        n.name for n in nodes.values() if n.op == "Merge" and n.input[0].partition(":")[0] in enters
    }
    switches = [
        n for n in nodes.values() if n.op == "Switch" and n.input[0].partition(":")[0] in merges
    ]
    if not switches:
        raise GraphPatternError(
            f"{frame}: expected a TF1 while loop (Enter, Merge, Switch) of this frame, found none"
        )
    condition = switches[0].input[1]
    parallel = nodes[sorted(enters)[0]].attr["parallel_iterations"].i
    scope = f"{frame.rpartition('/')[0] or frame}/{_PREFIX}"
    stacks = []
    with scratch.as_default(), scratch.name_scope(f"{scope}/"):  # every op drawn under the scope
        go = v1.placeholder(tf.bool, [], name="cond")
        fed[go.op.name] = condition

        def variable(initial: tf.Tensor, name: str) -> tuple[tf.Tensor, tf.Tensor, str]:
            """A loop variable entering the frame: (inside, after the loop, its back edge's placeholder)."""
            back = v1.placeholder(initial.dtype, [], name=f"{name}_back")
            entered = tf.raw_ops.Enter(
                data=initial, frame_name=frame, is_constant=False, parallel_iterations=parallel
            )
            merged = tf.raw_ops.Merge(inputs=[entered, back]).output
            leave, stay = tf.raw_ops.Switch(data=merged, pred=go)
            return tf.identity(stay), tf.raw_ops.Exit(data=leave), back.op.name

        index, _, count_back = variable(tf.constant(0, tf.int32), "index")
        # a constant inside the frame, as while_loop places its own
        with tf.control_dependencies([index]):
            one = tf.constant(1, tf.int32)
        fed[count_back] = tf.raw_ops.NextIteration(data=index + one).name
        for k, t in enumerate(tensors):
            value = v1.placeholder(t.dtype, name=f"value_{k}")
            fed[value.op.name] = t.name
            array = tf.raw_ops.TensorArrayV3(
                size=0, dtype=t.dtype, dynamic_size=True, name=f"acc_{k}"
            )
            handle = tf.raw_ops.Enter(
                data=array.handle, frame_name=frame, is_constant=True, parallel_iterations=parallel
            )
            flow, after, flow_back = variable(array.flow, f"flow_{k}")
            written = tf.raw_ops.TensorArrayWriteV3(
                handle=handle, index=index, value=value, flow_in=flow
            )
            fed[flow_back] = tf.raw_ops.NextIteration(data=written).name
            size = tf.raw_ops.TensorArraySizeV3(handle=array.handle, flow_in=after)
            stacks.append(
                tf.raw_ops.TensorArrayGatherV3(
                    handle=array.handle,
                    indices=tf.range(size),
                    flow_in=after,
                    dtype=t.dtype,
                    name=f"stack_{k}",
                ).name
            )
    return stacks


def _extend_loop(node, count: int, suffix: str) -> None:
    """The While node with `count` more loop variables (the accumulators, empty), running the
    body and cond named with `suffix`."""
    data = [i for i in node.input if not i.startswith("^")]
    control = [i for i in node.input if i.startswith("^")]
    del node.input[:]
    node.input.extend(data + [f"{node.name}/{_PREFIX}/acc_{k}" for k in range(count)] + control)
    node.attr["T"].list.type.extend([tf.variant.as_datatype_enum] * count)
    node.attr["body"].func.name = f"{node.attr['body'].func.name}_{suffix}"
    node.attr["cond"].func.name = f"{node.attr['cond'].func.name}_{suffix}"
    # the op's own, and those a meta graph export adds
    for shapes in ("output_shapes", "_output_shapes"):
        if shapes in node.attr and node.attr[shapes].list.shape:
            for _ in range(count):
                node.attr[shapes].list.shape.add()  # a scalar variant
    if "_num_original_outputs" in node.attr:
        node.attr["_num_original_outputs"].i += count


def emitting(
    model: Model, cells: Sequence[Cell], restore: bool = True, reads: bool = False
) -> tuple[Model, list[Cell], list[str]]:
    """`model` rebuilt (`tracer.load.rebuild.rebuilt`, restored if `restore`) so that every
    loop holding one of `cells` emits their gates and states (with `reads`, also what each
    step read: its input and previous states, for the preactivations' parts), and the cells
    with `loop.emitted` naming the stacked tensors; plus a note for each loop cell left to
    replay. The new Model is the caller's to close. Where no cell can be emitted, or the
    model cannot be rebuilt (a live session's graph, whose variables only that session holds),
    `model` and `cells` come back as they are."""
    wanted: dict[str, list[str]] = {}
    notes = []
    for c in cells:
        if c.loop is None or c.loop.emitted is not None:
            continue
        if c.loop.masked:  # the replay's check against the loop's outputs fails, saying so
            notes.append(
                f"{c.name}: replayed: its loop keeps the state where a mask says so, which gatetrace does not follow"
            )
        elif not c.loop.carried:  # the replay's check decides whether the change matters
            notes.append(
                f"{c.name}: replayed: its loop carries another state than the cell computes (a wrapper changes it)"
            )
        elif _emittable(c):
            names = wanted.setdefault(c.loop.loop, [])
            names += [n for n in _wanted(c, reads) if n not in names]
    if not wanted:
        return model, list(cells), notes
    if model.load_plan is None and model.format != "frozen":
        notes += [
            f"{c.name}: replayed: the graph of a live session cannot be rebuilt to emit it"
            for c in cells
            if c.loop and c.loop.loop in wanted
        ]
        return model, list(cells), notes
    with model.graph.as_default():
        meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
    graph_def, emitted = emit_loops(meta.graph_def, wanted, model.graph)
    meta.graph_def.CopyFrom(graph_def)
    new = rebuilt(model, meta, restore)

    def outer(c: Cell) -> Cell:
        if not _emittable(c) or c.in_loop.loop not in wanted:
            return c
        body, loop = c.in_loop.step, c.in_loop.loop

        def stacks(names: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(emitted[(loop, n)] for n in names)

        if c.fused is not None or reads or not c.in_loop.direct:
            read, previous = emitted[(loop, body.input)], stacks(body.previous)
        else:  # not emitted: nothing outside the loop holds them
            read, previous = "", ()
        outside = replace(
            body,
            preactivation=stacks(body.preactivation),
            activation=stacks(body.activation),
            states=stacks(body.states),
            input=read,
            previous=previous,
        )
        return replace(c, loop=replace(c.in_loop, emitted=outside))

    return new, [outer(c) for c in cells], notes


def _emittable(cell: Cell) -> bool:
    loop = cell.loop
    return (
        loop is not None
        and loop.body is not None
        and loop.emitted is None
        and not loop.masked
        and loop.carried
    )


def _wanted(cell: Cell, reads: bool) -> tuple[str, ...]:
    """The tensors of a loop cell's step to emit: its gates and states; also what it reads
    for a fused op (its preactivations are computed from them, `tracer.values.fused`), with
    `reads` (the parts, `tracer.values.parts`), and for a stacked cell that reads the layer
    below through other ops (its input is not the other's output: `--verify` replays from it)."""
    body = cell.in_loop.step
    own = (*body.preactivation, *body.activation, *body.states)
    return (
        (*own, body.input, *body.previous)
        if cell.fused is not None or reads or not cell.in_loop.direct
        else own
    )

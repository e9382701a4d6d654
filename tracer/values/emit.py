"""Loops rewritten to emit their own tensors: every step's value of chosen body tensors, as
TensorFlow computed them, out of a control-flow-v2 `While`/`StatelessWhile` op.

A cell inside a while loop computes its gates in the loop's body function, where nothing can
be fetched. `while_v2` keeps the intermediates its gradient needs by giving the loop one more
loop variable per tensor, a `TensorList` that the body appends the tensor to; `emit_loops`
does the same to a loaded graph, at the GraphDef level:

    body:  new arguments acc_k (variant), new outputs TensorListPushBack(acc_k, tensor_k)
    cond:  the same new arguments, unused
    While: the same node (same name, so every reader of its outputs is unchanged), with
           inputs + EmptyTensorList per tensor, types + variant, the new body and cond
    after: TensorListStack(While:n+k): the tensor's value at every iteration, stacked [T, ...]

Only `EmptyTensorList`, `TensorListPushBack` and `TensorListStack` ops (with the Consts they
read) are added; the loop computes exactly what it computed before, so the model's outputs are
the same bit for bit, and so are the emitted values (the very tensors of the body).

`emitting` does this for the loops of found cells (`Loop.body`, the cell's step inside the
body) and rebuilds the model from the rewritten graph: the cells' `Loop.emitted` name the
stacked tensors, fetched like any other (`tracer.values.fetch`). Loops of control flow v1
(Enter/Exit frames) are not rewritten: their cells are replayed (`tracer.values.replay`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from recorders.errors import GraphPatternError
from tracer._tf import tf, v1
from tracer.load.model import Model, rebuilt
from tracer.spec.found import Cell

from tensorflow.python.framework.function_def_to_graph import function_def_to_graph  # noqa: E402  # isort: skip  (after tracer._tf)
from tensorflow.python.ops import control_flow_util_v2, list_ops  # noqa: E402  # isort: skip

__all__ = ["emit_loops", "emitting", "LOOP_TYPES"]

LOOP_TYPES = ("While", "StatelessWhile")
_PREFIX = "gatetrace_emit"


def _function_graphs(library: dict, node, outer: tf.Graph):
    """The body and cond of the loop `node` as FuncGraphs whose outer graph is `outer`."""
    graphs = []
    for attr in ("body", "cond"):
        name = node.attr[attr].func.name
        if name not in library:
            raise GraphPatternError(f"{node.name}: its {attr} function {name} is not in the graph's library")
        with outer.as_default():
            graph = function_def_to_graph(library[name])
        graph.outer_graph = outer
        graphs.append(graph)
    return graphs


def _extended(node, body: tf.Graph, cond: tf.Graph, tensors: list[tf.Tensor], scratch: tf.Graph) -> list[str]:
    """Give `body` and `cond` one more argument per tensor (the body appending the tensor to it),
    add both to `scratch`'s library, and draw there the EmptyTensorList inputs (named
    `<loop>/gatetrace_emit/acc_k`) and the TensorListStack outputs (reading placeholders
    `<loop>/gatetrace_emit/out_k`). Returns the stacks' names."""
    scope = f"{node.name}/{_PREFIX}"
    with body.as_default():
        for t in tensors:
            acc = v1.placeholder(tf.variant, [])
            body.inputs.append(acc)
            body.outputs.append(list_ops.tensor_list_push_back(acc, t))
    with cond.as_default():
        for _ in tensors:
            cond.inputs.append(v1.placeholder(tf.variant, []))
    body.name = f"{node.attr['body'].func.name}_{_PREFIX}"
    cond.name = f"{node.attr['cond'].func.name}_{_PREFIX}"
    stacks = []
    with scratch.as_default():
        control_flow_util_v2.create_new_tf_function(body)
        control_flow_util_v2.create_new_tf_function(cond)
        for k, t in enumerate(tensors):
            list_ops.empty_tensor_list(element_shape=t.shape, element_dtype=t.dtype, max_num_elements=-1, name=f"{scope}/acc_{k}")
            out = v1.placeholder(tf.variant, [], name=f"{scope}/out_{k}")
            stacks.append(list_ops.tensor_list_stack(out, element_dtype=t.dtype, element_shape=t.shape, name=f"{scope}/stack_{k}").name)
    return stacks


def emit_loops(graph_def: v1.GraphDef, wanted: Mapping[str, Sequence[str]]) -> tuple[v1.GraphDef, dict[tuple[str, str], str]]:
    """`graph_def` with each loop named in `wanted` emitting the body tensors named there (as
    `function_def_to_graph` names them). Returns the new GraphDef and, for each (loop, body
    tensor), the name of the tensor holding its value at every iteration, stacked on axis 0."""
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes = {n.name: n for n in graph_def.node}
    scratch = tf.Graph()
    emitted: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    for loop, names in wanted.items():
        node = nodes.get(loop)
        if node is None or node.op not in LOOP_TYPES:
            raise GraphPatternError(f"{loop}: expected a While or StatelessWhile op, found {node.op if node else 'no such op'}")
        body, cond = _function_graphs(library, node, scratch)
        tensors = [body.get_tensor_by_name(name) for name in names]
        stacks = _extended(node, body, cond, tensors, scratch)
        emitted.update({(loop, name): stack for name, stack in zip(names, stacks)})
        counts[loop] = len(tensors)
    drawn = scratch.as_graph_def()

    out = v1.GraphDef()
    out.CopyFrom(graph_def)
    have = set(library)
    for function in drawn.library.function:
        if function.signature.name not in have:
            out.library.function.add().CopyFrom(function)
    taken = set(nodes)
    for node in drawn.node:
        if node.op == "Placeholder":  # out_k: the loop's new output
            continue
        if node.name in taken:
            raise GraphPatternError(f"{node.name}: the graph already has an op of this name; it cannot emit its loops")
        added = out.node.add()
        added.CopyFrom(node)
        inputs = [_loop_output(i, counts, nodes) for i in node.input]
        del added.input[:]
        added.input.extend(inputs)
    for node in out.node:
        if node.name in counts:
            _extend_loop(node, counts[node.name], nodes)
    return out, emitted


def _loop_output(name: str, counts: dict[str, int], nodes: dict) -> str:
    """A drawn op's input: `<loop>/gatetrace_emit/out_k` is the loop's (n + k)th output."""
    op = name.partition(":")[0]
    loop, _, leaf = op.rpartition(f"/{_PREFIX}/out_")
    if loop in counts:
        data = [i for i in nodes[loop].input if not i.startswith("^")]
        return f"{loop}:{len(data) + int(leaf)}"
    return name


def _extend_loop(node, count: int, nodes: dict) -> None:
    """The While node with `count` more loop variables: the accumulators, empty."""
    data = [i for i in node.input if not i.startswith("^")]
    control = [i for i in node.input if i.startswith("^")]
    del node.input[:]
    node.input.extend(data + [f"{node.name}/{_PREFIX}/acc_{k}" for k in range(count)] + control)
    node.attr["T"].list.type.extend([tf.variant.as_datatype_enum] * count)
    node.attr["body"].func.name = f"{node.attr['body'].func.name}_{_PREFIX}"
    node.attr["cond"].func.name = f"{node.attr['cond'].func.name}_{_PREFIX}"
    for shapes in ("output_shapes", "_output_shapes"):  # the op's own, and those a meta graph export adds
        if shapes in node.attr and node.attr[shapes].list.shape:
            for _ in range(count):
                node.attr[shapes].list.shape.add()  # a scalar variant
    if "_num_original_outputs" in node.attr:
        node.attr["_num_original_outputs"].i += count


def emitting(model: Model, cells: Sequence[Cell], restore: bool = True) -> tuple[Model, list[Cell], list[str]]:
    """`model` rebuilt (`tracer.load.model.rebuilt`, restored if `restore`) so that every
    control-flow-v2 loop holding one of `cells` emits their gates and states, and the cells
    with `loop.emitted` naming the stacked tensors; plus a note for each loop cell left to
    replay. The new Model is the caller's to close. Where no cell is in such a loop, or the
    model cannot be rebuilt (a live session's graph, whose variables only that session holds),
    `model` and `cells` come back as they are."""
    wanted: dict[str, list[str]] = {}
    notes = []
    for c in cells:
        if c.loop is None or c.loop.emitted is not None:
            continue
        if c.loop.body is None:
            notes.append(f"{c.name}: replayed: its loop {c.loop.loop} is a TF1 while loop (Enter/Exit), which gatetrace does not rewrite")
        elif c.loop.masked:  # the replay's check against the loop's outputs fails, saying so
            notes.append(f"{c.name}: replayed: its loop keeps the state where a mask says so, which gatetrace does not follow")
        elif not c.loop.carried:  # the replay's check decides whether the change matters
            notes.append(f"{c.name}: replayed: its loop carries another state than the cell computes (a wrapper changes it)")
        else:
            names = wanted.setdefault(c.loop.loop, [])
            names += [n for n in (*c.loop.body.preactivation, *c.loop.body.activation, *c.loop.body.states) if n not in names]
    if not wanted:
        return model, list(cells), notes
    if model.load_plan is None and model.format != "frozen":
        notes += [f"{c.name}: replayed: the graph of a live session cannot be rebuilt to emit it" for c in cells
                  if c.loop and c.loop.loop in wanted]
        return model, list(cells), notes
    with model.graph.as_default():
        meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
    graph_def, emitted = emit_loops(meta.graph_def, wanted)
    meta.graph_def.CopyFrom(graph_def)
    new = rebuilt(model, meta, restore)

    def outer(c: Cell) -> Cell:
        if c.loop is None or c.loop.loop not in wanted or c.loop.body is None or c.loop.masked or not c.loop.carried:
            return c
        body = c.loop.body
        names = {field_: tuple(emitted[(c.loop.loop, n)] for n in getattr(body, field_)) for field_ in ("preactivation", "activation", "states")}
        return replace(c, loop=replace(c.loop, emitted=replace(body, **names)))

    return new, [outer(c) for c in cells], notes

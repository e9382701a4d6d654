"""A model's graph rebuilt: `rebuilt` imports a rewritten meta graph (checked as every graph
is) into a new session, restored by the model's load plan; `on_the_cpu` replaces cuDNN's
fused RNN ops (`CudnnRNN`, `CudnnRNNV2`, `CudnnRNNV3`), which have no CPU kernel, by the
same steps (`tracer.load.cudnn`); `gpu_only_problem` says why a graph that calls them inside
a function cannot run here; `straightened` draws static_rnn's steps out of the conditionals
it runs them in when given sequence_length (`tracer.load.conds`). `rewritten` does both, as
every loader does last, and `rebuilds` says whether it will (the loader then leaves the
restoring to the rebuilt graph).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from recorders.errors import ModelFormatError
from tracer._tf import tf, v1
from tracer.load.conds import conditional_steps, straighten
from tracer.load.cudnn import cudnn_calls, params_size, replace_cudnn
from tracer.load.import_check import check_before_import
from tracer.load.loaded import Model, closed_if_it_fails
from tracer.load.safety import refuse, unsafe_ops

__all__ = [
    "rebuilt",
    "on_the_cpu",
    "gpu_only_problem",
    "refuse_gpu_only_in_functions",
    "runs_cudnn",
    "rebuilds",
    "rewritten",
    "straightened",
    "GPU_ONLY_OPS",
]


# cuDNN's fused RNN kernels: a model exported on a GPU calls them directly (Keras 3 under
# tf.saved_model.save), and TensorFlow has no CPU kernel for them: `tracer.load.cudnn`
# replaces those in the graph itself; those left inside functions cannot be.
GPU_ONLY_OPS = frozenset({"CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"})


def gpu_only_problem(graph: tf.Graph) -> str | None:
    """What to say of a graph that runs a cuDNN RNN op inside a function (None if it runs
    none there): no CPU kernel exists for it, and the op cannot be replaced inside a function."""
    found = [
        (f"{n.name} in function {f.signature.name}", n.op)
        for f in graph.as_graph_def().library.function
        for n in f.node_def
        if n.op in GPU_ONLY_OPS
    ]
    if not found:
        return None
    name, kind = found[0]
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return (
        f"it runs {kind} ({name}{more}), cuDNN's fused RNN kernel, which runs on a GPU only (the model was exported on a "
        "GPU), inside a function that gatetrace does not inline, so it cannot be replaced by steps that run on the CPU: "
        "record the same model built for the CPU: the Keras model itself saved with model.save('model.keras'), or a "
        "SavedModel exported on a CPU"
    )


def refuse_gpu_only_in_functions(graph: tf.Graph, source: str) -> None:
    problem = gpu_only_problem(graph)
    if problem:
        raise ModelFormatError(f"{source}: {problem}")


def runs_cudnn(graph: tf.Graph) -> bool:
    return any(op.type in GPU_ONLY_OPS for op in graph.get_operations())


def rebuilds(graph: tf.Graph) -> bool:
    """Whether `rewritten` rebuilds `graph` (and restores the rebuilt graph, not this one): it
    runs cuDNN ops, or static_rnn's steps in conditionals."""
    return runs_cudnn(graph) or conditional_steps(graph)


def rewritten(model: Model, restore: bool) -> Model:
    """`model` with its cuDNN ops replaced (`on_the_cpu`) and its conditional steps drawn
    straight (`straightened`), restored if `restore`; `model` itself where it has neither."""
    return straightened(on_the_cpu(model, restore), restore)


def straightened(model: Model, restore: bool) -> Model:
    """`model` with static_rnn's steps drawn out of their conditionals (`tracer.load.conds`), in
    a new graph and session restored if `restore`; `model` itself where it runs no such
    conditional, or none it can draw straight (restored then if `restore`: `rebuilds` told
    its loader to leave that to this)."""
    if not conditional_steps(model.graph):
        return model
    with closed_if_it_fails(
        model.session, lambda line: f"{model.source}: cannot read its conditional steps: {line}"
    ):
        with model.graph.as_default():
            meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
        graph_def, count = straighten(meta.graph_def)
        if not count:
            if restore and model.load_plan:
                model.load_plan.run(model.session, model.source, model.allow_unsafe_ops)
            return model
    model.close()
    meta.graph_def.CopyFrom(graph_def)
    drawn = rebuilt(model, meta, restore)
    note = (
        f"static_rnn runs its steps in conditionals (sequence_length): {count} drawn straight, both "
        "branches computed and the one the predicate names selected (the same values), so that "
        "its gate ops can be fetched"
    )
    return replace(drawn, notes=(*model.notes, note))


def on_the_cpu(model: Model, restore: bool) -> Model:
    """`model` (not restored yet if it runs cuDNN ops) with its cuDNN RNN ops replaced by the
    same steps (`tracer.load.cudnn`), in a new graph and session, restored if `restore`; or
    `model` itself if it runs none. A graph holding an op without a CPU kernel cannot run at
    all, so the steps are first drawn with zero weights, restored, and the packed params
    read there; then drawn again with the weights cut from them, and restored. With
    `restore=False` nothing runs: the steps keep zero weights (enough to find and list cells)."""
    if not runs_cudnn(model.graph):
        return model
    with closed_if_it_fails(
        model.session, lambda line: f"{model.source}: cannot read its cuDNN ops: {line}"
    ):
        calls = cudnn_calls(model.graph, model.source)
        with model.graph.as_default():
            meta = v1.train.export_meta_graph(graph=model.graph, clear_devices=True)
    model.close()
    zeros = {
        c.params: np.zeros(params_size(c.mode, c.input_size, c.units), np.float32) for c in calls
    }
    drawn = _replaced(model, meta, calls, zeros, restore)
    if not restore:
        return drawn
    with closed_if_it_fails(
        drawn.session, lambda line: f"{model.source}: cannot read its cuDNN weights: {line}"
    ):
        tensors = sorted({call.params for call in calls})
        if not model.allow_unsafe_ops:
            refuse(unsafe_ops(drawn.graph, tensors), "reading its cuDNN weights", model.source)
        values = dict(zip(tensors, drawn.session.run(tensors), strict=True))
    drawn.close()
    return _replaced(model, meta, calls, values, restore)


def _replaced(model: Model, meta, calls, params: dict, restore: bool) -> Model:
    """`model` from the meta graph `meta` with `calls` replaced (weights from `params`)."""
    meta = copy.deepcopy(meta)
    meta.graph_def.CopyFrom(replace_cudnn(meta.graph_def, calls, params))
    return rebuilt(model, meta, restore)


def rebuilt(model: Model, meta, restore: bool = True) -> Model:
    """A new Model of the meta graph `meta` (a rewrite of `model`'s), checked before it is
    imported as every graph is, in a session of its own, restored by `model`'s load plan if
    `restore`; `model` itself is left as it is (its owner closes it)."""
    check_before_import(meta.graph_def, model.source, model.allow_unsafe_ops)
    graph = tf.Graph()
    session = v1.Session(graph=graph, config=model.session_config)
    with closed_if_it_fails(
        session, lambda line: f"{model.source}: cannot run its rewritten graph: {line}"
    ):
        with graph.as_default():
            v1.train.import_meta_graph(meta, clear_devices=True)
        if restore and model.load_plan:
            model.load_plan.run(session, model.source, model.allow_unsafe_ops)
    return replace(model, graph=graph, session=session, owns_session=True)

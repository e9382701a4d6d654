"""TF2 SavedModels: the functions a serving signature calls, inlined into one graph.

A TF2 SavedModel (`tf.saved_model.save`, Keras 3 `model.export()`) keeps its computation
in functions: the signature's output is a `StatefulPartitionedCall` of a function, which
calls the model's functions, whose RNN layers run as `While` ops with their cell in a body
function, reading captured resource variables. Nothing inside a function can be fetched.

`inline_signature` rewrites the meta graph with TensorFlow's own graph optimizer
(grappler), running its function inliner only: every call the signature makes is
replaced by the called function's ops, named `<call op>/<op in function>`, down to the
`While` ops, which stay loops (their `_lower_using_switch_merge` attribute is turned off,
so the inliner does not rewrite them into Enter/Exit frames). The result is a graph like
the ones `dynamic_rnn` builds with control flow v2, which `tracer.find.loops` reads: the
loop's inputs, states and outputs are tensors of the graph. Nothing runs while inlining:
grappler only rewrites the graph, and the rewritten graph is checked by
`tracer.load.safety` before any of it runs, as every other graph is.

The graph is cut down to what the signature's outputs, the restore op and the init op
need, so the other signatures (Keras 3 exports two) add no second copy of each cell.
"""

from __future__ import annotations

from recorders.errors import ModelFormatError
from tracer._tf import v1
from tracer.load.formats import DEFAULT_SIGNATURE

__all__ = [
    "DEFAULT_SIGNATURE",
    "is_function_graph",
    "signature_of",
    "inline_signature",
    "keras_note",
]

_CALLS = ("StatefulPartitionedCall", "PartitionedCall")
_CONTROL_FLOW = ("While", "StatelessWhile", "If", "StatelessIf")


def is_function_graph(meta) -> bool:
    """Whether a meta graph is a TF2 one: its signatures' outputs come from function calls."""
    calls = {n.name for n in meta.graph_def.node if n.op in _CALLS}
    return any(
        t.name.partition(":")[0] in calls
        for key, sig in meta.signature_def.items()
        if not key.startswith("__")
        for t in sig.outputs.values()
    )


def keras_note(meta) -> str:
    """The note ", of tf-keras layers" when the object graph holds tf-keras' objects (`_tf_keras_layer`,
    `_tf_keras_rnn_layer`...), as every TF 2.x Keras SavedModel does, keras_metadata.pb or not."""
    keras = any(
        n.user_object.identifier.startswith("_tf_keras_") for n in meta.object_graph_def.nodes
    )
    return ", of tf-keras layers" if keras else ""


def signature_of(meta, key: str, source: str):
    """The SignatureDef `key`; ModelFormatError listing the signatures there are."""
    names = sorted(k for k in meta.signature_def if not k.startswith("__"))
    if key not in meta.signature_def or key.startswith("__"):
        raise ModelFormatError(
            f"{source}: the SavedModel has no signature {key!r}; its signatures are "
            f"{', '.join(repr(n) for n in names) or '(none)'}: choose one with --signature"
        )
    return meta.signature_def[key]


def inline_signature(meta, key: str, keep: list[str], source: str):
    """A copy of `meta` whose graph computes signature `key` with every function call inlined.

    `keep` names further ops to keep unchanged (the restore and init ops). Returns the
    new MetaGraphDef, for `tf.compat.v1.train.import_meta_graph`.
    """
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.grappler import tf_optimizer

    signature = signature_of(meta, key, source)
    outputs = [t.name for t in signature.outputs.values()]
    work = meta_graph_pb2.MetaGraphDef()
    work.CopyFrom(meta)
    for function in work.graph_def.library.function:
        # tf-keras' standard_lstm/standard_gru name the API they implement, so that grappler
        # may swap in the cuDNN one on a GPU; such functions are not inlined. On a CPU the
        # standard one is what runs: it is inlined like any other.
        for attr in ("api_implements", "api_preferred_device"):
            function.attr.pop(attr, None)
    for nodes in [work.graph_def.node] + [f.node_def for f in work.graph_def.library.function]:
        for node in nodes:
            if node.op in _CONTROL_FLOW:
                node.attr["_lower_using_switch_merge"].b = False  # keep loops as loops
    fetch = work.collection_def["train_op"].node_list  # what grappler must keep
    fetch.value.extend(outputs + [k for k in keep if k])
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.append("function")  # the inliner, and no other rewriting
    rewrite.min_graph_nodes = -1
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    try:
        graph_def = tf_optimizer.OptimizeGraph(config, work)
        graph_def = v1.graph_util.extract_sub_graph(
            graph_def, [n.partition(":")[0] for n in fetch.value]
        )
    except Exception as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelFormatError(
            f"{source}: cannot inline the functions of signature {key!r}: {reason}"
        ) from err
    for node in graph_def.node:  # shapes recorded for the call ops, not for what replaced them
        node.attr.pop("_output_shapes", None)
    del work.collection_def["train_op"]
    work.graph_def.CopyFrom(graph_def)
    return work

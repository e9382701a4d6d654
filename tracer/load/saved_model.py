"""Loading a SavedModel (`saved_model.pb`): the meta graph tagged exactly `serve`, its
restore and init ops as TensorFlow's loader takes them (`LoadPlan`), a TF2 one's signature
functions inlined (`tracer.load.inline`) and the variables it captures restored from the
checkpoint's object graph.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from recorders.errors import ModelFormatError, listing
from tracer._tf import tf, v1
from tracer.load.formats import LoadRequest
from tracer.load.import_check import check_before_import
from tracer.load.inline import (
    DEFAULT_SIGNATURE,
    inline_signature,
    is_function_graph,
    keras_note,
    signature_of,
)
from tracer.load.keras import classes_outside_keras, is_keras_file
from tracer.load.loaded import (
    FETCHING,
    LoadPlan,
    Model,
    closed_if_it_fails,
    error_line,
    saver_plan,
)
from tracer.load.paths import inside
from tracer.load.rebuild import rebuilds, refuse_gpu_only_in_functions, rewritten

__all__ = ["read", "load_saved_model", "INIT_OP_SIGNATURE", "UNOPTIMIZED"]


INIT_OP_SIGNATURE = "__saved_model_init_op"  # where TensorFlow's loader looks for the init op first


def _saved_model_meta_graph(path: Path, tag: str, source: str):
    """The meta graph whose tag set is exactly `tag` (tags comma-separated), as TensorFlow's
    loader picks it; ModelFormatError listing the tag sets if there is none."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        if (path / "saved_model.pb").is_file():
            proto.ParseFromString((path / "saved_model.pb").read_bytes())
        else:
            text_format.Parse((path / "saved_model.pbtxt").read_text(), proto)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as err:
        raise ModelFormatError(f"{source}: cannot read SavedModel: {error_line(err)}") from None
    wanted = {t.strip() for t in tag.split(",") if t.strip()}
    for meta in proto.meta_graphs:
        if set(meta.meta_info_def.tags) == wanted:
            return meta
    tags = [",".join(sorted(m.meta_info_def.tags)) for m in proto.meta_graphs]
    raise ModelFormatError(
        f"{source}: SavedModel has no meta graph tagged exactly {tag!r}; its tag sets are "
        f"{', '.join(repr(t) for t in tags) or '(none)'}: choose one with --tag (several tags comma-separated)"
    )


def _collection_op(graph: tf.Graph, meta, key: str, source: str) -> str | None:
    if key not in meta.collection_def:
        return None
    names = list(meta.collection_def[key].node_list.value)
    if len(names) != 1:
        raise ModelFormatError(
            f"{source}: its {key} collection holds {len(names)} ops; a SavedModel has exactly one init op"
        )
    return graph.as_graph_element(names[0]).name


def _saved_model_plan(path: Path, meta, graph: tf.Graph, saver, source: str) -> LoadPlan:
    """The restore and init ops TensorFlow's SavedModel loader would run, found as it finds them."""
    init_op = None
    signature = meta.signature_def.get(INIT_OP_SIGNATURE)
    if signature is not None and INIT_OP_SIGNATURE in signature.outputs:
        init_op = graph.as_graph_element(signature.outputs[INIT_OP_SIGNATURE].name).name
    for key in ("saved_model_main_op", "legacy_init_op"):
        init_op = init_op or _collection_op(graph, meta, key, source)
    assets = tuple(
        (a.tensor_info.name, str(path / "assets" / a.filename)) for a in meta.asset_file_def
    )
    return LoadPlan(
        **saver_plan(saver, str(path / "variables" / "variables")),
        init_op=init_op,
        asset_feeds=assets,
    )


# Sessions on an inlined graph run it as written. Grappler's run-time rewriting, given a
# fetch inside the inlined functions, was seen to return the value of another tensor
# (a tf-keras GRU's time-major input fetched as the batch-major output of the LSTM below:
# the two transposes between them cancelled), while the model's output stayed right.
UNOPTIMIZED = v1.ConfigProto()
UNOPTIMIZED.graph_options.rewrite_options.disable_meta_optimizer = True


def _signature_inputs(meta, signature: str, source: str, tf2: bool) -> dict[str, str]:
    """Feed names the signature gives its inputs (`saved_model_cli show` prints them), to
    tensor names. A TF1 SavedModel without the default signature is fed by tensor names."""
    if signature == DEFAULT_SIGNATURE and signature not in meta.signature_def and not tf2:
        return {}
    return {key: t.name for key, t in signature_of(meta, signature, source).inputs.items()}


def _links_out(folder: Path) -> list[str]:
    """The entries of `folder` (walked without following links) that are links leading out of it."""
    found = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            entry = Path(root) / name
            if entry.is_symlink() and not inside(entry, folder):
                found.append(str(entry.relative_to(folder)))
    return sorted(found)


def read(path: Path, source: str, request: LoadRequest) -> Model | None:
    """The SavedModel in the folder `path`, or None: no saved_model.pb there, or a tf-keras
    SavedModel that Keras reads (`tracer.load.keras`). One whose keras_metadata.pb names
    classes that are not Keras' own (a subclassed model, a custom layer: code the folder does
    not hold), and nothing else it refuses (a Lambda stays refused), is read here: through its
    traced functions and variables, graphs of TensorFlow ops checked like any SavedModel's."""
    if not (
        path.is_dir() and any((path / n).is_file() for n in ("saved_model.pb", "saved_model.pbtxt"))
    ):
        return None
    custom = classes_outside_keras(path, request.allow_unsafe_ops)
    if is_keras_file(path) and not custom:
        return None
    model = load_saved_model(
        path, request.tag, request.signature, source, request.restore, request.allow_unsafe_ops
    )
    if not custom:
        return model
    traced = (
        f"its keras_metadata.pb names {listing(custom, 3)}: recorded through the SavedModel's "
        "traced functions and variables instead, which need no Python code of the model and run none"
    )
    return replace(model, notes=(*model.notes, traced))


def load_saved_model(
    path: Path, tag: str, signature: str, source: str, restore: bool, allow_unsafe_ops: bool
) -> Model:
    outside = _links_out(path)
    if outside:
        raise ModelFormatError(
            f"{source}: {', '.join(outside[:3])} link{'s' if len(outside) == 1 else ''} out of the SavedModel's folder; "
            "gatetrace reads a SavedModel's files only inside its folder: copy them in"
        )
    meta = _saved_model_meta_graph(path, tag, source)
    check_before_import(meta.graph_def, source, allow_unsafe_ops)
    tf2 = is_function_graph(meta)
    inputs = _signature_inputs(meta, signature, source, tf2)
    saved = meta
    if tf2:  # the signature's functions inlined, so that the loops in them can be read
        init = meta.signature_def.get(INIT_OP_SIGNATURE)
        init_op = (
            init.outputs[INIT_OP_SIGNATURE].name.partition(":")[0]
            if init and INIT_OP_SIGNATURE in init.outputs
            else ""
        )
        meta = inline_signature(meta, signature, [meta.saver_def.restore_op_name, init_op], source)
    graph = tf.Graph()
    session = v1.Session(graph=graph, config=UNOPTIMIZED if tf2 else FETCHING)
    with closed_if_it_fails(session, lambda line: f"{source}: cannot read SavedModel: {line}"):
        with graph.as_default():
            plan = _saved_model_plan(
                path, meta, graph, v1.train.import_meta_graph(meta, clear_devices=True), source
            )
        refuse_gpu_only_in_functions(graph, source)
        if tf2:
            plan = _restore_captures(graph, saved, signature, plan)
            _check_restored(graph, meta.signature_def[signature], plan, source, signature)
        if restore and not rebuilds(graph):  # else restored once rebuilt (cuDNN ops, conditionals)
            plan.run(session, source, allow_unsafe_ops)
    kind = "savedmodel" if not tf2 else f"TF2 savedmodel{keras_note(meta)}, signature {signature}"
    model = Model(
        graph,
        session,
        source,
        kind,
        allow_unsafe_ops=allow_unsafe_ops,
        load_plan=plan,
        inputs=inputs,
        session_config=UNOPTIMIZED if tf2 else FETCHING,
    )
    return rewritten(model, restore)


def _handles(start: list[tf.Operation]) -> set[str]:
    """The VarHandleOps the ops `start` read, directly or through other ops."""
    seen, todo, found = set(), list(start), set()
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type == "VarHandleOp":
            found.add(op.name)
        # a group's members are its control inputs
        todo += [t.op for t in op.inputs] + list(op.control_inputs)
    return found


def _restored(graph: tf.Graph, plan: LoadPlan) -> set[str]:
    return _handles([graph.as_graph_element(op) for op in plan.ops])


def _restore_captures(graph: tf.Graph, saved, signature: str, plan: LoadPlan) -> LoadPlan:
    """`plan`, restoring also the variables the signature's function captures that its restore
    function does not fill, as TensorFlow's TF2 loader does: it binds each capture to the object
    the object graph saved (`bound_inputs`), and restores objects by the keys the checkpoint's
    own object graph gives them, not through the restore function. tf.saved_model.save of a
    Keras 3 model captures a second handle per variable, filled only that way. A capture whose
    object has no value in the checkpoint is left for `_check_restored` to refuse."""
    calls = {n.name: n for n in saved.graph_def.node}
    outputs = saved.signature_def[signature].outputs.values()
    call = calls.get(next(iter(outputs)).name.partition(":")[0]) if outputs else None
    functions = saved.object_graph_def.concrete_functions
    if (
        not plan.restore_op
        or not plan.checkpoint
        or call is None
        or call.attr["f"].func.name not in functions
    ):
        return plan
    bound = list(functions[call.attr["f"].func.name].bound_inputs)
    data = [i.partition(":")[0] for i in call.input if not i.startswith("^")]
    restored = _restored(graph, plan)
    missing = {
        h: node
        for h, node in zip(data[len(data) - len(bound) :], bound, strict=True)
        if calls[h].op == "VarHandleOp" and h not in restored
    }
    if not missing:
        return plan
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    objects = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
        tf.train.load_checkpoint(plan.checkpoint).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
    )
    keys = {}
    for handle, node in sorted(missing.items()):
        key = (
            [a.checkpoint_key for a in objects.nodes[node].attributes if a.name == "VARIABLE_VALUE"]
            if node < len(objects.nodes)
            else []
        )
        if key:
            keys[handle] = key[0]
    if not keys:
        return plan
    with graph.as_default(), graph.name_scope("gatetrace_restore_captures/"):
        values = tf.raw_ops.RestoreV2(
            prefix=graph.get_tensor_by_name(plan.filename_tensor),
            tensor_names=list(keys.values()),
            shape_and_slices=[""] * len(keys),
            dtypes=[calls[h].attr["dtype"].type for h in keys],
        )
        assigns = [
            tf.raw_ops.AssignVariableOp(resource=graph.get_tensor_by_name(f"{h}:0"), value=v)
            for h, v in zip(keys, values, strict=True)
        ]
        restore = tf.group(*assigns, name="restore")
    return replace(plan, captures_op=restore.name)


def _check_restored(
    graph: tf.Graph, signature_def, plan: LoadPlan, source: str, signature: str
) -> None:
    """Refuse a TF2 SavedModel whose signature reads variables that restoring does not fill,
    even by the checkpoint's object graph (`_restore_captures`): they would be read uninitialized."""
    if not plan.restore_op:
        return
    read = _handles([graph.as_graph_element(t.name).op for t in signature_def.outputs.values()])
    missing = sorted(read - _restored(graph, plan))
    if missing:
        raise ModelFormatError(
            f"{source}: signature {signature!r} reads {len(missing)} variable{'s' if len(missing) != 1 else ''} that restoring "
            f"does not fill ({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}), neither its restore function nor "
            "the checkpoint's object graph: they would be read uninitialized; save the model again with its variables "
            "(tf.saved_model.save, or model.export() for a Keras model) and record that"
        )

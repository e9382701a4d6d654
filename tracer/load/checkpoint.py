"""Loading a TF1 checkpoint: a prefix P with P.meta beside it (or P.meta itself), or a folder
holding a `checkpoint` file (its latest checkpoint). The meta graph is checked before it is
imported (`tracer.load.import_check`), then the Saver's restore op restores the weights
(`tracer.load.loaded.LoadPlan`), once `tracer.load.safety` has checked it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from recorders.errors import ModelFormatError
from tracer._tf import tf, v1
from tracer.load.formats import LoadRequest
from tracer.load.import_check import check_before_import
from tracer.load.loaded import FETCHING, LoadPlan, Model, closed_if_it_fails, saver_plan
from tracer.load.paths import checkpoint_prefix
from tracer.load.rebuild import rebuilds, refuse_gpu_only_in_functions, rewritten

__all__ = ["read", "weights_only"]


def read(path: Path, source: str, request: LoadRequest) -> Model | None:
    """The checkpoint `path` names (see the module docstring), or None: not a checkpoint (a
    folder holding saved_model.pb is a SavedModel's, whatever else it holds)."""
    if path.is_dir() and any((path / n).is_file() for n in ("saved_model.pb", "saved_model.pbtxt")):
        return None
    found = checkpoint_prefix(path)
    if found is None:
        return None
    prefix, note = found
    model = _load_checkpoint(prefix, source, request.restore, request.allow_unsafe_ops)
    return replace(model, notes=(note,)) if note else model


def _read_meta_graph(path: str, source: str):
    """A MetaGraphDef from a binary (or text) .meta file; ModelFormatError if it is neither."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import meta_graph_pb2

    data = Path(path).read_bytes()
    meta = meta_graph_pb2.MetaGraphDef()
    try:
        meta.ParseFromString(data)
        return meta
    except message.DecodeError:
        pass
    try:
        return text_format.Parse(data.decode("utf-8"), meta_graph_pb2.MetaGraphDef())
    except (UnicodeDecodeError, text_format.ParseError):
        raise ModelFormatError(
            f"{source}: {path} is not a readable MetaGraphDef ({len(data):,} bytes, neither binary nor text protobuf): "
            "the file is truncated or corrupted; export it again"
        ) from None


def weights_only(source: str, prefix: str) -> str:
    """What to say of a checkpoint with no meta graph: an object-based one (`tf.train.Checkpoint`,
    Keras' `save_weights`) or a Saver's written with `write_meta_graph=False`."""
    return (
        f"{source}: the checkpoint {prefix} holds weights but no graph ({prefix}.index and its data files, no "
        f"{prefix}.meta), as tf.train.Checkpoint and save_weights write them: there are no cells to find in it; give "
        "the model's SavedModel (tf.saved_model.save, model.export), its Keras file (model.save), or a checkpoint "
        "saved with its meta graph (tf.compat.v1.train.Saver().save)"
    )


def _load_checkpoint(prefix: str, source: str, restore: bool, allow_unsafe_ops: bool) -> Model:
    meta = prefix + ".meta"
    if not os.path.isfile(meta):
        raise ModelFormatError(weights_only(source, prefix))
    meta_graph = _read_meta_graph(meta, source)
    check_before_import(meta_graph.graph_def, source, allow_unsafe_ops)
    graph = tf.Graph()
    session = v1.Session(graph=graph, config=FETCHING)

    def failed(line: str) -> str:
        return f"{source}: cannot restore the variables from checkpoint {prefix}: {line} (are its .index and .data files complete?)"

    with closed_if_it_fails(session, failed):
        with graph.as_default():
            plan = LoadPlan(
                **saver_plan(v1.train.import_meta_graph(meta_graph, clear_devices=True), prefix)
            )
        refuse_gpu_only_in_functions(graph, source)
        if restore and not rebuilds(graph):  # else restored once rebuilt (cuDNN ops, conditionals)
            plan.run(session, source, allow_unsafe_ops)
    return rewritten(
        Model(
            graph, session, source, "checkpoint", allow_unsafe_ops=allow_unsafe_ops, load_plan=plan
        ),
        restore,
    )

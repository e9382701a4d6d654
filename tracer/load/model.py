"""Loading a model: a TF1 checkpoint, a SavedModel, a frozen GraphDef, a Keras file, or a live session.

`load_model(path)` returns a `Model`: a graph with its weights in a session, ready for
`find_cells` and `Session.run`. The format is told from what is on disk:

    P with P.meta beside it (or P.meta itself)     checkpoint: import meta graph, restore
    a directory holding a `checkpoint` file        its latest checkpoint
    a directory holding saved_model.pb             SavedModel: the meta graph tagged exactly `serve`;
                                                   a TF2 one (its signatures call functions) has the
                                                   functions of `signature` inlined (`tracer.load.inline`)
    a file ending in .pb                           frozen GraphDef: weights are Consts
    .keras, .h5, a folder with keras_metadata.pb   Keras: a `tracer.load.keras.KerasModel`

Before any graph is imported, `tracer.load.import_check` reads its serialized form and refuses
ops that TensorFlow could evaluate while importing and that do more than compute.
Loading runs what TensorFlow's loaders would run, taken from the file the way they take
it (a `LoadPlan`: the Saver's restore op, a SavedModel's init op), but gatetrace runs
those ops itself, after `tracer.load.safety` has checked them: every op on the allowlist,
every restore op reading the model's own checkpoint, and every variable it restores
present in that checkpoint. `allow_unsafe_ops` skips the op check. With `restore=False`
nothing runs at all (for `inspect`).

A graph calling cuDNN's RNN ops (exported on a GPU), which have no CPU kernel, is loaded with
those ops replaced by the same LSTM or GRU steps (`tracer.load.cudnn`).

Each format ends in the same `Model` (`tracer.load.loaded`) through the same path rules
(`tracer.load.paths`); SavedModels load in `tracer.load.saved_model`, cuDNN ops are replaced
in `tracer.load.rebuild`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from recorders.errors import ModelFormatError, listing
from tracer._tf import tf, v1
from tracer.load.formats import FORMATS
from tracer.load.import_check import check_before_import
from tracer.load.inline import (
    DEFAULT_SIGNATURE,
)
from tracer.load.keras import KerasModel, is_keras_file, load_keras
from tracer.load.keras_files import custom_classes
from tracer.load.loaded import LoadPlan, Model, closed_if_it_fails, error_line, saver_plan
from tracer.load.paths import checkpoint_prefix
from tracer.load.rebuild import on_the_cpu, refuse_gpu_only_in_functions, runs_cudnn
from tracer.load.saved_model import load_saved_model

__all__ = ["load_model", "FORMATS", "Model", "LoadPlan"]


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


def _weights_only(source: str, prefix: str) -> str:
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
        raise ModelFormatError(_weights_only(source, prefix))
    meta_graph = _read_meta_graph(meta, source)
    check_before_import(meta_graph.graph_def, source, allow_unsafe_ops)
    graph = tf.Graph()
    session = v1.Session(graph=graph)

    def failed(line: str) -> str:
        return f"{source}: cannot restore the variables from checkpoint {prefix}: {line} (are its .index and .data files complete?)"

    with closed_if_it_fails(session, failed):
        with graph.as_default():
            plan = LoadPlan(
                **saver_plan(v1.train.import_meta_graph(meta_graph, clear_devices=True), prefix)
            )
        refuse_gpu_only_in_functions(graph, source)
        if restore and not runs_cudnn(graph):  # else restored once its cuDNN ops are replaced
            plan.run(session, source, allow_unsafe_ops)
    return on_the_cpu(
        Model(
            graph, session, source, "checkpoint", allow_unsafe_ops=allow_unsafe_ops, load_plan=plan
        ),
        restore,
    )


def _load_frozen(path: Path, source: str, restore: bool, allow_unsafe_ops: bool) -> Model:
    graph_def = v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except Exception as err:
        raise ModelFormatError(
            f"{source}: cannot read it as a frozen GraphDef: {error_line(err)}; expected {FORMATS}"
        ) from err
    check_before_import(graph_def, source, allow_unsafe_ops)
    try:
        graph = tf.Graph()
        with graph.as_default():
            tf.import_graph_def(graph_def, name="")
    except Exception as err:
        raise ModelFormatError(
            f"{source}: cannot read it as a frozen GraphDef: {error_line(err)}; expected {FORMATS}"
        ) from err
    refuse_gpu_only_in_functions(graph, source)
    return on_the_cpu(
        Model(graph, v1.Session(graph=graph), source, "frozen", allow_unsafe_ops=allow_unsafe_ops),
        restore,
    )


def load_model(
    path: str | os.PathLike,
    tag: str = "serve",
    *,
    signature: str = DEFAULT_SIGNATURE,
    restore: bool = True,
    allow_unsafe_ops: bool = False,
) -> Model | KerasModel:
    """Load the model at `path` (see the module docstring for the formats and the checks).

    `restore=False` loads the graph only, running nothing (enough to find cells). A Keras
    file (`.keras`, `.h5`, a SavedModel folder with keras_metadata.pb) gives a
    `tracer.load.keras.KerasModel` instead.
    """
    source = str(path)
    p = Path(path)
    # A tf-keras SavedModel whose keras_metadata.pb names classes that are not Keras' own (a
    # subclassed model, a custom layer: code the folder does not hold), and nothing else it
    # refuses (a Lambda stays refused), is loaded as a TF2 SavedModel: through its traced
    # functions and variables, graphs of TensorFlow ops checked like any SavedModel's.
    custom = custom_classes(p) if is_keras_file(p) and p.is_dir() and not allow_unsafe_ops else []
    if is_keras_file(p) and not custom:
        return load_keras(p, allow_unsafe_ops=allow_unsafe_ops)
    if p.is_dir() and ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()):
        model = load_saved_model(p, tag, signature, source, restore, allow_unsafe_ops)
        if not custom:
            return model
        traced = (
            f"its keras_metadata.pb names {listing(custom, 3)}: recorded through the SavedModel's "
            "traced functions and variables instead, which need no Python code of the model and run none"
        )
        return replace(model, notes=(*model.notes, traced))
    found = checkpoint_prefix(p)
    if found is not None:
        prefix, note = found
        model = _load_checkpoint(prefix, source, restore, allow_unsafe_ops)
        return replace(model, notes=(note,)) if note else model
    if p.is_file() and p.suffix == ".pb":
        return _load_frozen(p, source, restore, allow_unsafe_ops)
    if not p.exists() and Path(f"{source}.index").is_file():
        raise ModelFormatError(_weights_only(source, source))
    if not p.exists():
        raise ModelFormatError(
            f"model not found: {source} does not exist (and neither does {source}.meta); expected {FORMATS}"
        )
    raise ModelFormatError(f"{source} is in no format gatetrace reads; expected {FORMATS}")

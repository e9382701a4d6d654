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

Why one module of over 600 lines: every format ends in the same `Model` (graph, session,
load plan, notes) through the same path rules (what a model may point at), and the formats
are told apart from one another here; split by format, each part would import the others.
"""

from __future__ import annotations

import copy
import glob
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import GatetraceError, ModelFormatError, listing
from recorders.write.folder import Folder
from tracer._tf import tf, v1
from tracer.load.cudnn import cudnn_calls, params_size, replace_cudnn
from tracer.load.import_check import check_before_import
from tracer.load.inline import (
    DEFAULT_SIGNATURE,
    inline_signature,
    is_function_graph,
    keras_note,
    signature_of,
)
from tracer.load.keras import KerasModel, is_keras_file, load_keras
from tracer.load.keras_files import custom_classes
from tracer.load.safety import refuse, restore_ops, restore_problems, unsafe_ops

__all__ = [
    "Model",
    "LoadPlan",
    "load_model",
    "rebuilt",
    "from_session",
    "error_line",
    "gpu_only_problem",
    "FORMATS",
    "GPU_ONLY_OPS",
]

FORMATS = (
    "a checkpoint prefix P with P.meta beside it, a directory holding a 'checkpoint' file, "
    "a SavedModel directory (saved_model.pb), a frozen GraphDef .pb, or a Keras .keras/.h5 file"
)


@dataclass
class Model:
    """A graph, the session that holds its weights, and where it came from.

    format is `checkpoint`, `savedmodel`, `frozen` or `session`. A Model made by
    `load_model` owns its session: use it as a context manager, or call `close()`.
    `load_plan` says what loading runs (restore, init); `allow_unsafe_ops` turns
    off the allowlist check before running the graph (see `tracer.load.safety`). `inputs`
    maps a SavedModel signature's input names to tensor names: either can be fed.
    """

    graph: tf.Graph
    session: v1.Session
    source: str
    format: str
    owns_session: bool = True
    allow_unsafe_ops: bool = False
    load_plan: LoadPlan | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    # the ConfigProto its sessions are made with (TF2 graphs: grappler off)
    session_config: Any = None
    # what loading took differently from what the files named, said by `inspect`
    notes: tuple[str, ...] = ()

    @property
    def load_ops(self) -> tuple[str, ...]:
        """The ops loading runs (restore, init)."""
        return self.load_plan.ops if self.load_plan else ()

    def close(self) -> None:
        if self.owns_session and not self.session._closed:
            self.session.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def from_session(
    session: v1.Session, source: str = "live session", allow_unsafe_ops: bool = True
) -> Model:
    """Wrap a live `tf.compat.v1.Session`; the caller keeps ownership of it.

    The graph is the caller's own code, so it is trusted unless `allow_unsafe_ops=False`.
    """
    return Model(
        session.graph,
        session,
        source,
        "session",
        owns_session=False,
        allow_unsafe_ops=allow_unsafe_ops,
    )


_NOISE = (
    "Graph execution error",
    "Detected at node",
    "Node:",
    "File ",
    "[[",
    "Stack trace",
    "Original stack trace",
    "Errors may have",
)


def error_line(err: BaseException) -> str:
    """The informative line of an error: TensorFlow's own message, without its stack notes."""
    text = err.message if isinstance(err, tf.errors.OpError) else str(err)
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(_NOISE)
    ]
    return lines[0] if lines else type(err).__name__


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


def _refuse_gpu_only_in_functions(graph: tf.Graph, source: str) -> None:
    problem = gpu_only_problem(graph)
    if problem:
        raise ModelFormatError(f"{source}: {problem}")


def _runs_cudnn(graph: tf.Graph) -> bool:
    return any(op.type in GPU_ONLY_OPS for op in graph.get_operations())


def _on_the_cpu(model: Model, restore: bool) -> Model:
    """`model` (not restored yet if it runs cuDNN ops) with its cuDNN RNN ops replaced by the
    same steps (`tracer.load.cudnn`), in a new graph and session, restored if `restore`; or
    `model` itself if it runs none. A graph holding an op without a CPU kernel cannot run at
    all, so the steps are first drawn with zero weights, restored, and the packed params
    read there; then drawn again with the weights cut from them, and restored. With
    `restore=False` nothing runs: the steps keep zero weights (enough to find and list cells)."""
    if not _runs_cudnn(model.graph):
        return model
    with _closed_if_it_fails(
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
    with _closed_if_it_fails(
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
    with _closed_if_it_fails(
        session, lambda line: f"{model.source}: cannot run its rewritten graph: {line}"
    ):
        with graph.as_default():
            v1.train.import_meta_graph(meta, clear_devices=True)
        if restore and model.load_plan:
            model.load_plan.run(session, model.source, model.allow_unsafe_ops)
    return replace(model, graph=graph, session=session, owns_session=True)


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, its links followed, lies inside `folder`."""
    return path.resolve().is_relative_to(folder.resolve())


def read_checkpoint_state(folder: Path, hint: str, prefix: str = "") -> Any:
    """The `CheckpointState` of a folder's `checkpoint` file, read only as a regular file of at
    most 1 MB inside the folder (`Folder.read_bytes`: never through a link, never a FIFO or a
    device); ModelFormatError "PREFIX FOLDER: cannot read ...; HINT" else."""
    from google.protobuf import text_format
    from tensorflow.python.checkpoint.checkpoint_management import CheckpointState

    try:
        with Folder(folder.resolve()) as opened:  # the folder the user named, a link to it followed
            data = opened.read_bytes("checkpoint", 1 << 20)
        return text_format.Parse(data.decode("utf-8"), CheckpointState())
    except (OSError, ValueError, text_format.ParseError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ModelFormatError(
            f"{prefix}{folder}: cannot read its 'checkpoint' file: {why}{hint}"
        ) from None


def checkpoint_files(prefix: Path) -> list[Path]:
    """The files of the TF1 checkpoint `prefix`: its .meta, .index and .data-* files."""
    return [
        Path(f"{prefix}.meta"),
        Path(f"{prefix}.index"),
        *prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"),
    ]


def files_inside(folder: Path, files: list[Path], prefix: str = "") -> None:
    """ModelFormatError unless each of `files` that is there is a regular file inside `folder`
    (a link that stays inside it is one): a trainer writes nothing else, and a link out of the
    folder would read another run's weights, a FIFO block, a device act on being opened."""
    for f in files:
        if not os.path.lexists(f):
            continue
        if not inside(f, folder):
            raise ModelFormatError(
                f"{prefix}{folder}: {f.name} links out of the folder; gatetrace reads a checkpoint's files only "
                "inside its folder: copy them in"
            )
        kind = stat.S_IFMT(os.stat(f).st_mode)
        if kind != stat.S_IFREG:
            raise ModelFormatError(
                f"{prefix}{folder}: {f.name} is {'a folder' if kind == stat.S_IFDIR else 'not a regular file'}; "
                "a checkpoint's files are regular files: remove it, or copy the run's files into a new folder"
            )


def in_folder(folder: Path, named: str) -> tuple[Path, str | None]:
    """The checkpoint a state file names, inside `folder`, and a note if it named one outside
    (published checkpoints carry their trainer's absolute paths: the same name inside the
    folder is taken, as a user who moved it would)."""
    candidate = folder / named
    if Path(named).is_absolute() or not inside(candidate, folder):
        candidate = folder / Path(named).name
        return (
            candidate,
            f"its 'checkpoint' file names {named}, outside {folder}: read {candidate.name} in the folder instead",
        )
    return candidate, None


def _state_prefix(folder: Path) -> tuple[str, str | None]:
    """The checkpoint prefix a folder's `checkpoint` state file names, inside the folder
    (`in_folder`), and a note if the file named one outside it. Nothing outside the folder is
    read because the file names it."""
    named = read_checkpoint_state(
        folder, "; point at a checkpoint prefix P with P.meta beside it instead"
    ).model_checkpoint_path
    if not named:
        raise ModelFormatError(
            f"{folder}: its 'checkpoint' file names no checkpoint; point at a checkpoint prefix P with P.meta beside it instead"
        )
    candidate, note = in_folder(folder, named)
    if not Path(f"{candidate}.index").is_file() and not Path(f"{candidate}.meta").is_file():
        where = (
            f"names {named}, outside the folder, and the folder holds no {candidate.name}"
            if note
            else f"names no checkpoint that exists ({named})"
        )
        raise ModelFormatError(
            f"{folder}: its 'checkpoint' file {where}; point at a checkpoint prefix P with P.meta beside it instead"
        )
    files_inside(folder, checkpoint_files(candidate))
    return str(candidate), note


def _checkpoint_prefix(path: Path) -> tuple[str, str | None] | None:
    """The checkpoint prefix `path` names, if it names one, with a note on how it was found."""
    if path.is_dir() and (path / "checkpoint").is_file():
        return _state_prefix(path)
    if path.suffix == ".meta" and path.is_file():
        return str(path)[: -len(".meta")], None
    if Path(str(path) + ".meta").is_file():
        return str(path), None
    return None


@dataclass(frozen=True)
class LoadPlan:
    """What loading a graph runs, taken from the meta graph exactly as TensorFlow's loaders
    take it, then run by gatetrace itself (never by a loader that could build other ops).

    `restore_op` runs with `filename_tensor` fed the model's own checkpoint path, then
    `captures_op` likewise (the variables a TF2 signature captures that the restore op does
    not fill, see `_restore_captures`); `init_op` (a SavedModel's `__saved_model_init_op`
    signature, else its main op, else its legacy init op) with `asset_feeds`, the paths of
    the model's asset files.
    """

    restore_op: str | None = None
    filename_tensor: str | None = None
    checkpoint: str | None = None
    init_op: str | None = None
    asset_feeds: tuple[tuple[str, str], ...] = ()
    captures_op: str | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(op for op in (self.restore_op, self.captures_op, self.init_op) if op)

    def problems(self, graph: tf.Graph) -> list[str]:
        """Every op loading would run that is not allowed (see `tracer.load.safety`)."""
        restoring = [op for op in (self.restore_op, self.captures_op) if op]
        if restoring and self.filename_tensor is None:  # as no Saver or SavedModel leaves it
            return [f"{restoring[0]} (a restore op not fed the checkpoint's path)"]
        found = [
            p for op in restoring for p in restore_problems(graph, op, self.filename_tensor or "")
        ]
        found += unsafe_ops(graph, [self.init_op]) if self.init_op else []
        return sorted(set(found))

    def run(self, session: v1.Session, source: str, allow_unsafe_ops: bool) -> None:
        """Check (unless `allow_unsafe_ops`), then restore the variables and run the init op."""
        if not allow_unsafe_ops:
            what = "restoring its variables" + (" and running its init op" if self.init_op else "")
            refuse(self.problems(session.graph), what, source)
        if self.restore_op:
            _check_checkpoint_holds(session.graph, self, source)
            session.run(self.restore_op, {self.filename_tensor: self.checkpoint})
        if self.captures_op:
            session.run(self.captures_op, {self.filename_tensor: self.checkpoint})
        if self.init_op:
            session.run(self.init_op, dict(self.asset_feeds))


def _saver_plan(saver, checkpoint: str) -> dict:
    """LoadPlan fields for a Saver's restore op (none when the graph has no Saver)."""
    if saver is None or not saver.saver_def.restore_op_name:
        return {}
    return {
        "restore_op": saver.saver_def.restore_op_name,
        "filename_tensor": saver.saver_def.filename_tensor_name,
        "checkpoint": checkpoint,
    }


def _check_checkpoint_holds(graph: tf.Graph, plan: LoadPlan, source: str) -> None:
    """Name, before anything runs, the variables the restore op reads that the checkpoint lacks
    or holds in another shape (a checkpoint of another model, or an object-based one)."""
    try:
        stored = dict(tf.train.list_variables(plan.checkpoint))
    except Exception as err:
        raise ModelFormatError(
            f"{source}: cannot restore the variables from checkpoint {plan.checkpoint}: {error_line(err)} "
            "(are its .index and .data files complete?)"
        ) from None
    missing, mismatched = [], []
    for op in restore_ops(graph, plan.restore_op) if plan.restore_op else ():
        names, slices = (
            (_const(op.inputs[1]), _const(op.inputs[2])) if op.type == "RestoreV2" else (None, None)
        )
        for k, name in enumerate(names or ()):
            name = name.decode()
            want = _restored_shape(op.outputs[k])
            if name not in stored:
                missing.append(name)
            elif (
                not (slices and slices[k])
                and want.rank is not None
                and not want.is_compatible_with(stored[name])
            ):
                mismatched.append(
                    f"{name} (graph {want.as_list()}, checkpoint {list(stored[name])})"
                )
    if missing or mismatched:
        what = (
            [
                f"lacks {len(missing)} variable{'s' * (len(missing) != 1)} the graph restores: {', '.join(missing[:6])}"
            ]
            if missing
            else []
        )
        what += (
            [f"holds {len(mismatched)} in another shape: {', '.join(mismatched[:4])}"]
            if mismatched
            else []
        )
        hint = (
            " (it is object-based, as tf.train.Checkpoint and Keras write them)"
            if any("/.ATTRIBUTES/" in n for n in stored)
            else ""
        )
        raise ModelFormatError(
            f"{source}: the checkpoint {plan.checkpoint} {' and '.join(what)}{hint}; "
            "it was written by another model or another version of it: point at the checkpoint saved with this graph"
        )


def _restored_shape(tensor: tf.Tensor) -> tf.TensorShape:
    """The shape of the variable a restored tensor is assigned to (unknown if it is not assigned)."""
    for consumer in tensor.consumers():
        if consumer.type == "Identity":
            shape = _restored_shape(consumer.outputs[0])
            if shape.rank is not None:
                return shape
        if consumer.type in ("Assign", "AssignVariableOp") and consumer.inputs[1] is tensor:
            target = consumer.inputs[0]
            if target.dtype == tf.resource:
                return (
                    tf.TensorShape(target.op.get_attr("shape"))
                    if target.op.type == "VarHandleOp"
                    else tf.TensorShape(None)
                )
            return target.shape
    return tf.TensorShape(None)


def _const(tensor: tf.Tensor) -> list | None:
    """The value of a Const tensor, as a list (None for anything else)."""
    if tensor.op.type != "Const":
        return None
    return tf.make_ndarray(tensor.op.get_attr("value")).tolist()


@contextmanager
def _closed_if_it_fails(session: v1.Session, failed: Callable[[str], str]) -> Iterator[None]:
    """Close `session` if loading fails: a GatetraceError goes on as it is, any other error as
    the ModelFormatError `failed(TensorFlow's line)`."""
    try:
        yield
    except GatetraceError:
        session.close()
        raise
    except Exception as err:
        session.close()
        raise ModelFormatError(failed(error_line(err))) from err


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

    with _closed_if_it_fails(session, failed):
        with graph.as_default():
            plan = LoadPlan(
                **_saver_plan(v1.train.import_meta_graph(meta_graph, clear_devices=True), prefix)
            )
        _refuse_gpu_only_in_functions(graph, source)
        if restore and not _runs_cudnn(graph):  # else restored once its cuDNN ops are replaced
            plan.run(session, source, allow_unsafe_ops)
    return _on_the_cpu(
        Model(
            graph, session, source, "checkpoint", allow_unsafe_ops=allow_unsafe_ops, load_plan=plan
        ),
        restore,
    )


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
        **_saver_plan(saver, str(path / "variables" / "variables")),
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


def _load_saved_model(
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
    session = v1.Session(graph=graph, config=UNOPTIMIZED if tf2 else None)
    with _closed_if_it_fails(session, lambda line: f"{source}: cannot read SavedModel: {line}"):
        with graph.as_default():
            plan = _saved_model_plan(
                path, meta, graph, v1.train.import_meta_graph(meta, clear_devices=True), source
            )
        _refuse_gpu_only_in_functions(graph, source)
        if tf2:
            plan = _restore_captures(graph, saved, signature, plan)
            _check_restored(graph, meta.signature_def[signature], plan, source, signature)
        if restore and not _runs_cudnn(graph):  # else restored once its cuDNN ops are replaced
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
        session_config=UNOPTIMIZED if tf2 else None,
    )
    return _on_the_cpu(model, restore)


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
    _refuse_gpu_only_in_functions(graph, source)
    return _on_the_cpu(
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
        model = _load_saved_model(p, tag, signature, source, restore, allow_unsafe_ops)
        if not custom:
            return model
        traced = (
            f"its keras_metadata.pb names {listing(custom, 3)}: recorded through the SavedModel's "
            "traced functions and variables instead, which need no Python code of the model and run none"
        )
        return replace(model, notes=(*model.notes, traced))
    found = _checkpoint_prefix(p)
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

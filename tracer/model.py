"""Loading a model: a TF1 checkpoint, a SavedModel, a frozen GraphDef, a Keras file, or a live session.

`load_model(path)` returns a `Model`: a graph with its weights in a session, ready for
`find_cells` and `Session.run`. The format is told from what is on disk:

    P with P.meta beside it (or P.meta itself)     checkpoint: import meta graph, restore
    a directory holding a `checkpoint` file        its latest checkpoint
    a directory holding saved_model.pb             SavedModel, TF1 loader, tag `serve`
    a file ending in .pb                           frozen GraphDef: weights are Consts
    .keras, .h5, a folder with keras_metadata.pb   Keras: a `tracer.keras_layers.KerasModel`

Nothing in the graph runs before `tracer.safety` has checked it: the ops that restoring
variables (and a SavedModel's init op) would execute must all be on the allowlist,
unless `allow_unsafe_ops`. With `restore=False` nothing runs at all (for `inspect`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from recorders.errors import ModelFormatError, UnsafeGraphError
from tracer._tf import tf, v1
from tracer.keras_layers import KerasModel, is_keras_file, load_keras
from tracer.safety import RESTORE_OPS, check

__all__ = ["Model", "load_model", "from_session", "FORMATS"]

FORMATS = (
    "a checkpoint prefix P with P.meta beside it, a directory holding a 'checkpoint' file, "
    "a SavedModel directory (saved_model.pb), a frozen GraphDef .pb, or a Keras .keras/.h5 file"
)


@dataclass
class Model:
    """A graph, the session that holds its weights, and where it came from.

    format is `checkpoint`, `savedmodel`, `frozen` or `session`. A Model made by
    `load_model` owns its session: use it as a context manager, or call `close()`.
    `load_ops` are the ops that loading runs (restore, init); `allow_unsafe_ops` turns
    off the allowlist check before running the graph (see `tracer.safety`).
    """

    graph: tf.Graph
    session: v1.Session
    source: str
    format: str
    owns_session: bool = True
    allow_unsafe_ops: bool = False
    load_ops: tuple[str, ...] = ()

    def close(self) -> None:
        if self.owns_session and not self.session._closed:
            self.session.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def from_session(session: v1.Session, source: str = "live session", allow_unsafe_ops: bool = True) -> Model:
    """Wrap a live `tf.compat.v1.Session`; the caller keeps ownership of it.

    The graph is the caller's own code, so it is trusted unless `allow_unsafe_ops=False`.
    """
    return Model(session.graph, session, source, "session", owns_session=False, allow_unsafe_ops=allow_unsafe_ops)


_NOISE = ("Graph execution error", "Detected at node", "Node:", "File ", "[[", "Stack trace", "Original stack trace", "Errors may have")


def _first_line(err: Exception) -> str:
    """The informative line of an error: TensorFlow's own message, without its stack notes."""
    text = err.message if isinstance(err, tf.errors.OpError) else str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith(_NOISE)]
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


def _checkpoint_prefix(path: Path) -> str | None:
    """The checkpoint prefix `path` names, if it names one."""
    if path.is_dir() and (path / "checkpoint").is_file():
        prefix = tf.train.latest_checkpoint(str(path))
        if prefix is None:
            raise ModelFormatError(
                f"{path}: its 'checkpoint' file names no checkpoint that exists; "
                "point at a checkpoint prefix P with P.meta beside it instead"
            )
        return prefix
    if path.suffix == ".meta" and path.is_file():
        return str(path)[: -len(".meta")]
    if Path(str(path) + ".meta").is_file():
        return str(path)
    return None


def _load_checkpoint(prefix: str, source: str, restore: bool, allow_unsafe_ops: bool) -> Model:
    meta = prefix + ".meta"
    if not os.path.isfile(meta):
        raise ModelFormatError(f"{source}: checkpoint {prefix} has no {meta} beside it; gatetrace needs the meta graph")
    graph = tf.Graph()
    session = v1.Session(graph=graph)
    load_ops: tuple[str, ...] = ()
    meta_graph = _read_meta_graph(meta, source)
    try:
        with graph.as_default():
            saver = v1.train.import_meta_graph(meta_graph, clear_devices=True)
            if saver is not None:
                load_ops = (saver.saver_def.restore_op_name,)
                if restore:
                    if not allow_unsafe_ops:
                        check(graph, load_ops, "restoring its variables", source, RESTORE_OPS)
                    saver.restore(session, prefix)
    except UnsafeGraphError:
        session.close()
        raise
    except Exception as err:
        session.close()
        raise ModelFormatError(
            f"{source}: cannot restore the variables from checkpoint {prefix}: {_first_line(err)} "
            "(are its .index and .data files complete?)"
        ) from err
    return Model(graph, session, source, "checkpoint", allow_unsafe_ops=allow_unsafe_ops, load_ops=load_ops)


def _saved_model_tags(path: Path) -> list[str]:
    try:
        from tensorflow.python.tools import saved_model_utils

        return [",".join(sorted(tags)) for tags in saved_model_utils.get_saved_model_tag_sets(str(path))]
    except Exception:
        return []


def _saved_model_graph(path: Path, tag: str, graph: tf.Graph) -> tuple[str, ...]:
    """Import the meta graph tagged `tag` into `graph` without running anything; return
    the ops that loading it runs (restore, init). Raises LookupError if no graph has the tag."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    if (path / "saved_model.pb").is_file():
        proto.ParseFromString((path / "saved_model.pb").read_bytes())
    else:
        from google.protobuf import text_format

        text_format.Parse((path / "saved_model.pbtxt").read_text(), proto)
    metas = [m for m in proto.meta_graphs if tag in m.meta_info_def.tags]
    if not metas:
        raise LookupError(tag)
    with graph.as_default():
        saver = v1.train.import_meta_graph(metas[0], clear_devices=True)
    ops = [saver.saver_def.restore_op_name] if saver is not None else []
    for key in ("saved_model_main_op", "legacy_init_op"):
        ops += [graph.as_graph_element(n).name for n in graph.get_collection(key) if isinstance(n, str)]
        ops += [n.name for n in graph.get_collection(key) if not isinstance(n, str)]
    return tuple(ops)


def _load_saved_model(path: Path, tag: str, source: str, restore: bool, allow_unsafe_ops: bool) -> Model:
    graph = tf.Graph()
    session = v1.Session(graph=graph)
    try:
        if not restore:  # the graph only: nothing runs
            return Model(graph, session, source, "savedmodel", load_ops=_saved_model_graph(path, tag, graph))
        if not allow_unsafe_ops:  # check on a scratch import; the loader imports, restores and inits in one go
            scratch = tf.Graph()
            check(scratch, _saved_model_graph(path, tag, scratch), "loading it (restoring variables, running its init op)", source, RESTORE_OPS)
        with graph.as_default():
            v1.saved_model.loader.load(session, [tag], str(path))
    except UnsafeGraphError:
        session.close()
        raise
    except Exception as err:
        session.close()
        tags = _saved_model_tags(path)
        if tags and tag not in {t for ts in tags for t in ts.split(",")}:
            raise ModelFormatError(
                f"{source}: SavedModel has no meta graph tagged {tag!r}; its tag sets are "
                f"{', '.join(repr(t) for t in tags)}: choose one with --tag"
            ) from err
        raise ModelFormatError(f"{source}: cannot read SavedModel: {_first_line(err)}") from err
    return Model(graph, session, source, "savedmodel", allow_unsafe_ops=allow_unsafe_ops)


def _load_frozen(path: Path, source: str, allow_unsafe_ops: bool) -> Model:
    graph_def = v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
        graph = tf.Graph()
        with graph.as_default():
            tf.import_graph_def(graph_def, name="")
    except Exception as err:
        raise ModelFormatError(
            f"{source}: cannot read it as a frozen GraphDef: {_first_line(err)}; expected {FORMATS}"
        ) from err
    return Model(graph, v1.Session(graph=graph), source, "frozen", allow_unsafe_ops=allow_unsafe_ops)


def load_model(
    path: str | os.PathLike, tag: str = "serve", *, restore: bool = True, allow_unsafe_ops: bool = False
) -> Model | KerasModel:
    """Load the model at `path` (see the module docstring for the formats and the checks).

    `restore=False` loads the graph only, running nothing (enough to find cells). A Keras
    file (`.keras`, `.h5`, a SavedModel folder with keras_metadata.pb) gives a
    `tracer.keras_layers.KerasModel` instead.
    """
    source = str(path)
    p = Path(path)
    if is_keras_file(p):
        return load_keras(p, allow_unsafe_ops=allow_unsafe_ops)
    if p.is_dir() and ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()):
        return _load_saved_model(p, tag, source, restore, allow_unsafe_ops)
    prefix = _checkpoint_prefix(p)
    if prefix is not None:
        return _load_checkpoint(prefix, source, restore, allow_unsafe_ops)
    if p.is_file() and p.suffix == ".pb":
        return _load_frozen(p, source, allow_unsafe_ops)
    if not p.exists():
        raise ModelFormatError(f"model not found: {source} does not exist (and neither does {source}.meta); expected {FORMATS}")
    raise ModelFormatError(f"{source} is in no format gatetrace reads; expected {FORMATS}")

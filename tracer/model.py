"""Loading a model: a TF1 checkpoint, a SavedModel, a frozen GraphDef, or a live session.

`load_model(path)` returns a `Model`: a graph with its weights in a session, ready for
`find_cells` and `Session.run`. The format is told from what is on disk:

    P with P.meta beside it (or P.meta itself)   checkpoint: import meta graph, restore
    a directory holding a `checkpoint` file      its latest checkpoint
    a directory holding saved_model.pb           SavedModel, TF1 loader, tag `serve`
    a file ending in .pb                         frozen GraphDef: weights are Consts
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from recorders.errors import ModelFormatError
from tracer._tf import tf, v1

__all__ = ["Model", "load_model", "from_session", "FORMATS"]

FORMATS = (
    "a checkpoint prefix P with P.meta beside it, a directory holding a 'checkpoint' file, "
    "a SavedModel directory (saved_model.pb), or a frozen GraphDef .pb"
)


@dataclass
class Model:
    """A graph, the session that holds its weights, and where it came from.

    format is `checkpoint`, `savedmodel`, `frozen` or `session`. A Model made by
    `load_model` owns its session: use it as a context manager, or call `close()`.
    """

    graph: tf.Graph
    session: v1.Session
    source: str
    format: str
    owns_session: bool = True

    def close(self) -> None:
        if self.owns_session and not self.session._closed:
            self.session.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def from_session(session: v1.Session, source: str = "live session") -> Model:
    """Wrap a live `tf.compat.v1.Session`; the caller keeps ownership of it."""
    return Model(session.graph, session, source, "session", owns_session=False)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


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


def _load_checkpoint(prefix: str, source: str) -> Model:
    meta = prefix + ".meta"
    if not os.path.isfile(meta):
        raise ModelFormatError(f"{source}: checkpoint {prefix} has no {meta} beside it; gatetrace needs the meta graph")
    graph = tf.Graph()
    session = v1.Session(graph=graph)
    try:
        with graph.as_default():
            saver = v1.train.import_meta_graph(meta, clear_devices=True)
            if saver is not None:
                saver.restore(session, prefix)
    except Exception as err:
        session.close()
        raise ModelFormatError(f"{source}: cannot read checkpoint {prefix}: {_first_line(err)}") from err
    return Model(graph, session, source, "checkpoint")


def _saved_model_tags(path: Path) -> list[str]:
    try:
        from tensorflow.python.tools import saved_model_utils

        return [",".join(sorted(tags)) for tags in saved_model_utils.get_saved_model_tag_sets(str(path))]
    except Exception:
        return []


def _load_saved_model(path: Path, tag: str, source: str) -> Model:
    graph = tf.Graph()
    session = v1.Session(graph=graph)
    try:
        with graph.as_default():
            v1.saved_model.loader.load(session, [tag], str(path))
    except Exception as err:
        session.close()
        tags = _saved_model_tags(path)
        if tags and tag not in {t for ts in tags for t in ts.split(",")}:
            raise ModelFormatError(
                f"{source}: SavedModel has no meta graph tagged {tag!r}; its tag sets are "
                f"{', '.join(repr(t) for t in tags)}: choose one with --tag"
            ) from err
        raise ModelFormatError(f"{source}: cannot read SavedModel: {_first_line(err)}") from err
    return Model(graph, session, source, "savedmodel")


def _load_frozen(path: Path, source: str) -> Model:
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
    return Model(graph, v1.Session(graph=graph), source, "frozen")


def load_model(path: str | os.PathLike, tag: str = "serve") -> Model:
    """Load the model at `path` (see the module docstring for the formats)."""
    source = str(path)
    p = Path(path)
    if p.is_dir() and ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()):
        return _load_saved_model(p, tag, source)
    prefix = _checkpoint_prefix(p)
    if prefix is not None:
        return _load_checkpoint(prefix, source)
    if p.is_file() and p.suffix == ".pb":
        return _load_frozen(p, source)
    if not p.exists():
        raise ModelFormatError(f"model not found: {source} does not exist (and neither does {source}.meta); expected {FORMATS}")
    raise ModelFormatError(f"{source} is in no format gatetrace reads; expected {FORMATS}")

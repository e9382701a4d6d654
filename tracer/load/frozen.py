"""Loading a frozen GraphDef (`.pb`): a graph whose weights are constants, checked before it is
imported (`tracer.load.import_check`); nothing is restored.
"""

from __future__ import annotations

from pathlib import Path

from recorders.errors import ModelFormatError
from tracer._tf import tf, v1
from tracer.load.formats import FORMATS, LoadRequest
from tracer.load.import_check import check_before_import
from tracer.load.loaded import FETCHING, Model, error_line
from tracer.load.rebuild import refuse_gpu_only_in_functions, rewritten

__all__ = ["read"]


def read(path: Path, source: str, request: LoadRequest) -> Model | None:
    """The frozen graph in the file `path`, or None: not a `.pb` file."""
    if not (path.is_file() and path.suffix == ".pb"):
        return None
    return _load_frozen(path, source, request.restore, request.allow_unsafe_ops)


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
    return rewritten(
        Model(
            graph,
            v1.Session(graph=graph, config=FETCHING),
            source,
            "frozen",
            allow_unsafe_ops=allow_unsafe_ops,
        ),
        restore,
    )

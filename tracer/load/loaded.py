"""A loaded model: `Model` (a graph, the session holding its weights, where it came from)
and the `LoadPlan` of what loading runs (a Saver's restore op, a SavedModel's init op),
checked by `tracer.load.safety` and run by gatetrace itself; `from_session` wraps a live
session. `error_line` is the one line of a TensorFlow error worth showing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from recorders.errors import GatetraceError, ModelFormatError
from tracer._tf import tf, v1
from tracer.load.safety import refuse, restore_ops, restore_problems, unsafe_ops

__all__ = [
    "Model",
    "LoadPlan",
    "from_session",
    "error_line",
    "saver_plan",
    "closed_if_it_fails",
    "FETCHING",
]

# Sessions gatetrace loads a graph into, to fetch its inner tensors: Grappler's remapper off.
# It fuses ops it recognises into one kernel (oneDNN's Swish, x * sigmoid(x), among them) and
# the Sigmoid being fetched is then "not found in the Graph"; TensorFlow's own Session.run of
# that tensor fails the same way. Its cost: bench/remapper.py.
FETCHING = v1.ConfigProto()
FETCHING.graph_options.rewrite_options.remapping = FETCHING.graph_options.rewrite_options.OFF


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
    session_config: Any = field(default_factory=lambda: FETCHING)
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


@dataclass(frozen=True)
class LoadPlan:
    """What loading a graph runs, taken from the meta graph exactly as TensorFlow's loaders
    take it, then run by gatetrace itself (never by a loader that could build other ops).

    `restore_op` runs with `filename_tensor` fed the model's own checkpoint path, then
    `captures_op` likewise (the variables a TF2 signature captures that the restore op does
    not fill, see `tracer.load.saved_model`); `init_op` (a SavedModel's `__saved_model_init_op`
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


def saver_plan(saver, checkpoint: str) -> dict:
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
def closed_if_it_fails(session: v1.Session, failed: Callable[[str], str]) -> Iterator[None]:
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

"""The runtime that runs `.tflite` files, and the flatbuffer schema that reads them.

Two packages ship TensorFlow Lite's kernels, its Python interpreter and the schema's
generated reader (`schema_py_generated`, the flatbuffers object API):

    litert       LiteRT (`ai_edge_litert`, the `lite` extra): the runtime TensorFlow now points
                 to; it loads in a fraction of a second, without TensorFlow
    tensorflow   `tf.lite`, part of TensorFlow, which TensorFlow 2.21 marks as deprecated

`runtime()` is LiteRT where it is installed, TensorFlow's otherwise; the environment variable
GATETRACE_LITE_RUNTIME (`litert` or `tensorflow`) picks one. Either is used the same way
(`LiteRuntime`): `schema()` is its reader, `parse(content)` a file's model as the runtime reads
it (`as_the_runtime_reads`), `interpreter(content)` runs one with builtin kernels only (no
default delegate: the file's ops were checked to be builtins) and every tensor kept after a
run, so that what each op read and returned can be read back.

Every field the schema makes optional is absent in some real file (converters of 2020-2021
leave a scalar's shape out, for one). `as_the_runtime_reads` sets each one gatetrace reads to
what the runtime reads in its place, so that no reader of the model meets an absent field:

    a tensor's shape            absent: a scalar, []
    an op's inputs, outputs     absent: none
    an op's options             absent, or a table of another type than the op's: the op's
                                own, every field its default (the runtime's zero-filled
                                parameters: a WHILE's cond and body are then subgraph 0)
    a subgraph's tensors, ops,  absent: none
    inputs and outputs
    the model's buffers,        absent: none
    operator codes, subgraphs,
    signatures, a signature's
    inputs and outputs
    a signature's tensor name   absent: empty

and leaves the others as the object API reads them, each read where it is used as the
runtime reads it: an operator code's builtin number the larger of `builtin_code` and
`deprecated_builtin_code` (an absent one is 0; `tracer.load.tflite_check.op_name`), its
version 1; a tensor's buffer 0 (the empty one), its quantization None (none), its name None
(none), its shape signature None (its shape: a static one); a subgraph's name None.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Any

import numpy as np

from recorders.errors import ModelFormatError, install_hint

__all__ = [
    "LiteRuntime",
    "RUNTIMES",
    "ENVIRONMENT",
    "runtime",
    "imports_tensorflow",
    "as_the_runtime_reads",
    "bytes_read",
]

ENVIRONMENT = "GATETRACE_LITE_RUNTIME"


@dataclass(frozen=True)
class LiteRuntime:
    """A package that runs `.tflite` files: `name` as GATETRACE_LITE_RUNTIME says it, its
    distribution on the package index, the module holding `Interpreter` and `OpResolverType`,
    the schema's generated reader, and what is imported before them (TensorFlow, quiet)."""

    name: str
    package: str
    module: str
    schema_module: str
    first: tuple[str, ...] = ()

    def schema(self) -> Any:
        """This runtime's `schema_py_generated` (what its package imports first, first)."""
        self._first()
        return importlib.import_module(self.schema_module)

    def parse(self, content: bytes) -> Any:
        """The model of a `.tflite` file's bytes (`schema_py_generated.ModelT`), every absent
        field gatetrace reads set as the runtime reads it (`as_the_runtime_reads`). A file
        whose parse would read more than twice its bytes (`bytes_read`: offsets that repeat,
        parsed in time and memory up to the square of its size) is ModelFormatError, before
        it is parsed; whatever a damaged flatbuffer raises is left to the caller."""
        fb = self.schema()
        root = fb.Model.GetRootAsModel(content, 0)
        if bytes_read(root, fb, 2 * len(content)) > 2 * len(content):
            raise ModelFormatError(
                "its flatbuffer's offsets reach the same bytes again and again: reading it whole "
                f"would read more than twice the {len(content):,} bytes it holds (a builder writes "
                "each table, vector and string once); convert the model again"
            )
        return as_the_runtime_reads(fb.ModelT.InitFromObj(root), fb)

    def interpreter(self, content: bytes) -> Any:
        """An interpreter of the file `content`, its tensors not yet allocated: builtin
        kernels only, every tensor kept after a run."""
        self._first()
        runtime = importlib.import_module(self.module)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TensorFlow's notice that LiteRT succeeds it
            return runtime.Interpreter(
                model_content=content,
                experimental_preserve_all_tensors=True,
                experimental_op_resolver_type=runtime.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            )

    def _first(self) -> None:
        """Import what comes before any module of the package: TensorFlow through `tracer._tf`,
        whose start-up lines it shows only at the severities TF_CPP_MIN_LOG_LEVEL asks for (an
        import of `tensorflow.lite` itself would show them all)."""
        for name in self.first:
            importlib.import_module(name)

    def describe(self) -> str:
        """The package and its version (`ai-edge-litert 2.3.0`), as `inspect` and a
        recording's manifest say it."""
        try:
            return f"{self.package} {version(self.package)}"
        except PackageNotFoundError:  # built from source, not installed as a distribution
            return self.package

    def installed(self) -> bool:
        """Whether its package can be imported (found without importing it)."""
        return find_spec(self.module.partition(".")[0]) is not None


RUNTIMES = {
    "litert": LiteRuntime(
        "litert",
        "ai-edge-litert",
        "ai_edge_litert.interpreter",
        "ai_edge_litert.schema_py_generated",
    ),
    "tensorflow": LiteRuntime(
        "tensorflow",
        "tensorflow",
        "tensorflow.lite.python.interpreter",
        "tensorflow.lite.python.schema_py_generated",
        first=("tracer._tf",),  # TensorFlow imported once, its start-up lines quiet
    ),
}


def bytes_read(root: Any, fb: Any, limit: int) -> int:
    """The bytes the object API reads of a flatbuffer to parse the table `root` (of schema
    `fb`) whole: each table's offset to its vtable (4), each vector's and string's length (4)
    and elements, counted each time an offset reaches them. A builder writes each table,
    vector and string once, at an offset of its own, so that they add up to at most the
    file's size; offsets that repeat (many vectors reaching one table) add up to more, as
    much as the square of the file's size. The count stops at the first sum past `limit`
    (which it returns): it is bounded by `limit`, whatever the file."""
    read, todo = 0, [root]
    while todo and read <= limit:
        table = todo.pop()
        read += 4
        for accessor, kind, union in _fields(fb, type(table).__name__):
            if kind == "numbers":  # read as a view of the file's bytes: numpy's
                values = getattr(table, f"{accessor}AsNumpy")()
                read += 4 + (values.nbytes if isinstance(values, np.ndarray) else 0)
            elif kind == "vector":
                count = getattr(table, f"{accessor}Length")()
                read += 4 + 4 * count
                for j in range(count if read <= limit else 0):
                    read += _element(getattr(table, accessor)(j), todo)
            elif kind == "union":
                member = _member(fb, union, getattr(table, f"{accessor}Type")())
                found = getattr(table, accessor)()
                if member is not None and found is not None:
                    todo.append(member())
                    todo[-1].Init(found.Bytes, found.Pos)
            else:
                read += _element(getattr(table, accessor)(), todo)
    return read


def _element(value: Any, todo: list[Any]) -> int:
    """The bytes a string reads (its length and its bytes); a table is added to `todo`."""
    if isinstance(value, bytes):
        return 4 + len(value)
    if hasattr(value, "_tab"):
        todo.append(value)
    return 0


@functools.cache
def _fields(fb: Any, table: str) -> tuple[tuple[str, str, str], ...]:
    """The fields of the schema's table `table`, as its object API (`<table>T`) reads them:
    (accessor, kind, union) with kind `numbers` (a vector of numbers), `vector` (of tables
    or strings), `union` (a table of the union `union`: the one whose `...Creator` the
    object API calls for it) or `one` (a string or a table); numbers, which read no bytes
    of their own, are left out."""
    unpack = getattr(fb, f"{table}T")
    names = list(unpack._UnPack.__code__.co_names)
    defaults = vars(unpack())
    attrs = list(defaults)
    fields = []
    for attr in attrs:
        accessor = attr[0].upper() + attr[1:]
        if f"{attr}Type" in attrs:
            at = names.index(accessor)
            creator = [n for n in names[:at] if n.endswith("Creator")][-1]
            fields.append((accessor, "union", creator.removesuffix("Creator")))
        elif hasattr(getattr(fb, table), f"{accessor}AsNumpy"):
            fields.append((accessor, "numbers", ""))
        elif hasattr(getattr(fb, table), f"{accessor}Length"):
            fields.append((accessor, "vector", ""))
        elif defaults[attr] is None:  # a number's default is a number
            fields.append((accessor, "one", ""))
    return tuple(fields)


def _member(fb: Any, union: str, kind: int) -> Any:
    """The table class of member `kind` of the schema's union `union` (None: none)."""
    names = {v: k for k, v in vars(getattr(fb, union)).items() if not k.startswith("_")}
    return getattr(fb, names.get(kind, "NONE"), None) if kind else None


def as_the_runtime_reads(model: Any, fb: Any) -> Any:
    """`model` (a `ModelT` of schema `fb`), each absent field the module docstring lists set
    to what the runtime reads in its place; returned."""
    ints = functools.partial(np.asarray, dtype=np.int32)
    model.buffers = list(model.buffers or [])
    model.operatorCodes = list(model.operatorCodes or [])
    model.subgraphs = list(model.subgraphs or [])
    model.signatureDefs = list(model.signatureDefs or [])
    for signature in model.signatureDefs:
        signature.inputs, signature.outputs = (
            list(signature.inputs or []),
            list(signature.outputs or []),
        )
        for tensor in (*signature.inputs, *signature.outputs):
            tensor.name = tensor.name or b""
    for subgraph in model.subgraphs:
        subgraph.tensors = list(subgraph.tensors or [])
        subgraph.operators = list(subgraph.operators or [])
        subgraph.inputs = ints(subgraph.inputs if subgraph.inputs is not None else [])
        subgraph.outputs = ints(subgraph.outputs if subgraph.outputs is not None else [])
        for t in subgraph.tensors:
            t.shape = ints(t.shape if t.shape is not None else [])
        for op in subgraph.operators:
            op.inputs = ints(op.inputs if op.inputs is not None else [])
            op.outputs = ints(op.outputs if op.outputs is not None else [])
            if 0 <= op.opcodeIndex < len(model.operatorCodes):
                _own_options(op, model.operatorCodes[op.opcodeIndex], fb)
    return model


def _own_options(op: Any, code: Any, fb: Any) -> None:
    """An op's options as the runtime reads them: absent ones, or a table of another type
    than its op's (which the runtime does not read), are its op's own, every field its
    default. An op whose schema has no options table of its name is left as it is."""
    number = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
    name = _options_of(fb).get(number)
    if name is None:
        return
    kind = getattr(fb.BuiltinOptions, name)
    if op.builtinOptions is None or op.builtinOptionsType != kind:
        op.builtinOptionsType, op.builtinOptions = kind, getattr(fb, f"{name}T")()


@functools.cache
def _options_of(fb: Any) -> dict[int, str]:
    """The options table of each builtin operator whose table bears its name (WHILE:
    WhileOptions, STRIDED_SLICE: StridedSliceOptions, UNIDIRECTIONAL_SEQUENCE_LSTM:
    UnidirectionalSequenceLSTMOptions), by the operator's number."""
    tables = {
        name.lower(): name
        for name in vars(fb.BuiltinOptions)
        if not name.startswith("_") and hasattr(fb, f"{name}T")
    }
    return {
        number: tables[key]
        for op, number in vars(fb.BuiltinOperator).items()
        if not op.startswith("_") and (key := op.replace("_", "").lower() + "options") in tables
    }


@functools.cache
def _chosen(asked: str | None) -> LiteRuntime:
    if asked is None:
        return RUNTIMES["litert"] if RUNTIMES["litert"].installed() else RUNTIMES["tensorflow"]
    if asked not in RUNTIMES:
        raise ModelFormatError(
            f"{ENVIRONMENT}={asked!r}: expected one of {', '.join(RUNTIMES)}; unset it to use "
            "LiteRT where it is installed"
        )
    chosen = RUNTIMES[asked]
    if not chosen.installed():  # TensorFlow always is: gatetrace needs it
        raise ModelFormatError(
            f"{ENVIRONMENT}={asked}, but {chosen.package} is not installed: {install_hint('lite')} "
            f"adds it; or unset {ENVIRONMENT} to use TensorFlow's"
        )
    return chosen


def runtime() -> LiteRuntime:
    """The runtime `.tflite` files are read and run with (see the module docstring)."""
    return _chosen(os.environ.get(ENVIRONMENT) or None)


def imports_tensorflow() -> bool:
    """Whether the runtime `runtime()` chooses imports TensorFlow (TensorFlow's own); False
    where it refuses the choice, which it says when asked."""
    try:
        return "tracer._tf" in runtime().first
    except ModelFormatError:
        return False

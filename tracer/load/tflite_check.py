"""TensorFlow Lite files (`.tflite`) checked as data, before any interpreter sees them.

A `.tflite` file is a flatbuffer that TensorFlow Lite's interpreter maps and runs. gatetrace
parses it with its runtime's own schema (`schema_py_generated`, the flatbuffers object API:
`tracer.load.lite_runtime`), and hands it to the interpreter (`tracer.load.tflite`) only after
these checks, each refused in one line naming the file:

    the file     a regular file (a link the user named is followed; a FIFO or a device is
                 refused, never opened for reading), of at most 2 GiB (a flatbuffer's own
                 limit) and the memory budget, with TensorFlow Lite's identifier (`TFL3`)
    structure    parsed whole, inside a guard: an offset past the end, a vector longer than
                 the file, a table that does not parse is "damaged"
    tensors      every dimension non-negative, every tensor's bytes (its shape times its
                 type's size) and all of them together within the memory budget, every
                 buffer index in range, a constant's data exactly its bytes, no data stored
                 outside the flatbuffer
    ops          every op a builtin TensorFlow Lite knows (a custom op, whose code the file
                 does not hold and gatetrace never loads, is refused by its name; an operator
                 code no builtin has, by its number), its opcode, tensors, a WHILE loop's
                 subgraphs and a recurrent op's weights where they must be
    calls        the subgraphs' calls (WHILE cond and body, IF branches, CALL_ONCE) without
                 a cycle: a subgraph that calls itself again would recurse without end
    loops        every WHILE bounded as converters write it: its cond a counter compared
                 with a constant (`LESS`, alone or under `LOGICAL_AND`), the counter starting
                 from a constant and raised by a positive constant each iteration, for at
                 most as many iterations as the longest tensor the loop carries has rows
    shapes       what FILL, BROADCAST_TO and TILE make from constant shapes, within the
                 memory budget (the interpreter would allocate it when it runs)
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import ModelFormatError
from recorders.read.files import default_memory
from recorders.write.folder import Folder
from tracer.load.lite_runtime import runtime

__all__ = ["check_tflite", "checked", "op_name", "subgraph_fields", "RECURRENT", "LIMIT"]

LIMIT = 2**31  # a flatbuffer addresses at most 2 GiB
_INT32, _INT64 = 2, 4  # the schema's TensorType numbers
# bytes per element of each tensor type, by its schema name (STRING, RESOURCE, VARIANT: none)
_BYTES = {
    "FLOAT32": 4, "FLOAT16": 2, "BFLOAT16": 2, "FLOAT64": 8, "INT32": 4, "UINT32": 4,
    "INT64": 8, "UINT64": 8, "INT16": 2, "UINT16": 2, "INT8": 1, "UINT8": 1, "BOOL": 1,
    "COMPLEX64": 8, "COMPLEX128": 16, "INT4": 0.5, "UINT4": 0.5, "INT2": 0.25,
}  # fmt: skip
RECURRENT = (
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "LSTM",
    "RNN",
)


def check_tflite(path: Path, source: str, memory: int | None = None) -> Any:
    """The file's model (`schema_py_generated.ModelT`), once every check of the module
    docstring passed; ModelFormatError naming the first that did not."""
    return checked(path, source, memory)[1]


def checked(path: Path, source: str, memory: int | None = None) -> tuple[bytes, Any]:
    """The file's bytes, read once, and its model, once every check passed (`check_tflite`)."""
    fb = runtime().schema()
    resolved = Path(os.path.realpath(path))  # a link the user named is followed
    budget = default_memory() if memory is None else memory
    try:
        with Folder(resolved.parent) as folder:
            data = folder.read_bytes(resolved.name, min(LIMIT, budget))
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise ModelFormatError(
            f"{source}: cannot read it as a TensorFlow Lite file: {why}"
        ) from None
    if len(data) < 8 or not fb.Model.ModelBufferHasIdentifier(data, 0):
        raise ModelFormatError(
            f"{source}: not a TensorFlow Lite flatbuffer (no TFL3 identifier at byte 4); convert the model "
            "with tf.lite.TFLiteConverter, or give the model it was converted from"
        )
    try:
        model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    except Exception as err:  # a malformed flatbuffer fails anywhere in the generated reader
        raise ModelFormatError(
            f"{source}: the TensorFlow Lite flatbuffer is damaged ({type(err).__name__}: {err}); "
            "convert the model again"
        ) from None
    why = _problem(model, fb, budget)
    if why:
        raise ModelFormatError(f"{source}: {why}; nothing was loaded")
    return data, model


def _problem(model: Any, fb: Any, memory: int) -> str | None:
    """Why the parsed model is refused (None: it is not): see the module docstring."""
    types = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    buffers = model.buffers or []
    total = 0.0
    for code in model.operatorCodes or []:
        number = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
        if op_name(code, fb) in ("?", "PLACEHOLDER_FOR_GREATER_OP_CODES"):
            return (
                f"it holds operator code {number}, which is no builtin operator TensorFlow Lite knows (a custom "
                "op recoded?); convert the model with builtin ops only"
            )
        if op_name(code, fb) == "CUSTOM":
            name = code.customCode.decode(errors="replace") if code.customCode else "?"
            return (
                f"it holds the custom op {name}, whose code the file does not hold and gatetrace never loads; "
                "convert the model with builtin ops only"
            )
    for g, subgraph in enumerate(model.subgraphs or []):
        for k, t in enumerate(subgraph.tensors or []):
            shape = [int(d) for d in (t.shape if t.shape is not None else [])]
            name = t.name.decode(errors="replace") if t.name else f"#{k}"
            where = f"tensor {name} of subgraph {g}"
            if any(d < 0 for d in shape):
                return f"{where} has the shape {shape}, with a negative dimension"
            size = _BYTES.get(types.get(t.type, ""))
            nbytes = 0.0 if size is None else math.prod(shape) * size
            if nbytes > memory:
                return f"{where} claims {shape} ({nbytes:,.0f} bytes), more than the memory budget of {memory:,}"
            total += nbytes
            if not 0 <= t.buffer < max(len(buffers), 1):
                return f"{where} names buffer {t.buffer}, of {len(buffers)}"
            held = buffers[t.buffer] if buffers else None
            if held is not None and (held.offset or 0) > 1:
                return f"{where} keeps its data outside the flatbuffer (at byte {held.offset}), which gatetrace does not read"
            length = 0 if held is None or held.data is None else len(held.data)
            if length and size is not None and length != math.ceil(nbytes):
                return f"{where} is {shape} {types.get(t.type)} ({math.ceil(nbytes):,} bytes) but its buffer holds {length:,}"
    if total > memory:
        return f"its tensors claim {total:,.0f} bytes together, more than the memory budget of {memory:,}"
    return (
        _ops_problem(model, fb)
        or _calls_problem(model)
        or _loops_problem(model, fb)
        or _shapes_problem(model, fb, memory)
    )


def _calls_problem(model: Any) -> str | None:
    """Why the subgraphs' calls are refused: a cycle (None: there is none)."""
    calls = [
        sorted({n for op in subgraph.operators or [] for _, n in subgraph_fields(op)})
        for subgraph in model.subgraphs
    ]
    done: set[int] = set()
    for start in range(len(calls)):
        path, todo = [start], [iter(calls[start])]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                done.add(path.pop())
                todo.pop()
            elif nxt in path:
                cycle = " -> ".join(map(str, [*path[path.index(nxt) :], nxt]))
                return (
                    f"its subgraphs call each other in a cycle ({cycle}), which would recurse without end; "
                    "convert the model again"
                )
            elif nxt not in done:
                path.append(nxt)
                todo.append(iter(calls[nxt]))
    return None


def _constant(model: Any, subgraph: Any, tensor: int) -> Any:
    """The integer value a tensor of `subgraph` holds in the file (None: not a constant int)."""
    t = subgraph.tensors[tensor]
    kinds = {_INT32: np.int32, _INT64: np.int64}
    data = model.buffers[t.buffer].data if 0 <= t.buffer < len(model.buffers) else None
    if t.type not in kinds or data is None or not len(data):
        return None
    return np.frombuffer(bytes(data), kinds[t.type])


def _loops_problem(model: Any, fb: Any) -> str | None:
    """Why a WHILE loop is refused: one the file does not bound (see the module docstring)."""
    for g, subgraph in enumerate(model.subgraphs):
        for k, op in enumerate(subgraph.operators or []):
            if op_name(model.operatorCodes[op.opcodeIndex], fb) != "WHILE":
                continue
            options = op.builtinOptions
            rows = max(
                [
                    int(subgraph.tensors[t].shape[0])
                    for t in op.inputs
                    if len(subgraph.tensors[t].shape)
                ]
                or [1]
            )
            iterations = _iterations(model, fb, subgraph, op, options)
            if iterations is None:
                return (
                    f"the WHILE loop of op {k} of subgraph {g} is not bounded as converters bound a loop (its cond "
                    "a counter compared with a constant, raised by a constant each iteration); convert the model again"
                )
            if iterations < 1:
                return f"the WHILE loop of op {k} of subgraph {g} runs no iteration; convert the model again"
            if iterations > rows:
                return (
                    f"the WHILE loop of op {k} of subgraph {g} runs {iterations:,} iterations over tensors of at most "
                    f"{rows:,} rows; convert the model again"
                )
    return None


def _iterations(model: Any, fb: Any, caller: Any, op: Any, options: Any) -> int | None:
    """How many iterations a WHILE runs at most, where its cond compares a counter with a
    constant and its body raises the counter by a constant (None: it does not say)."""
    cond, body = (
        model.subgraphs[options.condSubgraphIndex],
        model.subgraphs[options.bodySubgraphIndex],
    )
    writers = {int(t): o for o in cond.operators or [] for t in o.outputs}
    inputs = [int(t) for t in cond.inputs]
    best = None
    todo = [int(cond.outputs[0])] if cond.outputs is not None and len(cond.outputs) else []
    while todo:
        o = writers.get(todo.pop())
        if o is None:
            continue
        kind = op_name(model.operatorCodes[o.opcodeIndex], fb)
        if kind == "LOGICAL_AND":
            todo += [int(t) for t in o.inputs]
            continue
        if kind not in ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"):
            continue
        a, b = (int(t) for t in o.inputs)
        if kind.startswith("GREATER"):
            a, b = b, a
        limit = _constant(model, cond, b)
        if a not in inputs or limit is None or limit.size != 1:
            continue
        n = inputs.index(a)
        start = _constant(model, caller, int(op.inputs[n]))
        step = _step(model, fb, body, n)
        if start is None or start.size != 1 or step is None or step <= 0:
            continue
        span = (
            int(limit.reshape(())) - int(start.reshape(())) + (1 if kind.endswith("EQUAL") else 0)
        )
        count = max(0, -(-span // step))
        best = count if best is None else min(best, count)
    return best


def _step(model: Any, fb: Any, body: Any, n: int) -> int | None:
    """What the body adds to its argument `n` each iteration: a constant (None: not so)."""
    if body.outputs is None or n >= len(body.outputs):
        return None
    out, argument = int(body.outputs[n]), int(body.inputs[n])
    for o in body.operators or []:
        if out in [int(t) for t in o.outputs]:
            if op_name(model.operatorCodes[o.opcodeIndex], fb) != "ADD":
                return None
            a, b = (int(t) for t in o.inputs[:2])
            added = _constant(model, body, b if a == argument else a)
            if argument not in (a, b) or added is None or added.size != 1:
                return None
            return int(added.reshape(()))
    return None


def _shapes_problem(model: Any, fb: Any, memory: int) -> str | None:
    """Why a tensor the interpreter would compute from constant shapes is refused: larger than
    the memory budget (None: none is)."""
    types = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    for g, subgraph in enumerate(model.subgraphs):
        for k, op in enumerate(subgraph.operators or []):
            kind = op_name(model.operatorCodes[op.opcodeIndex], fb)
            inputs = [int(t) for t in op.inputs]
            if kind == "FILL":
                dims = _constant(model, subgraph, inputs[0])
            elif kind == "BROADCAST_TO" and len(inputs) > 1:
                dims = _constant(model, subgraph, inputs[1])
            elif kind == "TILE" and len(inputs) > 1:
                times = _constant(model, subgraph, inputs[1])
                shape = [int(d) for d in subgraph.tensors[inputs[0]].shape]
                dims = (
                    None if times is None or len(shape) != times.size else np.multiply(shape, times)
                )
            else:
                continue
            if dims is None or not len(op.outputs):
                continue
            out = subgraph.tensors[int(op.outputs[0])]
            size = _BYTES.get(types.get(out.type, ""), 1)
            nbytes = math.prod(max(int(d), 0) for d in np.ravel(dims)) * size
            if nbytes > memory:
                return (
                    f"op {k} of subgraph {g}, a {kind}, makes a tensor of {[int(d) for d in np.ravel(dims)]} "
                    f"({nbytes:,.0f} bytes) when it runs, more than the memory budget of {memory:,}"
                )
    return None


def _ops_problem(model: Any, fb: Any) -> str | None:
    """Why an op of the model does not fit it (None: every op does): its opcode, the tensors it
    reads and writes, a WHILE loop's subgraphs and a recurrent op's weights must exist."""
    codes, subgraphs = model.operatorCodes or [], model.subgraphs or []
    if not subgraphs:
        return "it holds no subgraph"
    for g, subgraph in enumerate(subgraphs):
        count = len(subgraph.tensors or [])
        for k, op in enumerate(subgraph.operators or []):
            where = f"op {k} of subgraph {g}"
            if not 0 <= op.opcodeIndex < len(codes):
                return f"{where} names opcode {op.opcodeIndex}, of {len(codes)}"
            used = [
                *(op.inputs if op.inputs is not None else []),
                *(op.outputs if op.outputs is not None else []),
            ]
            if any(not -1 <= int(t) < count for t in used):
                return f"{where} names a tensor outside the {count} of its subgraph"
            kind = op_name(codes[op.opcodeIndex], fb)
            indices = [number for _, number in subgraph_fields(op)]
            if any(not 0 <= i < len(subgraphs) for i in indices):
                return f"{where}, a {kind}, names subgraphs {indices}, of {len(subgraphs)}"
            if kind in RECURRENT:
                at = 2 if "LSTM" in kind else 1
                inputs = list(op.inputs if op.inputs is not None else [])
                weights = (
                    subgraph.tensors[int(inputs[at])]
                    if len(inputs) > at and inputs[at] >= 0
                    else None
                )
                if weights is None or weights.shape is None or len(weights.shape) != 2:
                    return (
                        f"{where}, a {kind}, has no [units, inputs] weights where the op reads them"
                    )
    main = subgraphs[0]
    if any(
        not 0 <= int(t) < len(main.tensors or [])
        for t in (main.inputs if main.inputs is not None else [])
    ):
        return "its main subgraph names an input outside its tensors"
    return None


def subgraph_fields(op: Any) -> list[tuple[str, int]]:
    """The fields of an op's options that name a subgraph (a WHILE's cond and body, an IF's
    branches, a CALL_ONCE's init, ...: the schema's `...SubgraphIndex`, and a CALL's
    `subgraph`), with their numbers."""
    options = op.builtinOptions
    return [
        (attr, value)
        for attr, value in (vars(options).items() if options is not None else [])
        if (attr.endswith("SubgraphIndex") or attr == "subgraph") and isinstance(value, int)
    ]


def op_name(code: Any, fb: Any) -> str:
    """An operator code's builtin name (the larger of its two fields: the schema moved it)."""
    return _builtins(fb).get(max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0), "?")


@functools.cache
def _builtins(fb: Any) -> dict[int, str]:
    """The schema's builtin operators by number."""
    return {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}

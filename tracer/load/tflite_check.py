"""TensorFlow Lite files (`.tflite`) checked as data, before any interpreter sees them.

A `.tflite` file is a flatbuffer that TensorFlow Lite's interpreter maps and runs. gatetrace
parses it with its runtime's own schema (`schema_py_generated`, the flatbuffers object API:
`tracer.load.lite_runtime`, every optional field the file leaves out read as the runtime reads
it: an absent shape is a scalar's), and hands it to the interpreter (`tracer.load.tflite`) only after
these checks, each refused in one line naming the file:

    the file     a regular file (a link the user named is followed; a FIFO or a device is
                 refused, never opened for reading), of at most 2 GiB (a flatbuffer's own
                 limit) and the memory budget, with TensorFlow Lite's identifier (`TFL3`)
    structure    parsed whole, inside a guard: an offset past the end, a vector longer than
                 the file, a table that does not parse is "damaged"; offsets that reach the
                 same bytes again and again (a parse reading more than twice the file's
                 bytes: `tracer.load.lite_runtime.bytes_read`) are refused before it
    tensors      every dimension non-negative, every tensor's bytes (its shape times its
                 type's size) and all of them together within the memory budget, every
                 buffer index in range, a constant's data exactly its bytes, no data stored
                 outside the flatbuffer; an integer tensor's zero points codes of its type,
                 its positive finite scales normal float32 numbers by which every code's
                 value (scale x (code - zero point)) is a float32 number
    ops          every op a builtin TensorFlow Lite knows (a custom op, whose code the file
                 does not hold and gatetrace never loads, is refused by its name; an operator
                 code no builtin has, by its number), its opcode, tensors, a WHILE loop's
                 subgraphs and a recurrent op's weights where they must be
    calls        the subgraphs' calls (WHILE cond and body, IF branches, CALL_ONCE) without
                 a cycle: a subgraph that calls itself again would recurse without end
    loops        every WHILE bounded as converters write it: its cond a counter compared
                 with a limit (`LESS`, `LESS_EQUAL`, `GREATER`, `GREATER_EQUAL`, alone or
                 under `LOGICAL_AND`), the counter starting from a constant and raised by a
                 positive constant each iteration, for at most as many iterations as the
                 longest tensor the loop carries has rows (as the file declares them). The
                 limit is a constant, or a loop variable the body passes on unchanged (what
                 TensorFlow 2.2-2.4's converters wrote: `maximum_iterations`, or the
                 sequence's length a cond captured), as fixed as a constant: its value is
                 the constant it starts from, or a dimension of a tensor's shape (`SHAPE ->
                 STRIDED_SLICE`) read as the interpreter will hold it (an input's as it is
                 fed: as the file declares it; one a FILL, BROADCAST_TO, TILE or RANGE
                 makes, as it makes it; another's where the file fixes it; the rows of a
                 tensor the loop itself carries, where the file leaves them open until it
                 runs). A loop whose iterations the file does not bound is refused naming
                 what in the file gatetrace cannot read. TensorFlow Lite's WHILE kernel
                 copies all a loop carries at every iteration: a loop whose iterations
                 times the bytes it carries pass 64 times the memory budget is refused
                 (n iterations over a carried tensor of n rows copy n^2 rows)
    shapes       what FILL, BROADCAST_TO, TILE and RANGE make, within the memory budget
                 (the interpreter would allocate it when it runs): their sizes read from
                 constants and the integers the file computes from them and from the
                 shapes it holds (SHAPE, ADD, SUB, MUL, MAXIMUM, MINIMUM, PACK,
                 CONCATENATION, CAST, RESHAPE, SQUEEZE, EXPAND_DIMS), as its kernels compute
                 them
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import ModelFormatError
from recorders.read.files import default_memory
from recorders.write.folder import Folder
from tracer.load.lite_runtime import runtime

__all__ = ["check_tflite", "checked", "op_name", "subgraph_fields", "RECURRENT", "LIMIT"]

LIMIT = 2**31  # a flatbuffer addresses at most 2 GiB
_FLOAT32, _INT32, _INT64, _FLOAT64 = 0, 2, 4, 10  # the schema's TensorType numbers
# bytes per element of each tensor type, by its schema name (STRING, RESOURCE, VARIANT: none)
_BYTES = {
    "FLOAT32": 4, "FLOAT16": 2, "BFLOAT16": 2, "FLOAT64": 8, "INT32": 4, "UINT32": 4,
    "INT64": 8, "UINT64": 8, "INT16": 2, "UINT16": 2, "INT8": 1, "UINT8": 1, "BOOL": 1,
    "COMPLEX64": 8, "COMPLEX128": 16, "INT4": 0.5, "UINT4": 0.5, "INT2": 0.25,
}  # fmt: skip
# what a WHILE loop may copy, in memory budgets: its kernel copies all the loop carries at every
# iteration, so that a loop of n iterations over a sequence of n rows copies n^2 rows
_COPIED = 64
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
        model = runtime().parse(data)
    except ModelFormatError as err:  # its offsets repeat
        raise ModelFormatError(f"{source}: {err}; nothing was loaded") from None
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
            why = _quantisation_problem(t.quantization, types.get(t.type, ""))
            if why:
                return f"{where} {why}"
    if total > memory:
        return f"its tensors claim {total:,.0f} bytes together, more than the memory budget of {memory:,}"
    return (
        _ops_problem(model, fb)
        or _calls_problem(model)
        or _loops_problem(model, fb, memory)
        or _shapes_problem(model, fb, memory)
    )


def _codes(kind: str) -> tuple[int, int] | None:
    """The codes an integer tensor type holds (INT8: -128, 127; UINT4: 0, 15); None for
    another type."""
    match = re.fullmatch(r"(U?)INT(\d+)", kind)
    if match is None:
        return None
    bits = int(match[2])
    return (0, 2**bits - 1) if match[1] else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _quantisation_problem(q: Any, kind: str) -> str | None:
    """Why the quantisation of an integer tensor of type `kind` is refused (None: it is not).
    Its value is scale x (code - zero point), computed in float32 by TensorFlow Lite's
    kernels: a zero point is a code of the type (the kernels take it as one), and each
    scale, where it is a positive finite number (what another is, `tracer.find.lite`
    says), a normal float32 (the kernels multiply and divide scales in float32 and take
    the result's exponent with frexp: a denormal's reciprocal overflows) such that every
    code's value is a float32 number."""
    codes = _codes(kind)
    if q is None or codes is None:
        return None
    low, high = codes
    zeros = [int(z) for z in (q.zeroPoint if q.zeroPoint is not None else [])]
    outside = [z for z in zeros if not low <= z <= high]
    if outside:
        return (
            f"has the zero point {outside[0]}, which is no {kind.lower()} code ({low} to {high}): "
            "the file is damaged; convert the model again"
        )
    largest = float(np.finfo(np.float32).max)
    for n, scale in enumerate(float(v) for v in (q.scale if q.scale is not None else [])):
        if not (math.isfinite(scale) and scale > 0):
            continue
        zero = zeros[n] if n < len(zeros) else (zeros[0] if zeros else 0)
        span = max(high - zero, zero - low)
        if scale < float(np.finfo(np.float32).tiny) or scale * span > largest:
            return (
                f"has the quantisation scale {scale:g}, "
                + (
                    "a denormal float32 (below 1.18e-38), which TensorFlow Lite's float32 "
                    "products and quantized multipliers do not hold"
                    if scale < 1
                    else f"by which its {kind.lower()} codes stand for more than float32's largest number"
                )
                + "; a converter writes a normal float32 scale whose values are float32 numbers: "
                "convert the model again"
            )
    return None


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


def _constant(model: Any, subgraph: Any, tensor: int, floats: bool = False) -> Any:
    """The integer value a tensor of `subgraph` holds in the file (None: not a constant int;
    `floats`: a float32 or float64 one too)."""
    if not 0 <= tensor < len(subgraph.tensors):
        return None
    t = subgraph.tensors[tensor]
    kinds: dict[int, Any] = {_INT32: np.int32, _INT64: np.int64}
    if floats:
        kinds |= {_FLOAT32: np.float32, _FLOAT64: np.float64}
    data = model.buffers[t.buffer].data if 0 <= t.buffer < len(model.buffers) else None
    if t.type not in kinds or data is None or not len(data):
        return None
    return np.frombuffer(bytes(data), kinds[t.type])


def _scalar(value: Any) -> int | None:
    """The one integer of a constant (None: not one)."""
    return None if value is None or value.size != 1 else int(value.reshape(()))


def _name(subgraph: Any, tensor: int) -> str:
    t = subgraph.tensors[tensor] if 0 <= tensor < len(subgraph.tensors) else None
    return t.name.decode(errors="replace") if t is not None and t.name else f"tensor {tensor}"


def _loops_problem(model: Any, fb: Any, memory: int) -> str | None:
    """Why a WHILE loop is refused: one the file does not bound, or one that would copy more
    than `_COPIED` times the memory budget (see the module docstring)."""
    types = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    for g, subgraph in enumerate(model.subgraphs):
        made = {t: dims for _, t, dims in _made(model, fb, g).values()}
        held = {  # each tensor's shape as the interpreter holds it: as made, or as declared
            t: made.get(t, [int(d) for d in tensor.shape])
            for t, tensor in enumerate(subgraph.tensors)
        }
        for k, op in enumerate(subgraph.operators):
            if op_name(model.operatorCodes[op.opcodeIndex], fb) != "WHILE":
                continue
            where = f"the WHILE loop of op {k} of subgraph {g}"
            carried = [int(t) for t in op.inputs if t >= 0]
            rows = max([held[t][0] for t in carried if len(held[t])] or [1])
            iterations = _iterations(model, fb, g, op, rows)
            if isinstance(iterations, str):
                return (
                    f"gatetrace cannot read from the file how many iterations {where} runs: {iterations}; "
                    "it runs no loop the file does not bound (record the model the file was converted "
                    "from, if you have it)"
                )
            if iterations < 1:
                return f"{where} runs no iteration (its counter starts at or past its limit): there is no step to record"
            if iterations > rows:
                return (
                    f"{where} runs {iterations:,} iterations, more than the {rows:,} rows of the longest tensor "
                    "it carries (as the file declares them): its last iterations would read past its sequence"
                )
            nbytes = sum(
                math.prod(max(d, 0) for d in held[t])
                * _BYTES.get(types.get(subgraph.tensors[t].type, ""), 1)
                for t in carried
            )
            if iterations * nbytes > _COPIED * memory:
                return (
                    f"{where} runs {iterations:,} iterations, each copying the {nbytes:,.0f} bytes it carries "
                    f"(TensorFlow Lite's WHILE kernel copies what a loop carries at every iteration): "
                    f"{iterations * nbytes:,.0f} bytes, more than {_COPIED} times the memory budget of {memory:,}"
                )
    return None


def _iterations(model: Any, fb: Any, g: int, op: Any, rows: int) -> int | str:
    """How many iterations a WHILE of subgraph `g` runs at most, where its cond compares a
    counter with a limit and its body raises the counter by a constant (see the module
    docstring); what in the file does not say it, where none does."""
    caller, options = model.subgraphs[g], op.builtinOptions
    cond, body = (
        model.subgraphs[options.condSubgraphIndex],
        model.subgraphs[options.bodySubgraphIndex],
    )
    writers = {int(t): o for o in cond.operators for t in o.outputs}
    inputs = [int(t) for t in cond.inputs]
    best = None
    why = (
        "its cond compares no counter with a limit (LESS, LESS_EQUAL, GREATER or GREATER_EQUAL, "
        "alone or under LOGICAL_AND)"
    )
    todo, seen = [int(t) for t in cond.outputs[:1]], set()
    while todo:
        tensor = todo.pop()
        o = writers.get(tensor)
        if o is None or tensor in seen:
            continue
        seen.add(tensor)
        kind = op_name(model.operatorCodes[o.opcodeIndex], fb)
        if kind == "LOGICAL_AND":
            todo += [int(t) for t in o.inputs]
            continue
        if kind not in ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL") or len(o.inputs) != 2:
            why = (
                f"its cond answers with a {kind} ({_name(cond, tensor)}), where a bound is a LESS, "
                "LESS_EQUAL, GREATER or GREATER_EQUAL of a counter and a limit, alone or under LOGICAL_AND"
            )
            continue
        a, b = (int(t) for t in o.inputs)
        if kind.startswith("GREATER"):
            a, b = b, a
        n = inputs.index(a) if a in inputs else -1
        if not 0 <= n < len(op.inputs):
            why = f"its cond's {kind} compares {_name(cond, a)}, which is no loop variable, with a limit"
            continue
        limit = _limit(model, fb, g, op, cond, body, b, rows)
        start = _scalar(_constant(model, caller, int(op.inputs[n])))
        step = _step(model, fb, body, n)
        if isinstance(limit, str):
            why = limit
        elif start is None:
            why = f"its counter (loop variable {n}) starts from {_name(caller, int(op.inputs[n]))}, not a constant"
        elif step is None or step <= 0:
            why = f"its body does not raise its counter (loop variable {n}) by a positive constant each iteration"
        else:
            span = limit - start + (1 if kind.endswith("EQUAL") else 0)
            count = max(0, -(-span // step))
            best = count if best is None else min(best, count)
    return why if best is None else best


def _limit(
    model: Any, fb: Any, g: int, op: Any, cond: Any, body: Any, tensor: int, rows: int
) -> int | str:
    """The value of the limit `tensor` of a WHILE's cond (see the module docstring: a
    constant, or a loop variable the body passes on unchanged, from a constant or a dimension
    of a tensor's shape); what the file does not say of it, where it does not."""
    value = _scalar(_constant(model, cond, tensor))
    if value is not None:
        return value
    inputs = [int(t) for t in cond.inputs]
    if tensor not in inputs:
        return f"its cond compares its counter with {_name(cond, tensor)}, computed in the cond"
    m = inputs.index(tensor)
    if (
        m >= len(op.inputs)
        or m >= min(len(body.inputs), len(body.outputs))
        or int(body.outputs[m]) != int(body.inputs[m])
    ):
        return f"its cond compares its counter with loop variable {m}, which the body changes"
    caller, start = model.subgraphs[g], int(op.inputs[m])
    value = _scalar(_constant(model, caller, start))
    if value is not None:
        return value
    length = _length(model, fb, g, op, start, rows)
    if length is None:
        return (
            f"its cond compares its counter with loop variable {m}, which the body passes on unchanged "
            f"from {_name(caller, start)}, neither a constant nor a dimension of a tensor's shape "
            "(SHAPE -> STRIDED_SLICE)"
        )
    return length


def _length(model: Any, fb: Any, g: int, op: Any, tensor: int, rows: int) -> int | str | None:
    """The dimension of a tensor's shape that `tensor` of subgraph `g` holds (`SHAPE ->
    STRIDED_SLICE` picking one), read as the interpreter will hold it (see the module
    docstring); what the file does not say of it; None where `tensor` is no such dimension."""
    caller = model.subgraphs[g]
    writers = {int(t): o for o in caller.operators for t in o.outputs}

    def written(t: int, kind: str) -> Any:
        o = writers.get(t)
        return (
            o if o is not None and op_name(model.operatorCodes[o.opcodeIndex], fb) == kind else None
        )

    sliced = written(tensor, "STRIDED_SLICE")
    shaped = (
        written(int(sliced.inputs[0]), "SHAPE")
        if sliced is not None and len(sliced.inputs) == 4
        else None
    )
    if sliced is None or shaped is None or len(shaped.inputs) != 1:
        return None
    begin, end, stride = (_scalar(_constant(model, caller, int(t))) for t in sliced.inputs[1:])
    o, source = sliced.builtinOptions, int(shaped.inputs[0])
    if begin is None or end is None or not stride or o.ellipsisMask or o.newAxisMask or o.offset:
        return None
    made = {t: dims for _, t, dims in _made(model, fb, g).values()}
    dims = made.get(source, [int(d) for d in caller.tensors[source].shape])
    if o.shrinkAxisMask & 1:
        picked = [begin + len(dims) if begin < 0 else begin]
    else:
        picked = list(range(len(dims)))[
            slice(None if o.beginMask & 1 else begin, None if o.endMask & 1 else end, stride)
        ]
    if len(picked) != 1 or not 0 <= picked[0] < len(dims):
        return None
    d, signature = picked[0], caller.tensors[source].shapeSignature
    fed = g == 0 and source in [int(t) for t in caller.inputs]  # fed as the file declares it
    if (
        fed
        or source in made
        or signature is None
        or len(signature) != len(dims)
        or signature[d] >= 0
    ):
        return dims[d]
    if d == 0 and source in [int(t) for t in op.inputs]:
        return rows  # the rows of what the loop carries, whatever they are when it runs
    return (
        f"its limit is dimension {d} of {_name(caller, source)}, whose shape the file leaves open "
        f"({[int(v) for v in signature]}) until it runs"
    )


def _step(model: Any, fb: Any, body: Any, n: int) -> int | None:
    """What the body adds to its argument `n` each iteration: a constant (None: not so)."""
    if n >= min(len(body.outputs), len(body.inputs)):
        return None
    out, argument = int(body.outputs[n]), int(body.inputs[n])
    for o in body.operators:
        if out in [int(t) for t in o.outputs]:
            if op_name(model.operatorCodes[o.opcodeIndex], fb) != "ADD" or len(o.inputs) < 2:
                return None
            a, b = (int(t) for t in o.inputs[:2])
            added = _scalar(_constant(model, body, b if a == argument else a))
            if argument not in (a, b) or added is None:
                return None
            return added
    return None


def _shapes_problem(model: Any, fb: Any, memory: int) -> str | None:
    """Why a tensor the interpreter would make when it runs (FILL, BROADCAST_TO, TILE, RANGE:
    `_made`) is refused: larger than the memory budget (None: none is)."""
    types = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    for g, subgraph in enumerate(model.subgraphs):
        for k, (kind, t, dims) in _made(model, fb, g).items():
            size = _BYTES.get(types.get(subgraph.tensors[t].type, ""), 1)
            nbytes = math.prod(max(d, 0) for d in dims) * size
            if nbytes > memory:
                return (
                    f"op {k} of subgraph {g}, a {kind}, makes a tensor of {dims} "
                    f"({nbytes:,.0f} bytes) when it runs, more than the memory budget of {memory:,}"
                )
    return None


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "ADD": lambda a, b: a + b,
    "SUB": lambda a, b: a - b,
    "MUL": lambda a, b: a * b,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
}
_PASSED = ("CAST", "RESHAPE", "SQUEEZE", "EXPAND_DIMS")  # the same numbers, another shape


def _made(model: Any, fb: Any, g: int) -> dict[int, tuple[str, int, list[int]]]:
    """The shape of each tensor of subgraph `g` that FILL, BROADCAST_TO, TILE or RANGE makes
    where the file says it (by op: its kind, its output, its shape): their sizes read from the
    integers the subgraph computes from its constants and the shapes it holds (SHAPE; ADD,
    SUB, MUL, MAXIMUM, MINIMUM; PACK, CONCATENATION of scalars and vectors; CAST, RESHAPE,
    SQUEEZE, EXPAND_DIMS), each wrapped to its tensor's type as the kernels compute it; a
    RANGE's length as its kernel counts it (ceil(|limit - start| / |delta|))."""
    subgraph = model.subgraphs[g]
    held: dict[int, list[int]] = {}  # the shapes made so far
    values: dict[int, list[int]] = {}  # the integers computed so far, flattened
    made = {}

    def value(t: int) -> list[int] | None:
        if t in values:
            return values[t]
        found = _constant(model, subgraph, t)
        return None if found is None else [int(v) for v in found]

    def shape(t: int) -> list[int] | None:
        if t in held:
            return held[t]
        tensor = subgraph.tensors[t]
        dims = [int(d) for d in tensor.shape]
        signature = tensor.shapeSignature
        fed = g == 0 and t in [int(i) for i in subgraph.inputs]  # fed as the file declares it
        return dims if fed or signature is None or all(d >= 0 for d in signature) else None

    for k, op in enumerate(subgraph.operators):
        kind = op_name(model.operatorCodes[op.opcodeIndex], fb)
        inputs, outputs = [int(t) for t in op.inputs], [int(t) for t in op.outputs]
        if len(outputs) != 1 or any(t < 0 for t in inputs):
            continue
        out, got = outputs[0], None
        if kind == "SHAPE" and inputs:
            got = shape(inputs[0])
        elif kind in _ARITHMETIC and len(inputs) == 2:
            a, b = value(inputs[0]), value(inputs[1])
            if a is not None and b is not None and (len(a) == len(b) or 1 in (len(a), len(b))):
                got = [int(v) for v in _ARITHMETIC[kind](np.array(a, object), np.array(b, object))]
        elif kind in ("PACK", "CONCATENATION") and inputs:
            parts = [value(t) for t in inputs]
            got = None if any(p is None for p in parts) else [v for p in parts for v in p or []]
        elif kind in _PASSED and inputs:
            got = value(inputs[0])
        if got is not None:
            values[out] = _wrapped(got, subgraph.tensors[out].type)
            continue
        dims = None
        if kind == "FILL" and inputs:
            dims = value(inputs[0])
        elif kind == "BROADCAST_TO" and len(inputs) > 1:
            dims = value(inputs[1])
        elif kind == "TILE" and len(inputs) > 1:
            base, times = shape(inputs[0]), value(inputs[1])
            if base is not None and times is not None and len(base) == len(times):
                dims = [a * b for a, b in zip(base, times, strict=True)]
        elif kind == "RANGE" and len(inputs) == 3:
            numbers = [_scalar_of(model, subgraph, values, t) for t in inputs]
            if all(v is not None and math.isfinite(v) for v in numbers) and numbers[2]:
                start, limit, delta = (v for v in numbers if v is not None)
                dims = [
                    int(abs(limit - start) + abs(delta) - 1) // int(abs(delta))
                    if all(isinstance(v, int) for v in numbers)
                    else math.ceil(abs((limit - start) / delta))
                ]
        if dims is not None:
            held[out] = dims
            made[k] = (kind, out, dims)
    return made


def _scalar_of(model: Any, subgraph: Any, values: dict[int, list[int]], t: int) -> float | None:
    """The one number tensor `t` holds: computed (`_made`) or a constant, integer or float."""
    if t in values:
        return values[t][0] if len(values[t]) == 1 else None
    found = _constant(model, subgraph, t, floats=True)
    return None if found is None or found.size != 1 else found.reshape(()).item()


def _wrapped(numbers: list[int], kind: int) -> list[int]:
    """Integers as a tensor of schema type `kind` holds them: an int32's modulo 2^32."""
    bits = {_INT32: 32, _INT64: 64}.get(kind)
    if bits is None:
        return numbers
    return [(v + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1) for v in numbers]


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

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
                 subgraphs and a recurrent op's weights where they must be; a recurrent op
                 fed float32 whose outputs and states are float32 (its kernel writes them
                 as float32, past the end of a narrower tensor's buffer)
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
                 times the bytes it carries (as it ends, where its body grows them: see
                 shapes) pass 64 times the memory budget is refused (n iterations over a
                 carried tensor of n rows copy n^2 rows)
    shapes       what the interpreter makes when it runs (and allocates), each tensor and
                 all of them together within the memory budget, as its kernels compute it,
                 whatever the file declares of it: what FILL, BROADCAST_TO, TILE and RANGE
                 make, their sizes read from constants and the integers the file computes
                 from them and from the shapes it holds (SHAPE, ADD, SUB, MUL, MAXIMUM,
                 MINIMUM, PACK, CONCATENATION, CAST, RESHAPE, SQUEEZE, EXPAND_DIMS); what a
                 CONCATENATION, RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE or elementwise op
                 (ABS, ADD, ...: `_SAME`, `_BROADCAST`) makes of the shapes the file fixes
                 and of those (a chain of CONCATENATIONs doubling a tensor); and what a
                 WHILE loop carries as its body grows it at every iteration (a tensor
                 concatenated with itself), followed iteration by iteration (a loop whose
                 shapes keep changing past 10,000 iterations is refused), and what its cond
                 and body make of what it carries into them (the WHILE kernel resizes their
                 inputs to it, whatever they declare); what the ops whose
                 output may hold more numbers than their inputs make, as their kernels'
                 Prepare computes it from their inputs' shapes and integers (PAD, PADV2,
                 MIRROR_PAD, ONE_HOT, SLICE, GATHER, GATHER_ND, RESIZE_BILINEAR,
                 RESIZE_NEAREST_NEIGHBOR, FULLY_CONNECTED, BATCH_MATMUL, SPACE_TO_DEPTH,
                 DEPTH_TO_SPACE, SPACE_TO_BATCH_ND, EMBEDDING_LOOKUP, CONV_2D,
                 DEPTHWISE_CONV_2D, TRANSPOSE_CONV, BATCH_TO_SPACE_ND, and WHERE at most
                 every position of its condition, int64 whatever type the file declares,
                 MATRIX_DIAG: `_GROWN`), STRIDED_SLICE's and the
                 reductions' over constant axes (MEAN, SUM, REDUCE_*), each output of SPLIT,
                 SPLIT_V and UNPACK (`_PARTED`), and each of a recurrent op's (`RECURRENT`:
                 the input's steps times the width its weights give, whatever the input's
                 rank, `_recurrent`; one fed fewer dimensions than its kernel reads is
                 refused), each fed into what the ops after it make; and the scratch
                 tensors a CONV_2D and a recurrent op need (im2col; the temporaries of a
                 recurrent kernel, float, hybrid or integer: `_scratch`). A PAD, PADV2,
                 MIRROR_PAD, ONE_HOT,
                 RESIZE_*, SPACE_TO_BATCH_ND or TRANSPOSE_CONV whose paddings, depth, size
                 or output shape gatetrace cannot read (neither constants nor integers
                 computed from them and from shapes) is refused naming it: its kernel would
                 make whatever they hold when it runs. Another op's output is taken as the
                 file declares it (the ops that make no more numbers than an input holds but
                 those computed above, and the others converters write)
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
    types = _type_names(fb)
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
    try:
        return (
            _ops_problem(model, fb)
            or _calls_problem(model)
            or _shapes_problem(model, fb, memory)
            or _loops_problem(model, fb, memory)
        )
    except _Unbounded as err:
        return str(err)


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
    types = _type_names(fb)
    for g, subgraph in enumerate(model.subgraphs):
        found = _made(model, fb, g, memory)
        made = {t: dims for t, (_, kind, dims) in found.items() if kind in _SIZED}
        held = {  # each tensor's shape as the interpreter holds it: as made, or as declared
            t: found[t][2] if t in found else [int(d) for d in tensor.shape]
            for t, tensor in enumerate(subgraph.tensors)
        }
        for k, op in enumerate(subgraph.operators):
            if op_name(model.operatorCodes[op.opcodeIndex], fb) != "WHILE":
                continue
            where = f"the WHILE loop of op {k} of subgraph {g}"
            carried = [int(t) for t in op.inputs if t >= 0]
            rows = max([held[t][0] for t in carried if len(held[t])] or [1])
            iterations = _iterations(model, fb, g, op, rows, made)
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
            # (what it carries as it ends, where its body grows it: `_carried`)
            ends = [int(t) for t in op.outputs]
            nbytes = sum(
                math.prod(max(d, 0) for d in held[ends[n] if n < len(ends) and ends[n] >= 0 else t])
                * _BYTES.get(types.get(subgraph.tensors[t].type, ""), 1)
                for n, t in enumerate(int(t) for t in op.inputs)
                if t >= 0
            )
            if iterations * nbytes > _COPIED * memory:
                return (
                    f"{where} runs {iterations:,} iterations, each copying the {nbytes:,.0f} bytes it carries "
                    f"(TensorFlow Lite's WHILE kernel copies what a loop carries at every iteration): "
                    f"{iterations * nbytes:,.0f} bytes, more than {_COPIED} times the memory budget of {memory:,}"
                )
    return None


def _iterations(
    model: Any, fb: Any, g: int, op: Any, rows: int, made: dict[int, list[int]]
) -> int | str:
    """How many iterations a WHILE of subgraph `g` runs at most, where its cond compares a
    counter with a limit and its body raises the counter by a constant (see the module
    docstring; `made`: the shapes FILL, BROADCAST_TO, TILE and RANGE make in subgraph `g`,
    `_made`); what in the file does not say it, where none does."""
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
        limit = _limit(model, fb, g, op, cond, body, b, rows, made)
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
    model: Any,
    fb: Any,
    g: int,
    op: Any,
    cond: Any,
    body: Any,
    tensor: int,
    rows: int,
    made: dict[int, list[int]],
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
    length = _length(model, fb, g, op, start, rows, made)
    if length is None:
        return (
            f"its cond compares its counter with loop variable {m}, which the body passes on unchanged "
            f"from {_name(caller, start)}, neither a constant nor a dimension of a tensor's shape "
            "(SHAPE -> STRIDED_SLICE)"
        )
    return length


def _length(
    model: Any, fb: Any, g: int, op: Any, tensor: int, rows: int, made: dict[int, list[int]]
) -> int | str | None:
    """The dimension of a tensor's shape that `tensor` of subgraph `g` holds (`SHAPE ->
    STRIDED_SLICE` picking one), read as the interpreter will hold it (see the module
    docstring; `made`: the shapes the file makes, `_made`); what the file does not say of
    it; None where `tensor` is no such dimension."""
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
    """Why what the interpreter would make when it runs (`_made`) is refused: a tensor larger
    than the memory budget, or all of them together (None: neither is)."""
    total, first = 0.0, ""
    for g in range(len(model.subgraphs)):
        why, nbytes, start = _budget(model, fb, g, _made(model, fb, g, memory), memory)
        if why:
            return why
        total, first = total + nbytes, first or start
    return _together(total, first, memory)


def _budget(
    model: Any,
    fb: Any,
    g: int,
    found: dict[int, tuple[int, str, list[int]]],
    memory: int,
    given: dict[int, list[int]] | None = None,
) -> tuple[str | None, float, str]:
    """What the tensors `found` (`_made` of subgraph `g`, given the shapes `given` of its
    inputs) and the scratch tensors its ops need (`_scratch`) take: why one of them is refused
    (larger than the memory budget; None: none is), their bytes together, and the first op
    that makes one. A WHERE's output is int64 whatever the file declares (where.cc sets its
    type)."""
    subgraph, total, first = model.subgraphs[g], 0.0, ""
    for t, (k, kind, dims) in found.items():
        nbytes = _nbytes(subgraph.tensors[t], dims, fb, 8 if kind == "WHERE" else None)
        if nbytes > memory:
            why = (
                f"op {k} of subgraph {g}, a {kind}, makes a tensor of {dims} "
                f"({nbytes:,.0f} bytes) when it runs, more than the memory budget of {memory:,}"
            )
            return why, total, first
        total += nbytes
        first = first or f"op {k} of subgraph {g}, a {kind}"
    for k, kind, dims, nbytes in _scratch(model, fb, g, found, given):
        if nbytes > memory:
            why = (
                f"op {k} of subgraph {g}, a {kind}, needs a scratch tensor of {dims} "
                f"({nbytes:,.0f} bytes) when it runs, more than the memory budget of {memory:,}"
            )
            return why, total, first
        total += nbytes
        first = first or f"op {k} of subgraph {g}, a {kind}"
    return None, total, first


def _together(total: float, first: str, memory: int) -> str | None:
    """Why the tensors ops make together (`total` bytes, from `first` on) are refused (None:
    they are not)."""
    if total <= memory:
        return None
    return (
        f"the tensors its ops make when it runs (from {first} on) claim {total:,.0f} bytes "
        f"together, more than the memory budget of {memory:,}"
    )


def _scratch(
    model: Any,
    fb: Any,
    g: int,
    found: dict[int, tuple[int, str, list[int]]],
    given: dict[int, list[int]] | None = None,
) -> list[tuple[int, str, list[int], float]]:
    """The scratch tensors the ops of subgraph `g` make when they run: (op, its kind, shape,
    bytes), from the shapes as the interpreter holds them (`found`, `_made`'s; `given`, its
    inputs' where a caller gives them; or as declared). A CONV_2D's im2col, where its kernel
    needs one (conv.cc's IsIm2ColRequired: a stride, a dilation or a filter of more than
    1 x 1): [batch, output height, output width, input depth x filter height x filter width]
    of the input's type, counted wherever some kernel would make it (the reference and
    multithreaded kernels make none for float: an upper bound); and the temporaries of a
    recurrent op's kernel (`_temporaries`)."""
    subgraph, scratches = model.subgraphs[g], []
    types = _type_names(fb)

    def held(t: int) -> list[int]:
        if t in found:
            return found[t][2]
        if given is not None and t in given:
            return given[t]
        return [int(d) for d in subgraph.tensors[t].shape]

    def type_of(t: int) -> str:
        return types.get(subgraph.tensors[t].type, "")

    for k, op in enumerate(subgraph.operators):
        options, kind = op.builtinOptions, op_name(model.operatorCodes[op.opcodeIndex], fb)
        if kind in RECURRENT:
            for dims, size in _temporaries(kind, op, held, type_of):
                scratches.append((k, kind, dims, math.prod(max(d, 0) for d in dims) * size))
            continue
        if kind != "CONV_2D" or options is None:
            continue
        if (
            len(op.inputs) < 2
            or len(op.outputs) != 1
            or min(op.inputs[:2]) < 0
            or op.outputs[0] < 0
        ):
            continue
        image, kernel, made = (
            held(int(op.inputs[0])),
            held(int(op.inputs[1])),
            held(int(op.outputs[0])),
        )
        if not len(image) == len(kernel) == len(made) == 4:
            continue
        steps = (options.strideH, options.strideW, options.dilationHFactor, options.dilationWFactor)
        if steps == (1, 1, 1, 1) and kernel[1] == kernel[2] == 1:
            continue
        dims = [*made[:3], image[3] * kernel[1] * kernel[2]]
        scratches.append((k, kind, dims, _nbytes(subgraph.tensors[int(op.inputs[0])], dims, fb)))
    return scratches


# the input numbers of each direction of a recurrent op (LSTM: its input-to-output matrix,
# input-to-input matrix, output state, cell state and projection; RNN: its input matrix and
# hidden state), and of a bidirectional op's auxiliary input
_DIRECTIONS: dict[str, list[tuple[int, ...]]] = {
    "LSTM": [(4, 1, 18, 19, 16)],
    "UNIDIRECTIONAL_SEQUENCE_LSTM": [(4, 1, 18, 19, 16)],
    "BIDIRECTIONAL_SEQUENCE_LSTM": [(4, 1, 35, 36, 16), (21, 18, 37, 38, 33)],
    "RNN": [(1, 4)],
    "UNIDIRECTIONAL_SEQUENCE_RNN": [(1, 4)],
    "BIDIRECTIONAL_SEQUENCE_RNN": [(1, 4), (5, 8)],
}
_AUXILIARY = {"BIDIRECTIONAL_SEQUENCE_LSTM": 39, "BIDIRECTIONAL_SEQUENCE_RNN": 9}


def _temporaries(
    kind: str, op: Any, held: Callable[[int], list[int]], type_of: Callable[[int], str]
) -> list[tuple[list[int], float]]:
    """The temporaries a recurrent op's kernel makes in Prepare (tensorflow/lite/kernels
    lstm.cc, unidirectional_sequence_lstm.cc, bidirectional_sequence_lstm.cc, basic_rnn.cc,
    unidirectional_sequence_rnn.cc, bidirectional_sequence_rnn.cc), each (shape, bytes a
    number), from its tensors' shapes (`held`) and types (`type_of`). For each direction of a
    float LSTM, its scratch buffer [batch, 5 x cells + 16] (4 x cells without an input gate;
    a bidirectional op's backward one without the 16); of a hybrid one (float input, int8
    matrices) too, its states quantised, accumulators [cells, batch] (int32), row sums [8 (6
    without an input gate) + the projection's rows / cells, cells], a vector of cells and
    five of batch; of an integer one, six [batch, cells] (two more for the LSTM op's 8-bit
    kernel); of a hybrid RNN, its state quantised and (a sequence op's) row sums [2 (3 with
    an auxiliary input), units]. A hybrid op's input (and auxiliary input) quantised too, and
    a hybrid RNN's vector of batch, and (a sequence op's) accumulators [its widest direction's
    units, batch] and another vector of batch. None for the basic LSTM kernel (its
    temporaries are its outputs), a float RNN, or where the input's shape is not known; at
    most what they make (a bidirectional hybrid LSTM makes fewer vectors)."""
    inputs = [int(t) for t in op.inputs]

    def dims(at: int) -> list[int] | None:
        return held(inputs[at]) if at < len(inputs) and inputs[at] >= 0 else None

    first = dims(0)
    if first is None or len(first) < 2 or (kind == "LSTM" and len(inputs) == 5):
        return []
    sequence = kind.startswith(("UNIDIRECTIONAL", "BIDIRECTIONAL"))
    batch = first[1] if sequence and getattr(op.builtinOptions, "timeMajor", False) else first[0]
    floats, auxiliary = type_of(inputs[0]) == "FLOAT32", dims(_AUXILIARY.get(kind, len(inputs)))
    found: list[tuple[list[int], float]] = []
    widest, hybrid = 0, False
    for n, (matrix, *roles) in enumerate(_DIRECTIONS[kind]):
        shape = dims(matrix)
        if not shape:
            continue
        cells, quantised = shape[0], floats and type_of(inputs[matrix]) in ("INT8", "UINT8")
        widest, hybrid = max(widest, cells), hybrid or quantised
        if "RNN" in kind:
            found += [(dims(roles[0]) or [batch, cells], 1.0)] if quantised else []
            rows = 3 if auxiliary else 2
            found += [([rows, cells], 4.0)] if quantised and sequence else []
        elif not floats:  # the integer kernels
            found += [([batch, cells], size) for size in (2.0, 2.0, 2.0, 2.0, 1.0, 4.0)]
            found += [([batch, cells], 2.0)] * (2 if kind == "LSTM" else 0)
        else:
            gates = 4 if dims(roles[0]) is None else 5
            found.append(([batch, gates * cells + (16 if n == 0 else 0)], 4.0))
            if quantised:
                projection = dims(roles[3])
                rows = 2 * gates - 2 + (-(-projection[0] // cells) if projection and cells else 0)
                for at in roles[1:3]:
                    found.append((dims(at) or [batch, cells], 1.0))
                found += [([rows, cells], 4.0), ([cells], 4.0), ([cells, batch], 4.0)]
                found += [([batch], 4.0)] * 5
    if hybrid:
        found += [(d, 1.0) for d in (first, auxiliary) if d]
        if "RNN" in kind:
            found.append(([batch], 4.0))
            found += [([widest, batch], 4.0), ([batch], 4.0)] if sequence else []
    return found


@functools.cache
def _type_names(fb: Any) -> dict[int, str]:
    """The schema's tensor type names (`FLOAT32`, ...) by number."""
    return {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}


def _nbytes(tensor: Any, dims: list[int], fb: Any, size: float | None = None) -> float:
    """The bytes a tensor of the file's type (`tensor`'s; `size` bytes a number where the
    kernel sets it) and shape `dims` takes."""
    types = _type_names(fb)
    if size is None:
        size = _BYTES.get(types.get(tensor.type, ""), 1)
    return math.prod(max(d, 0) for d in dims) * size


class _Unbounded(Exception):
    """What the file makes when it runs that gatetrace cannot bound (the one line to refuse
    the file with)."""


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "ADD": lambda a, b: a + b,
    "SUB": lambda a, b: a - b,
    "MUL": lambda a, b: a * b,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
}
_PASSED = ("CAST", "RESHAPE", "SQUEEZE", "EXPAND_DIMS")  # the same numbers, another shape
_SIZED = ("FILL", "BROADCAST_TO", "TILE", "RANGE")  # ops whose output's shape integers give
_VALUES = 1024  # the most numbers of a tensor read as integers (a shape, an index: a few)
# ops whose output has the shape of their first input
_SAME = frozenset(
    """
    ABS NEG EXP LOG SQRT RSQRT SQUARE SIN COS TANH LOGISTIC RELU RELU6 RELU_N1_TO_1 RELU_0_TO_1
    LEAKY_RELU ELU HARD_SWISH GELU CAST QUANTIZE DEQUANTIZE FLOOR CEIL ROUND SIGN LOGICAL_NOT
    ZEROS_LIKE SOFTMAX LOG_SOFTMAX L2_NORMALIZATION REVERSE_V2 CUMSUM
    """.split()
)
# ops whose output has the shape their inputs' shapes broadcast to
_BROADCAST = frozenset(
    """
    ADD SUB MUL DIV MAXIMUM MINIMUM POW SQUARED_DIFFERENCE FLOOR_DIV FLOOR_MOD ATAN2 PRELU LESS
    LESS_EQUAL GREATER GREATER_EQUAL EQUAL NOT_EQUAL LOGICAL_AND LOGICAL_OR SELECT_V2
    """.split()
)
# ops whose output may hold more numbers than their inputs, whose shapes `_grown` computes
_GROWN = frozenset(
    """
    PAD PADV2 MIRROR_PAD ONE_HOT SLICE GATHER GATHER_ND RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR
    FULLY_CONNECTED BATCH_MATMUL SPACE_TO_DEPTH DEPTH_TO_SPACE SPACE_TO_BATCH_ND
    EMBEDDING_LOOKUP CONV_2D DEPTHWISE_CONV_2D TRANSPOSE_CONV BATCH_TO_SPACE_ND WHERE MATRIX_DIAG
    """.split()
)
# ops of several outputs, each a part of their input, whose shapes `_parted` computes
_PARTED = frozenset("SPLIT SPLIT_V UNPACK".split())
# the integers (an input's: paddings, depth, size, block) each of those ops' shapes follow
_READ = {
    "PAD": (1, "paddings"), "PADV2": (1, "paddings"), "MIRROR_PAD": (1, "paddings"),
    "ONE_HOT": (1, "depth"), "RESIZE_BILINEAR": (1, "size"), "RESIZE_NEAREST_NEIGHBOR": (1, "size"),
    "SPACE_TO_BATCH_ND": (2, "paddings"), "TRANSPOSE_CONV": (0, "output shape"),
}  # fmt: skip
# reductions over constant axes (their output: their input's shape without those axes)
_REDUCED = frozenset("MEAN SUM REDUCE_MAX REDUCE_MIN REDUCE_PROD REDUCE_ANY REDUCE_ALL".split())
# how many iterations of the WHILE loops' bodies gatetrace follows in one check, as what they
# carry changes shape (a loop whose carried shapes stay the same takes one)
_FOLLOWED = 10_000


def _made(
    model: Any,
    fb: Any,
    g: int,
    memory: int,
    given: dict[int, list[int]] | None = None,
    work: list[int] | None = None,
) -> dict[int, tuple[int, str, list[int]]]:
    """The shape of each tensor of subgraph `g` that the interpreter makes from other
    tensors' shapes and from integers the file holds, where the file says it (by tensor: the
    op that makes it, its kind, its shape); `given`: the shapes of the subgraph's inputs
    where a caller gives them (a WHILE's body: what the loop carries).

    Integers: those the subgraph computes from its constants and the shapes it holds (SHAPE;
    ADD, SUB, MUL, MAXIMUM, MINIMUM; PACK, CONCATENATION of scalars and vectors; CAST, RESHAPE,
    SQUEEZE, EXPAND_DIMS), each wrapped to its tensor's type as the kernels compute it, a few
    at most (`_VALUES`). Shapes, as the kernels compute them: FILL, BROADCAST_TO, TILE and
    RANGE (a RANGE's length ceil(|limit - start| / |delta|)) from those integers; and from
    their inputs' shapes (made, or as the file declares them where it fixes them) a
    CONCATENATION's, a RESHAPE's, SQUEEZE's, EXPAND_DIMS' and TRANSPOSE's, an elementwise
    op's (`_SAME`, `_BROADCAST`), an op's of `_GROWN` and a reduction's (`_grown`), each
    output of an op of `_PARTED` (`_parted`) and of a recurrent op (`_recurrent`), and what
    a WHILE gives back (`_carried`: what it carries, as its body changes it at each
    iteration). Another op's output is as the file declares it; an op of `_READ` whose
    integers gatetrace cannot read is refused (`_Unbounded`)."""
    subgraph = model.subgraphs[g]
    work = [0] if work is None else work
    held: dict[int, list[int]] = {}  # the shapes made so far
    values: dict[int, list[int]] = {}  # the integers computed so far, flattened
    made: dict[int, tuple[int, str, list[int]]] = {}

    def value(t: int) -> list[int] | None:
        if t in values:
            return values[t]
        found = _constant(model, subgraph, t)
        return None if found is None or found.size > _VALUES else [int(v) for v in found]

    def shape(t: int) -> list[int] | None:
        if t in held:
            return held[t]
        if given is not None and t in given:
            return given[t]
        tensor = subgraph.tensors[t]
        dims = [int(d) for d in tensor.shape]
        signature = tensor.shapeSignature
        fed = g == 0 and t in [int(i) for i in subgraph.inputs]  # fed as the file declares it
        return dims if fed or signature is None or all(d >= 0 for d in signature) else None

    for k, op in enumerate(subgraph.operators):
        kind = op_name(model.operatorCodes[op.opcodeIndex], fb)
        inputs, outputs = [int(t) for t in op.inputs], [int(t) for t in op.outputs]
        if kind == "WHILE" and hasattr(op.builtinOptions, "bodySubgraphIndex"):
            known = {t: made[t][2] for t in made if made[t][1] in _SIZED}
            for t, (what, gives) in _carried(model, fb, g, k, shape, known, memory, work).items():
                held[t], made[t] = gives, (k, what, gives)
            continue
        if kind in _PARTED and inputs and all(t >= 0 for t in inputs):
            pieces = _parted(kind, op, [shape(t) for t in inputs], value)
            if pieces is not None and len(pieces) == len(outputs):
                for t, part in zip(outputs, pieces, strict=True):
                    held[t], made[t] = part, (k, kind, part)
            continue
        if kind in RECURRENT:  # (their optional weights absent: a CIFG's input gate's)
            widths = _recurrent(kind, op, shape, f"op {k} of subgraph {g}")
            for t, each in zip(outputs, widths or [], strict=False):
                if t >= 0:
                    held[t], made[t] = each, (k, kind, each)
            continue
        if len(outputs) != 1 or any(t < 0 for t in inputs[:2]):  # (a bias may be absent)
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
        if got is not None and len(got) <= _VALUES:
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
        elif inputs:
            dims = _shaped(kind, op, [shape(t) if t >= 0 else None for t in inputs], value)
        at, what = _READ.get(kind, (0, ""))
        if dims is None and what and len(inputs) > at and shape(inputs[0]) is not None:
            if value(inputs[at]) is None:  # (its kernel makes it when it runs, of any size)
                raise _Unbounded(
                    f"op {k} of subgraph {g}, a {kind}, takes its {what} from "
                    f"{_name(subgraph, inputs[at])}, which gatetrace cannot read from the file (neither "
                    "a constant nor computed from constants and shapes): it cannot bound the tensor the "
                    "op makes when it runs, and runs no file whose tensors it cannot bound"
                )
        if dims is not None:
            held[out] = dims
            made[out] = (k, kind, dims)
    return made


def _recurrent(
    kind: str, op: Any, shape: Callable[[int], list[int] | None], where: str
) -> list[list[int]] | None:
    """The shapes a recurrent op (`RECURRENT`) gives its outputs, as its kernel's Prepare
    computes them (tensorflow/lite/kernels lstm.cc, unidirectional_sequence_lstm.cc,
    bidirectional_sequence_lstm.cc, basic_rnn.cc, unidirectional_sequence_rnn.cc,
    bidirectional_sequence_rnn.cc), from its input's shape (`shape`: None where not known):
    an LSTM's [batch, n_output], a sequence LSTM's input shape with its last dimension
    n_output (the second dimension of its recurrent-to-output matrix, input 8, or the first of
    a diagonal one, a vector; the backward one's, input 25), an RNN's [batch, num_units] (the
    first dimension of its input matrix, input 1; the backward one's, input 5), a sequence
    RNN's [its input's first two dimensions, num_units] whatever its input's rank; a
    bidirectional op's two outputs each [its input's first two dimensions, its width] (as
    the input is ordered, time-major or not), or one of both widths where it merges them; the
    LSTM of the basic kernel's four (five inputs: its input [batch, depth], its previous
    output [batch, units], its weights, bias and previous state): its output and state as its
    previous ones, [batch, depth + units] and [batch, 4 x units]. None where a shape is not
    known or its kernel would refuse them; an input of fewer dimensions than its kernel reads
    (a sequence op's three, another's two: it would read past its shape) is refused, `where`
    naming the op (_Unbounded)."""
    inputs = [int(t) for t in op.inputs]

    def dims(at: int) -> list[int] | None:
        return shape(inputs[at]) if at < len(inputs) and inputs[at] >= 0 else None

    def width(at: int, axis: int) -> int | None:
        found = dims(at)
        return found[axis] if found is not None and len(found) > axis else None

    def n_output(at: int) -> int | None:  # (a diagonal matrix: a vector of n_cell)
        found = dims(at)
        return found[-1] if found is not None and len(found) in (1, 2) else None

    first = dims(0)
    if first is None:
        return None
    reads = 3 if kind.startswith(("UNIDIRECTIONAL", "BIDIRECTIONAL")) else 2
    if len(first) < reads:
        raise _Unbounded(
            f"{where}, a {kind}, is fed a tensor of {first}, where its kernel reads {reads} "
            "dimensions (it would read past its shape); convert the model again"
        )
    options = op.builtinOptions
    if kind == "LSTM" and len(inputs) == 5:  # the basic kernel
        output, state = dims(1), dims(4)
        if len(first) != 2 or output is None or state is None or len(output) != 2:
            return None
        batch, depth = first[0], output[1]
        return [output, state, [batch, first[1] + depth], [batch, 4 * depth]]
    if kind in ("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM"):
        n = n_output(8) if len(inputs) >= 20 else None
        return None if n is None else [[first[0], n] if kind == "LSTM" else [*first[:-1], n]]
    if kind in ("RNN", "UNIDIRECTIONAL_SEQUENCE_RNN"):
        units = width(1, 0)
        return None if units is None else [[*first[: reads - 1], units]]
    if len(first) != 3:
        return None  # (its kernel refuses it)
    if kind == "BIDIRECTIONAL_SEQUENCE_LSTM":
        forward, backward = n_output(8), n_output(25)
    else:
        forward, backward = width(1, 0), width(5, 0)
    if forward is None or backward is None:
        return None
    if getattr(options, "mergeOutputs", False):
        return [[*first[:2], forward + backward]]
    return [[*first[:2], forward], [*first[:2], backward]]


def _shaped(
    kind: str, op: Any, shapes: list[list[int] | None], value: Callable[[int], Any]
) -> list[int] | None:
    """The shape an op of `kind` gives its output from its inputs' `shapes` (None where one
    is not known) and the integers `value` reads, as its kernel computes it (see `_made`);
    None for another op, or where its kernel would refuse its inputs."""
    first, options = shapes[0], op.builtinOptions
    if kind in _BROADCAST and len(shapes) >= 2:
        known = [s for s in shapes if s is not None]
        return _broadcast(known) if len(known) == len(shapes) else None
    if first is None:
        return None
    rank = len(first)
    if kind in _SAME:
        return first
    if kind == "CONCATENATION":
        axis = options.axis if options is not None else 0
        axis += rank if axis < 0 else 0
        if not 0 <= axis < rank or any(s is None or len(s) != rank for s in shapes):
            return None
        parts = [s for s in shapes if s is not None]
        if any(s[:axis] + s[axis + 1 :] != first[:axis] + first[axis + 1 :] for s in parts):
            return None
        return [*first[:axis], sum(s[axis] for s in parts), *first[axis + 1 :]]
    if kind == "RESHAPE":
        asked = value(int(op.inputs[1])) if len(op.inputs) > 1 and op.inputs[1] >= 0 else None
        if asked is None and len(op.inputs) < 2 and options is not None:
            asked = [int(d) for d in options.newShape or []]
        return None if asked is None else _reshaped(first, asked)
    if kind == "SQUEEZE":
        axes = [
            int(a) + (rank if a < 0 else 0) for a in (getattr(options, "squeezeDims", None) or [])
        ]
        if any(not 0 <= a < rank or first[a] != 1 for a in axes):
            return None
        return [d for a, d in enumerate(first) if (a not in axes if axes else d != 1)]
    index = value(int(op.inputs[1])) if len(op.inputs) > 1 else None
    if kind == "EXPAND_DIMS" and index is not None and len(index) == 1:
        axis = index[0] + (rank + 1 if index[0] < 0 else 0)
        return [*first[:axis], 1, *first[axis:]] if 0 <= axis <= rank else None
    if kind == "TRANSPOSE" and index is not None and sorted(index) == list(range(rank)):
        return [first[a] for a in index]
    return _grown(kind, op, shapes, value)


def _grown(
    kind: str, op: Any, shapes: list[list[int] | None], value: Callable[[int], Any]
) -> list[int] | None:
    """The shape the ops of `_GROWN` (and the reductions, `_REDUCED`) give their output, as
    their kernels' Prepare computes it (tensorflow/lite/kernels/pad.cc, mirror_pad.cc,
    one_hot.cc, slice.cc, gather.cc, gather_nd.cc, resize_bilinear.cc,
    resize_nearest_neighbor.cc, fully_connected.cc, batch_matmul.cc, space_to_depth.cc,
    depth_to_space.cc, space_to_batch_nd.cc, reduce.cc, matrix_diag.cc); None for another
    op, or where its kernel would refuse its inputs, or an input's shape or integers are not
    known."""
    first, options, inputs = shapes[0], op.builtinOptions, [int(t) for t in op.inputs]
    assert first is not None  # (`_shaped` said so)
    rank = len(first)
    second = shapes[1] if len(shapes) > 1 else None
    operand = value(inputs[1]) if len(inputs) > 1 else None
    if kind in ("PAD", "PADV2", "MIRROR_PAD"):
        if operand is None or len(operand) != 2 * rank or min(operand, default=0) < 0:
            return None
        return [d + operand[2 * a] + operand[2 * a + 1] for a, d in enumerate(first)]
    if kind == "ONE_HOT" and operand is not None and len(operand) == 1 and operand[0] >= 0:
        axis = getattr(options, "axis", -1)
        axis += rank + 1 if axis < 0 else 0
        return [*first[:axis], operand[0], *first[axis:]] if 0 <= axis <= rank else None
    if kind == "SLICE" and len(inputs) == 3:
        begin, size = operand, value(inputs[2])
        if begin is None or size is None or not len(begin) == len(size) == rank:
            return None
        dims = [d - b if s == -1 else s for d, b, s in zip(first, begin, size, strict=True)]
        fits = all(
            b >= 0 and n >= 0 and b + n <= d for d, b, n in zip(first, begin, dims, strict=True)
        )
        return dims if fits else None
    if kind in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        if operand is None or len(operand) != 2 or rank != 4 or min(operand) <= 0:
            return None
        return [first[0], *operand, first[3]]
    if kind in ("SPACE_TO_DEPTH", "DEPTH_TO_SPACE") and rank == 4:
        block = getattr(options, "blockSize", 0)
        if block <= 0:
            return None
        b, h, w, c = first
        if kind == "DEPTH_TO_SPACE":
            return [b, h * block, w * block, c // block**2] if c % block**2 == 0 else None
        return [b, h // block, w // block, c * block**2] if h % block == w % block == 0 else None
    if kind == "SPACE_TO_BATCH_ND" and len(inputs) == 3:
        block, pads = operand, value(inputs[2])
        n = len(block or [])
        if block is None or pads is None or len(pads) != 2 * n or rank < n + 1:
            return None
        spatial = [first[1 + a] + pads[2 * a] + pads[2 * a + 1] for a in range(n)]
        if min(block, default=1) <= 0 or any(s % b for s, b in zip(spatial, block, strict=True)):
            return None
        batch = first[0] * math.prod(block)
        return [batch, *(s // b for s, b in zip(spatial, block, strict=True)), *first[1 + n :]]
    if kind == "WHERE":  # at most every position of its condition, each as `rank` int64s (where.cc)
        return [math.prod(first), rank]
    if kind == "MATRIX_DIAG":  # each vector the diagonal of a square matrix (matrix_diag.cc)
        return [*first, first[-1]] if first else None
    if second is None:
        return None
    if kind == "GATHER":
        axis, batch = getattr(options, "axis", 0), getattr(options, "batchDims", 0)
        axis += rank if axis < 0 else 0
        batch += len(second) if batch < 0 else 0
        if not 0 <= batch <= min(axis, len(second)) or not 0 <= axis < rank:
            return None
        return [*first[:axis], *second[batch:], *first[axis + 1 :]]
    if kind == "GATHER_ND":
        depth = second[-1] if second else 0
        if not second or depth > rank:
            return None
        return [*second[:-1], *first[depth:]]
    if kind == "FULLY_CONNECTED" and len(second) == 2:
        units, size = second
        if size <= 0 or math.prod(first) % size:
            return None
        if getattr(options, "keepNumDims", False):
            return [*first[:-1], units] if first and first[-1] == size else None
        return [math.prod(first) // size, units]
    if kind == "BATCH_MATMUL" and rank >= 2 and len(second) >= 2:
        rows = first[-1] if getattr(options, "adjX", False) else first[-2]
        columns = second[-2] if getattr(options, "adjY", False) else second[-1]
        batch = _broadcast([first[:-2], second[:-2]])
        return None if batch is None else [*batch, rows, columns]
    if kind == "EMBEDDING_LOOKUP" and len(first) == 1 and second:
        return [first[0], *second[1:]]
    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D") and rank == len(second) == 4:
        return _convolved(kind, first, second, options)
    if kind == "TRANSPOSE_CONV" and first == [4]:
        asked = value(inputs[0])  # (the output's shape: its first input's integers)
        return asked if asked is not None and min(asked) >= 0 else None
    if kind == "BATCH_TO_SPACE_ND" and len(inputs) == 3:
        return _batched(first, operand, value(inputs[2]))
    if kind == "STRIDED_SLICE" and len(inputs) == 4:
        return _sliced(first, options, operand, value(inputs[2]), value(inputs[3]))
    if kind in _REDUCED:
        axes = [a + (rank if a < 0 else 0) for a in operand or []]
        if operand is None or any(not 0 <= a < rank for a in axes):
            return None
        if getattr(options, "keepDims", False):
            return [1 if a in axes else d for a, d in enumerate(first)]
        return [d for a, d in enumerate(first) if a not in axes]
    return None


def _convolved(kind: str, image: list[int], kernel: list[int], options: Any) -> list[int] | None:
    """The shape a CONV_2D or DEPTHWISE_CONV_2D of an image of `image` ([batch, height, width,
    channels]) by a filter of `kernel` gives (conv.cc, depthwise_conv.cc: padding.h's
    ComputeOutSize, SAME ceil(size / stride), VALID (size + stride - (filter - 1) x dilation -
    1) / stride; its channels the filter's first dimension, a depthwise filter's last); None
    where its kernel would refuse them."""
    if options is None:
        return None
    sizes = []
    for size, filtered, stride, dilation in (
        (image[1], kernel[1], options.strideH, options.dilationHFactor),
        (image[2], kernel[2], options.strideW, options.dilationWFactor),
    ):
        if stride <= 0 or dilation <= 0:
            return None
        if options.padding == 0:  # SAME
            sizes.append((size + stride - 1) // stride)
        else:  # VALID
            sizes.append(max((size + stride - (filtered - 1) * dilation - 1) // stride, 0))
    return [image[0], *sizes, kernel[3] if kind == "DEPTHWISE_CONV_2D" else kernel[0]]


def _batched(dims: list[int], block: Any, crops: Any) -> list[int] | None:
    """The shape a BATCH_TO_SPACE_ND of a tensor of `dims` by `block` cropped by `crops` gives
    (batch_to_space_nd.cc); None where they are not known or its kernel would refuse them."""
    n = len(block or [])
    if block is None or crops is None or len(crops) != 2 * n or len(dims) < n + 1:
        return None
    if min(block, default=1) <= 0 or min(crops, default=0) < 0 or dims[0] % math.prod(block):
        return None
    spatial = [dims[1 + a] * block[a] - crops[2 * a] - crops[2 * a + 1] for a in range(n)]
    return (
        None
        if min(spatial, default=0) < 0
        else [dims[0] // math.prod(block), *spatial, *dims[1 + n :]]
    )


def _parted(
    kind: str, op: Any, shapes: list[list[int] | None], value: Callable[[int], Any]
) -> list[list[int]] | None:
    """The shapes of the outputs of a SPLIT (its axis its first input, the tensor its second),
    SPLIT_V (the tensor, its sizes, its axis) or UNPACK (split.cc, split_v.cc, unpack.cc: each a
    part of the tensor along the axis, an UNPACK's without it); None where the tensor's shape
    or the integers are not known, or its kernel would refuse them."""
    options, inputs = op.builtinOptions, [int(t) for t in op.inputs]
    if kind == "UNPACK":
        dims, axis = shapes[0], getattr(options, "axis", 0)
        if dims is None or not -len(dims) <= axis < len(dims):
            return None
        axis += len(dims) if axis < 0 else 0
        count = getattr(options, "num", 0)
        rest = [*dims[:axis], *dims[axis + 1 :]]
        return [rest] * count  # (its kernel asks for `num` outputs, of any axis' size)
    dims = shapes[1] if kind == "SPLIT" else shapes[0]
    if len(inputs) != (2 if kind == "SPLIT" else 3):
        return None
    at = value(inputs[0] if kind == "SPLIT" else inputs[2])
    if dims is None or at is None or len(at) != 1 or not -len(dims) <= at[0] < len(dims):
        return None
    axis = at[0] + (len(dims) if at[0] < 0 else 0)
    count = getattr(options, "numSplits", 0)
    if kind == "SPLIT":
        if count <= 0 or dims[axis] % count:
            return None
        sizes = [dims[axis] // count] * count
    else:
        asked = value(inputs[1])
        if asked is None or len(asked) != count or asked.count(-1) > 1:
            return None
        left = dims[axis] - sum(s for s in asked if s != -1)
        sizes = [left if s == -1 else s for s in asked]
        if min(sizes, default=0) < 0 or sum(sizes) != dims[axis]:
            return None
    return [[*dims[:axis], s, *dims[axis + 1 :]] for s in sizes]


def _sliced(dims: list[int], options: Any, begin: Any, end: Any, strides: Any) -> list[int] | None:
    """The shape a STRIDED_SLICE of a tensor of `dims` gives (strided_slice.cc: each axis
    sliced as Python slices a sequence, clamped to it, an axis of `shrinkAxisMask` dropped);
    None where its integers are not known, or it uses an ellipsis, a new axis or offsets."""
    if (
        begin is None
        or end is None
        or strides is None
        or not len(begin) == len(end) == len(strides)
    ):
        return None
    if options is None or options.ellipsisMask or options.newAxisMask or options.offset:
        return None
    if len(begin) > len(dims) or 0 in strides:
        return None
    out = []
    for a, d in enumerate(dims):
        if a >= len(begin):
            out.append(d)
            continue
        if options.shrinkAxisMask >> a & 1:
            if not -d <= begin[a] < d:
                return None
            continue
        start = None if options.beginMask >> a & 1 else begin[a]
        stop = None if options.endMask >> a & 1 else end[a]
        out.append(len(range(d)[slice(start, stop, strides[a])]))
    return out


def _broadcast(shapes: list[list[int]]) -> list[int] | None:
    """The shape `shapes` broadcast to (numpy's rule, TensorFlow Lite's); None where they do not."""
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[[1] * (rank - len(s)) + s for s in shapes], strict=True):
        other = {d for d in dims if d != 1}
        if len(other) > 1:
            return None
        out.append(other.pop() if other else 1)
    return out


def _reshaped(dims: list[int], asked: list[int]) -> list[int] | None:
    """The shape RESHAPE gives a tensor of `dims` asked for `asked` (one -1: the rest of its
    numbers); None where its kernel would refuse it."""
    count, known = math.prod(dims), math.prod(d for d in asked if d != -1)
    if asked.count(-1) > 1 or any(d < -1 for d in asked):
        return None
    if -1 in asked:
        if known <= 0 or count % known:
            return None
        return [count // known if d == -1 else d for d in asked]
    return asked if known == count else None


def _carried(
    model: Any,
    fb: Any,
    g: int,
    k: int,
    shape: Callable[[int], list[int] | None],
    made: dict[int, list[int]],
    memory: int,
    work: list[int],
) -> dict[int, tuple[str, list[int]]]:
    """What the WHILE of op `k` of subgraph `g` gives back (by output: how it is made, its
    shape): each loop variable it carries (its shape as `shape` reads it) as its body gives it
    back, iteration after iteration (`_made` of the body, given what the loop carries), for as
    many iterations as the loop runs (`_iterations`, `made` what it reads its bound from; none
    where the file does not bound it: the loop is refused). Where the body gives each back as
    it got it, one iteration says it; where it grows them by the same amount at each
    iteration, two (the rest follow: a CONCATENATION adds what it adds); otherwise, each
    iteration is followed until one is larger than the memory budget, at most `_FOLLOWED` of
    them in a check (_Unbounded past them). What the cond and the body make at each iteration
    followed (and at the last, where the rest follow) is held within the memory budget as
    their ops make it from what the loop carries (the WHILE kernel resizes their inputs to
    it, whatever they declare: `_budget`; _Unbounded naming what is not)."""
    caller = model.subgraphs[g]
    op = caller.operators[k]
    number = op.builtinOptions.bodySubgraphIndex
    body = model.subgraphs[number]
    inputs, outputs = [int(t) for t in op.inputs], [int(t) for t in op.outputs]
    ends = [int(t) for t in body.outputs]

    def inside(shapes: list[Any]) -> tuple[dict[int, list[int]], dict[int, Any], str | None]:
        """What the body is given (loop variables of `shapes`) and makes of it, and why what
        the cond or the body makes of it is refused (None: it is not)."""
        inner: dict[int, Any] = {}
        refused = None
        for sub in (op.builtinOptions.condSubgraphIndex, number):
            arguments = [int(t) for t in model.subgraphs[sub].inputs]
            given = {t: c for t, c in zip(arguments, shapes, strict=False) if c is not None}
            inner = _made(model, fb, sub, memory, given, work)
            why, nbytes, start = _budget(model, fb, sub, inner, memory, given)
            why = why or _together(nbytes, start, memory)
            if why and refused is None:
                refused = (
                    f"{why}, from what the WHILE loop of op {k} of subgraph {g} carries into it"
                )
        return given, inner, refused

    def larger(shapes: list[Any]) -> bool:  # (than the memory budget: the check refuses it)
        return any(
            c is not None and _nbytes(caller.tensors[t], c, fb) > memory
            for t, c in zip(inputs, shapes, strict=True)
            if t >= 0
        )

    carried = [shape(t) if t >= 0 else None for t in inputs]
    rows = max([c[0] for c in carried if c] or [1])
    count = _iterations(model, fb, g, op, rows, made)
    iterations = count if isinstance(count, int) else 0  # (an unbounded loop is refused)
    first, step, done = list(carried), None, 0
    while done < iterations:
        work[0] += 1
        if work[0] > _FOLLOWED:
            raise _Unbounded(
                f"gatetrace cannot bound what the WHILE loop of op {k} of subgraph {g} carries: its "
                f"body changes their shapes at every iteration ({_shown(first)} -> {_shown(carried)}) "
                f"past the {_FOLLOWED:,} iterations gatetrace follows; it runs no loop whose tensors "
                "it cannot bound"
            )
        given, inner, refused = inside(carried)
        new = [
            inner[ends[n]][2] if n < len(ends) and ends[n] in inner else
            given.get(ends[n], c) if n < len(ends) else c
            for n, c in enumerate(carried)
        ]  # fmt: skip
        done += 1
        change = _change(carried, new)
        if new != carried and larger(new):
            carried = new
            break  # (what it gives back is refused, naming the loop)
        if refused:
            raise _Unbounded(refused)
        if new == carried:
            break
        carried = new
        if change == step and change is not None and all(e >= 0 for by in change for e in by):
            # grown by as much at every iteration: the last is given what the one before
            # gives back
            last = _after(carried, change, iterations - done - 1)
            carried = _after(carried, change, iterations - done)
            refused = inside(last)[2] if done < iterations and not larger(carried) else None
            if refused:
                raise _Unbounded(refused)
            break
        step = change
    return {
        t: (
            "WHILE"
            if c == first[n]
            else f"WHILE whose body grows loop variable {n} at each of its {iterations:,} iterations",
            c,
        )
        for n, (t, c) in enumerate(zip(outputs, carried, strict=False))
        if c is not None and t >= 0
    }


def _after(shapes: list[Any], change: list[list[int]], n: int) -> list[Any]:
    """`shapes` (each known: `_change` says so) grown `n` times by `change`."""
    return [
        [d + n * e for d, e in zip(c, by, strict=True)]
        for c, by in zip(shapes, change, strict=True)
    ]


def _change(before: list[Any], after: list[Any]) -> list[list[int]] | None:
    """How much each dimension of each shape changed from `before` to `after`; None where a
    shape is not known, or changed its rank."""
    if any(a is None or b is None or len(a) != len(b) for a, b in zip(before, after, strict=True)):
        return None
    return [[y - x for x, y in zip(a, b, strict=True)] for a, b in zip(before, after, strict=True)]


def _shown(shapes: list[Any]) -> str:
    return ", ".join("?" if s is None else str(s) for s in shapes)


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
                why = _written_as_floats(kind, op, subgraph, fb)
                if why:
                    return f"{where}, a {kind} fed float32, {why}"
    main = subgraphs[0]
    if any(
        not 0 <= int(t) < len(main.tensors or [])
        for t in (main.inputs if main.inputs is not None else [])
    ):
        return "its main subgraph names an input outside its tensors"
    return None


# the inputs a recurrent op's kernel writes (its states), by kind
_STATES = {
    "LSTM": (18, 19),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (18, 19),
    "BIDIRECTIONAL_SEQUENCE_LSTM": (35, 36, 37, 38),
    "RNN": (4,),
    "UNIDIRECTIONAL_SEQUENCE_RNN": (4,),
    "BIDIRECTIONAL_SEQUENCE_RNN": (4, 8),
}


def _written_as_floats(kind: str, op: Any, subgraph: Any, fb: Any) -> str | None:
    """Why a recurrent op fed float32 is refused: a tensor its kernel writes as float32 (each
    output, each state) of another type, whose buffer the interpreter sizes by that type (its
    kernel would write 4 bytes a number where the buffer holds fewer, past its end); None
    where none is, or the op is not fed float32 (the basic LSTM kernel checks its types)."""
    inputs, outputs = [int(t) for t in op.inputs], [int(t) for t in op.outputs]
    if not inputs or inputs[0] < 0 or subgraph.tensors[inputs[0]].type != _FLOAT32:
        return None
    if kind == "LSTM" and len(inputs) == 5:
        return None
    types = _type_names(fb)
    written = [("output", t) for t in outputs]
    written += [("state", inputs[a]) for a in _STATES[kind] if a < len(inputs)]
    for role, t in written:
        if t >= 0 and subgraph.tensors[t].type != _FLOAT32:
            kind_of = types.get(subgraph.tensors[t].type, str(subgraph.tensors[t].type))
            return (
                f"has the {role} {_name(subgraph, t)} of type {kind_of}, which its kernel writes as "
                "float32 (4 bytes a number, past the end of the buffer the interpreter gives it); "
                "convert the model again"
            )
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

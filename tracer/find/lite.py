"""A TensorFlow Lite file's recurrent ops, found as cells to record (`LiteCell`).

The fused sequence ops of the main subgraph, their inputs by TensorFlow Lite's numbering:

    UNIDIRECTIONAL_SEQUENCE_LSTM
        0       the input sequence [batch, steps, features] ([steps, batch, ...] time-major)
        1-4     input-to-gate matrices [units, features] of the gates i, f, c, o
        5-8     recurrent-to-gate matrices [units, output] of i, f, c, o
        9-11    peepholes [units] of i, f, o (optional)
        12-15   biases [units] of i, f, c, o
        16, 17  projection matrix [output, units] and bias (optional)
        18, 19  the output state h and the cell state c the op starts from
        20-23   layer normalisation coefficients of i, f, c, o (optional)
    UNIDIRECTIONAL_SEQUENCE_RNN
        0 the input sequence, 1 weights [units, features], 2 recurrent weights [units,
        units], 3 bias [units], 4 the hidden state h it starts from
    BIDIRECTIONAL_SEQUENCE_LSTM (TF 1.x converters, `tf.lite.experimental.nn`)
        0 the input, 1-17 the forward half's inputs 1-17 above, 18-34 the backward half's,
        35, 36 the forward h and c it starts from, 37, 38 the backward's, 39-47 an
        auxiliary input and its weights (not recorded)
    BIDIRECTIONAL_SEQUENCE_RNN
        0 the input, 1-4 the forward half's inputs 1-4 above, 5-8 the backward half's, 9-11
        an auxiliary input and its weights (not recorded)

A bidirectional op is recorded as its two halves, `NAME/forward` and `NAME/backward`, each
the unidirectional op it equals: the backward half reads the sequence from its end and writes
its outputs by input position, in the op's second output or, where the op merges them
(`merge_outputs`), in the last columns of its one output.

Each becomes a `LiteCell` whose `arrays` are held as a Keras layer's (`kernel`: the
input-to-gate matrices transposed and stacked on the recurrent ones, one column block a
gate; `bias`; peepholes `w_i_diag`, `w_f_diag`, `w_o_diag`; `projection`), so the replay
of `tracer.values.replay` runs it. Weights are the file's constants (float32, or float16
through a DEQUANTIZE op, widened exactly). A quantised op keeps its codes beside them, W, U
and b given dequantised: int8 matrices of float activations (dynamic range: `LiteHybrid`,
replayed by `tracer.values.hybrid`); an LSTM of int8 inputs, matrices and output state and an
int16 cell state (full integer: `LiteInteger`, replayed by `tracer.values.integer`). What is
not recorded exactly is refused in one line naming the op: layer normalisation, a CIFG LSTM
(no input gate), a projection bias, an activation with no replay, a bidirectional op's
auxiliary input, a quantised op with peepholes or a projection, int16 activations (16x8);
and what no TensorFlow Lite kernel runs as the file says: an op of other numbers of inputs
and outputs than its kind's kernel takes (an op recoded), a quantisation scale that is not
a positive finite number (value = scale x (code - zero point)).
The cells of WHILE loops are `tracer.find.lite_loops`'.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError, NoCellFoundError
from tracer.cells.found import LiteCell, LiteHybrid, LiteInteger
from tracer.cells.kinds import LITE_LSTM, LITE_RNN
from tracer.find.lite_loops import find_loops
from tracer.load.tflite import ACTIVATIONS, LiteModel, tensor_name
from tracer.load.tflite_check import RECURRENT

__all__ = ["find_ops"]

# the replay's activation for a fused op's `fusedActivationFunction` (the others: none)
_REPLAYED = {
    "tanh": "tanh",
    "relu": "relu",
    "relu6": "relu6",
    "sigmoid": "sigmoid",
    "none": "linear",
}
_LSTM_GATES = "ifco"  # the op's gate order, Keras' (c is the spec's j)
# a bidirectional op's halves: the numbers of its inputs each half reads, in the order the
# unidirectional op reads them, and those of its auxiliary input (module docstring)
_HALVES = {
    "BIDIRECTIONAL_SEQUENCE_LSTM": (
        {"forward": [0, *range(1, 18), 35, 36], "backward": [0, *range(18, 35), 37, 38]},
        range(39, 48),
    ),
    "BIDIRECTIONAL_SEQUENCE_RNN": (
        {"forward": [0, 1, 2, 3, 4], "backward": [0, 5, 6, 7, 8]},
        range(9, 12),
    ),
}
_NUMPY = {"FLOAT32": np.float32, "FLOAT16": np.float16}
# how many inputs each op's TensorFlow Lite kernel takes and how many outputs it writes (its
# Prepare's checks; a bidirectional op writes one where its options merge its halves' outputs)
_ARITY = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ((20, 24), 1),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ((5,), 1),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ((48,), 2),
    "BIDIRECTIONAL_SEQUENCE_RNN": ((12,), 2),
}


def find_ops(model: LiteModel) -> list[LiteCell]:
    """Every recurrent op of the file, as a cell; GraphPatternError naming the first that
    cannot be recorded exactly, NoCellFoundError where there is none."""
    main, cells = model.main, []
    for k, op in enumerate(main.operators or []):
        kind = model.op_kind(op)
        if kind in _ARITY:
            _check_arity(model, k, op, kind)
        if kind == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            cells.append(_lstm(model, k, op))
        elif kind == "UNIDIRECTIONAL_SEQUENCE_RNN":
            cells.append(_rnn(model, k, op))
        elif kind in _HALVES:
            cells += _halves(model, k, op, kind)
        elif kind in RECURRENT:
            raise GraphPatternError(
                f"{model.source}: op {k} is a {kind}, which gatetrace does not record yet; it records the "
                "UNIDIRECTIONAL_ and BIDIRECTIONAL_SEQUENCE_LSTM and _RNN ops: record the model it was "
                "converted from"
            )
    cells += [replace(c, backward=_reversed(model, c.inputs, time=0)) for c in find_loops(model)]
    if not cells:
        raise NoCellFoundError(
            f"{model.source}: a TensorFlow Lite file with no recurrent op ({model.describe()})"
        )
    names = [c.name for c in cells]  # two ops of one name: told apart by their number
    return [c if names.count(c.name) == 1 else replace(c, name=f"{c.name}_op{c.op}") for c in cells]


def _check_arity(model: LiteModel, k: int, op: Any, kind: str) -> None:
    """GraphPatternError unless the op has as many inputs and outputs as TensorFlow Lite's
    kernel of its kind takes (`_ARITY`): an op recoded as another kind has not."""
    takes, writes = _ARITY[kind]
    merged = bool(getattr(op.builtinOptions, "mergeOutputs", False))
    if kind.startswith("BIDIRECTIONAL") and merged:
        writes = 1
    inputs = len(op.inputs) if op.inputs is not None else 0
    outputs = len(op.outputs) if op.outputs is not None else 0
    if inputs not in takes or outputs != writes:
        how = ""
        if kind.startswith("BIDIRECTIONAL"):
            how = " (its options merge its halves' outputs)" if merged else " (one a half)"
        raise GraphPatternError(
            f"{model.source}: op {k} is a {kind} of {_count(inputs, 'input')} and {_count(outputs, 'output')}; "
            f"TensorFlow Lite's {kind} takes {' or '.join(map(str, takes))} inputs and writes "
            f"{_count(writes, 'output')}{how}, so the op is not one (recoded from another kind?): convert the "
            "model again"
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _halves(model: LiteModel, k: int, op: Any, kind: str) -> list[LiteCell]:
    """A bidirectional op's two halves, each as the unidirectional op it equals."""
    numbers, auxiliary = _HALVES[kind]
    inputs = [int(t) for t in op.inputs]
    if any(at < len(inputs) and inputs[at] >= 0 for at in auxiliary):
        raise GraphPatternError(
            f"{model.source}: op {k} ({kind}) reads an auxiliary input, which gatetrace does not replay"
        )
    merged = bool(getattr(op.builtinOptions, "mergeOutputs", False))
    one = _lstm if "LSTM" in kind else _rnn
    name, cells = _name(model, op), list[LiteCell]()
    for half, at in numbers.items():
        view = SimpleNamespace(
            inputs=[inputs[n] if n < len(inputs) else -1 for n in at],
            outputs=[int(op.outputs[0 if merged or half == "forward" else 1])],
            builtinOptions=op.builtinOptions,
        )
        cell = one(model, k, view, kind)
        start = 0 if half == "forward" else cells[0].output_size
        cells.append(
            replace(
                cell,
                name=f"{name}/{half}",
                backward=cell.backward != (half == "backward"),
                output_columns=(start, start + cell.output_size) if merged else None,
                by_position=half == "backward",
            )
        )
    return cells


def _name(model: LiteModel, op: Any) -> str:
    """A cell's name, as the file names the layer's output: the first output of the file's
    signature that the op's output is, or reaches through ops that only pick, move or
    re-encode its values (`_PASSED_ON`: the last step of a layer that returns it, the
    QUANTIZE and DEQUANTIZE of a full-integer file); in a file without a signature, the
    file's output it reaches so; else the op's output tensor. So one model's float,
    dynamic-range and full-integer files give a cell the same name: the Keras layer's, where
    the signature names it."""
    reached = _reached(model, int(op.outputs[0]))
    named = {}
    for signature in model.parsed.signatureDefs or []:
        if signature.subgraphIndex == 0:
            named = {int(t.tensorIndex): t.name.decode() for t in signature.outputs or []}
            break
    ends = named or [int(t) for t in model.main.outputs]
    for tensor in reached:
        if tensor in ends:
            return named.get(tensor) or tensor_name(model.main.tensors[tensor]).split(":")[0]
    return tensor_name(model.main.tensors[reached[0]]).split(":")[0]


# ops whose output holds only values of their first input's (picked, moved or re-encoded)
_PASSED_ON = {
    "QUANTIZE",
    "DEQUANTIZE",
    "STRIDED_SLICE",
    "SLICE",
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "TRANSPOSE",
    "REVERSE_V2",
}


def _reached(model: LiteModel, tensor: int) -> list[int]:
    """`tensor`, then the tensors it reaches through `_PASSED_ON` ops, nearest first."""
    found, k = [tensor], 0
    while k < len(found):
        for op in model.main.operators:
            if (
                len(op.inputs)
                and int(op.inputs[0]) == found[k]
                and len(op.outputs) == 1
                and int(op.outputs[0]) not in found
                and model.op_kind(op) in _PASSED_ON
            ):
                found.append(int(op.outputs[0]))
        k += 1
    return found


def _scale_problem(scale: float) -> str | None:
    """Why a tensor's quantisation scale is refused (None: it is not): TensorFlow Lite holds
    a real value as scale x (code - zero point), with a positive finite scale."""
    if math.isfinite(scale) and scale > 0:
        return None
    return (
        f"is {scale:g}; a quantisation scale is a positive finite number (a value is scale x (code - zero "
        "point)), so the file is damaged: convert the model again"
    )


class _Reader:
    """One op's input tensors as arrays, each checked to be a float constant."""

    def __init__(self, model: LiteModel, k: int, op: Any, kind: str):
        self.model, self.op, self.where = model, op, f"{model.source}: op {k} ({kind})"
        self.types = {
            v: n for n, v in vars(model.schema.TensorType).items() if not n.startswith("_")
        }
        self.inputs = [int(i) for i in op.inputs]
        self.widened = False  # a weight read through DEQUANTIZE (float16 in the file)
        self.dequantized = {
            int(o.outputs[0]): int(o.inputs[0])
            for o in model.main.operators or []
            if model.op_kind(o) == "DEQUANTIZE"
        }

    def given(self, at: int) -> bool:
        return at < len(self.inputs) and self.inputs[at] >= 0

    def tensor(self, at: int) -> int:
        return self.inputs[at]

    def type_of(self, at: int) -> str:
        return self.types.get(self.model.main.tensors[self.inputs[at]].type, "?")

    def array(self, at: int, what: str) -> np.ndarray:
        """Input `at` as a float32 array, from the file's buffer."""
        index = self.inputs[at]
        self.widened |= index in self.dequantized
        index = self.dequantized.get(index, index)  # a float16 constant widened by DEQUANTIZE
        t = self.model.main.tensors[index]
        kind = self.types.get(t.type, "?")
        if kind not in _NUMPY:
            raise GraphPatternError(
                f"{self.where}: its {what} are {kind.lower()} (the model is quantised); gatetrace records a "
                "quantised op only where it can reproduce the interpreter's integer arithmetic exactly, which it "
                "does not yet: record the float model (converted without optimizations)"
            )
        data = self.model.parsed.buffers[t.buffer].data
        if data is None or not len(data):
            raise GraphPatternError(
                f"{self.where}: its {what} ({tensor_name(t)}) are computed by other ops, not stored in the file; "
                "gatetrace reads an op's weights from the file's constants"
            )
        shape = [int(d) for d in t.shape]
        return np.frombuffer(bytes(data), _NUMPY[kind]).reshape(shape).astype(np.float32)

    def name(self, at: int) -> str:
        return tensor_name(self.model.main.tensors[self.inputs[at]])

    def quantised(
        self,
        at: int,
        what: str,
        kernel: str = "its hybrid kernel (int8 weights, float activations)",
        reads: str = "int8 matrices",
    ) -> tuple[np.ndarray, np.float32]:
        """Input `at` as a quantised kernel reads it: its codes (int8, or int32 where `reads`
        says so), from the file's buffer, and the one scale (symmetric: zero point 0)."""
        kind = reads.split()[0].upper()
        t = self.model.main.tensors[self.inputs[at]]
        q = t.quantization
        scales = [] if q is None or q.scale is None else [float(v) for v in q.scale]
        zeros = [] if q is None or q.zeroPoint is None else [int(v) for v in q.zeroPoint]
        if self.type_of(at) != kind or len(scales) != 1 or any(zeros):
            found = f"{self.type_of(at).lower()} with {len(scales)} scales, zero points {zeros[:3]}"
            raise GraphPatternError(
                f"{self.where}: its {what} are {found}; {kernel} reads {reads} of one scale and zero "
                "point 0, and gatetrace replays only that"
            )
        why = _scale_problem(scales[0])
        if why:
            raise GraphPatternError(
                f"{self.where}: the scale of its {what} ({tensor_name(t)}) {why}"
            )
        numpy_type = np.dtype(np.int8 if kind == "INT8" else np.int32)
        shape = [int(d) for d in t.shape]
        data = self.model.parsed.buffers[t.buffer].data
        if data is None or len(data) != int(np.prod(shape)) * numpy_type.itemsize:
            raise GraphPatternError(
                f"{self.where}: its {what} ({tensor_name(t)}) are not stored in the file as {kind.lower()} codes"
            )
        codes = np.frombuffer(bytes(data), numpy_type).reshape(shape)
        return codes, np.float32(scales[0])


def _hybrid(
    reader: _Reader, inputs: tuple[int, ...], recurrent: tuple[int, ...]
) -> tuple[LiteHybrid, list[np.ndarray], list[np.ndarray]]:
    """A hybrid op's int8 matrices (`inputs` and `recurrent`: their input numbers, one a
    gate, in the spec's order): as `LiteHybrid`, and dequantised (scale x code, as the
    weights table gives them)."""
    read = [reader.quantised(at, "input weights") for at in inputs]
    rec = [reader.quantised(at, "recurrent weights") for at in recurrent]
    units = read[0][0].shape[0]
    hybrid = LiteHybrid(
        codes=np.concatenate(
            [
                np.concatenate([c.T for c, _ in read], axis=1),
                np.concatenate([c.T for c, _ in rec], axis=1),
            ]
        ),
        input_scales=np.repeat(np.array([s for _, s in read], np.float32), units),
        recurrent_scales=np.repeat(np.array([s for _, s in rec], np.float32), units),
        asymmetric=bool(getattr(reader.op.builtinOptions, "asymmetricQuantizeInputs", False)),
    )
    return (
        hybrid,
        [c.astype(np.float32) * s for c, s in read],
        [c.astype(np.float32) * s for c, s in rec],
    )


def _integer(
    reader: _Reader, op: Any
) -> tuple[LiteInteger, list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """A full-integer LSTM op's codes and scales (`LiteInteger`), and its matrices and biases
    dequantised (scale x code, as the weights table gives them). What the integer kernel
    would compute otherwise than `tracer.values.integer` replays is refused in one line."""
    where, model = reader.where, reader.model
    extras = [
        what
        for at, what in ((9, "peepholes"), (16, "a projection"), (20, "layer normalisation"))
        if reader.given(at)
    ]
    if extras:
        raise GraphPatternError(
            f"{where}: a full-integer LSTM with {' and '.join(extras)}, whose integer arithmetic gatetrace "
            "does not reproduce yet: record the float model (converted without optimizations)"
        )
    intermediates = [int(t) for t in (op.intermediates if op.intermediates is not None else [])]
    if len(intermediates) != 5:
        raise GraphPatternError(
            f"{where}: a full-integer LSTM with {len(intermediates)} intermediate tensors; gatetrace reproduces the "
            "kernel of int8 activations and an int16 cell state, whose op has 5 (what TensorFlow's converter "
            "writes): record the float model"
        )
    shown = ACTIVATIONS.get(getattr(op.builtinOptions, "fusedActivationFunction", 0), "?")
    if shown != "tanh":
        raise GraphPatternError(
            f"{where}: a full-integer LSTM whose activation is {shown}; TensorFlow Lite's integer kernel "
            "applies tanh whatever the op says, so gatetrace does not say what it computed"
        )

    def quant(tensor: int, kind: str, what: str) -> tuple[float, int]:
        t = model.main.tensors[tensor]
        q = t.quantization
        scales = [] if q is None or q.scale is None else [float(v) for v in q.scale]
        zeros = [] if q is None or q.zeroPoint is None else [int(v) for v in q.zeroPoint]
        found = reader.types.get(t.type, "?")
        if found != kind:
            raise GraphPatternError(
                f"{where}: its {what} ({tensor_name(t)}) is {found.lower()}; TensorFlow Lite's integer LSTM "
                f"kernel reads {kind.lower()} there"
            )
        if len(scales) != 1 or len(zeros) > 1:
            raise GraphPatternError(
                f"{where}: its {what} ({tensor_name(t)}) has {len(scales)} scales and {len(zeros)} zero points; "
                "TensorFlow Lite's integer LSTM kernel reads one of each there (one for the whole tensor)"
            )
        why = _scale_problem(scales[0])
        if why:
            raise GraphPatternError(f"{where}: the scale of its {what} ({tensor_name(t)}) {why}")
        return scales[0], zeros[0] if zeros else 0

    kernel = "TensorFlow Lite's integer LSTM kernel"
    W = [reader.quantised(at, "input weights", kernel) for at in range(1, 5)]
    U = [reader.quantised(at, "recurrent weights", kernel) for at in range(5, 9)]
    b = [reader.quantised(at, "biases", kernel, "int32 biases") for at in range(12, 16)]
    input_scale, input_zero = quant(reader.tensor(0), "INT8", "input")
    h_scale, h_zero = quant(reader.tensor(18), "INT8", "output state")
    cell_scale, _ = quant(reader.tensor(19), "INT16", "cell state")
    hidden_scale, hidden_zero = quant(intermediates[4], "INT8", "hidden intermediate")
    exponent = round(float(np.log2(cell_scale)))
    # the kernel's Prepare takes the cell state's scale as 2^exponent (refusing another
    # scale, and an exponent above -9); it rounds i x j down 30 + exponent bits (a left
    # shift below -30, which the replay does not compute), and where 15 + exponent is
    # negative it applies no tanh (tracer.values.integer)
    if abs(float(np.log2(cell_scale)) - exponent) >= 1e-3 or exponent > -9:
        raise GraphPatternError(
            f"{where}: its cell state's scale is {cell_scale:g}; TensorFlow Lite's integer LSTM kernel "
            "takes a power of two of at most 2^-9 there and refuses this file too (its interpreter "
            "fails to allocate tensors): convert the model again"
        )
    if exponent < -30:
        raise GraphPatternError(
            f"{where}: its cell state's scale is {cell_scale:g}; gatetrace reproduces TensorFlow Lite's "
            "integer LSTM kernel for a power of two from 2^-30 to 2^-9 there: record the float model"
        )
    integer = LiteInteger(
        input_codes=np.stack([c for c, _ in W]),
        recurrent_codes=np.stack([c for c, _ in U]),
        biases=np.stack([c.astype(np.int64) for c, _ in b]),
        input_weight_scales=tuple(float(s) for _, s in W),
        recurrent_weight_scales=tuple(float(s) for _, s in U),
        input_scale=input_scale,
        input_zero=input_zero,
        h_scale=h_scale,
        h_zero=h_zero,
        cell_scale=cell_scale,
        cell_exponent=exponent,
        hidden_scale=hidden_scale,
        hidden_zero=hidden_zero,
        cell_clip=float(getattr(op.builtinOptions, "cellClip", 0.0) or 0.0),
    )
    real = [[c.astype(np.float32) * np.float32(s) for c, s in group] for group in (W, U, b)]
    return integer, real[0], real[1], real[2]


def _activation(reader: _Reader, options: Any) -> str:
    shown = ACTIVATIONS.get(getattr(options, "fusedActivationFunction", 0), "?")
    if shown not in _REPLAYED:
        raise GraphPatternError(
            f"{reader.where}: its activation is {shown}, which gatetrace does not replay"
        )
    return _REPLAYED[shown]


def _input_checks(
    reader: _Reader, model: LiteModel, integer: bool = False
) -> tuple[int, int | None]:
    """The op's input features and number of steps; its input must be float (or, where
    the op runs an `integer` kernel gatetrace replays, int8)."""
    x = model.main.tensors[reader.tensor(0)]
    found = reader.type_of(0)
    if integer and found == "INT16":
        raise GraphPatternError(
            f"{reader.where}: its input is int16 (16x8 quantisation: int16 activations); gatetrace reproduces "
            "TensorFlow Lite's integer LSTM kernel for int8 activations only: record the float or the int8 model"
        )
    if found != "FLOAT32" and not (integer and found == "INT8"):
        raise GraphPatternError(
            f"{reader.where}: its input is {found.lower()} (the model is quantised for integer arithmetic); "
            "gatetrace records this op from float models only: record the float model"
        )
    shape = [int(d) for d in x.shape]
    time_major = bool(getattr(reader.op.builtinOptions, "timeMajor", False))
    steps = shape[0 if time_major else 1] if len(shape) == 3 else None
    return shape[-1], steps


def _reversed(model: LiteModel, tensor: int, time: int) -> bool:
    """Whether `tensor` is a sequence reversed along its `time` axis: a REVERSE_V2's output
    (as TensorFlow Lite converts `go_backwards` and a Bidirectional layer's backward half),
    so that the op or loop reading it reads position steps - 1 - t at its step t."""
    for op in model.main.operators or []:
        if int(op.outputs[0]) == tensor and model.op_kind(op) == "REVERSE_V2":
            axis = model.main.tensors[int(op.inputs[1])]
            data = model.parsed.buffers[axis.buffer].data
            rank = len(model.main.tensors[tensor].shape)
            axes = [] if data is None else np.frombuffer(bytes(data), np.int32).tolist()
            if [int(a) % max(rank, 1) for a in axes] != [time]:
                raise GraphPatternError(
                    f"{model.source}: the sequence {tensor_name(model.main.tensors[tensor])} is reversed along "
                    f"axes {axes}, not along time ({time}); gatetrace does not know which step reads which position"
                )
            return True
    return False


def _backward(reader: _Reader) -> bool:
    """Whether the op reads its sequence reversed along time (`_reversed`)."""
    time = 0 if getattr(reader.op.builtinOptions, "timeMajor", False) else 1
    return _reversed(reader.model, reader.tensor(0), time)


def _lstm(
    model: LiteModel, k: int, op: Any, kind: str = "UNIDIRECTIONAL_SEQUENCE_LSTM"
) -> LiteCell:
    reader = _Reader(model, k, op, kind)
    options = op.builtinOptions
    if not reader.given(1):
        raise GraphPatternError(
            f"{reader.where}: it is a CIFG LSTM (no input gate: i = 1 - f), which gatetrace does not replay"
        )
    if any(reader.given(at) for at in range(20, 24)):
        raise GraphPatternError(
            f"{reader.where}: it normalises its gates' layers (layer-norm LSTM), which gatetrace does not replay"
        )
    if reader.given(17):
        raise GraphPatternError(
            f"{reader.where}: its projection has a bias, which gatetrace does not replay"
        )
    features, steps = _input_checks(reader, model, integer=kind == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    hybrid = integer = None
    if reader.type_of(0) == "INT8":  # full integer: int8 activations, an int16 cell state
        integer, W, U, b = _integer(reader, op)
    elif reader.type_of(1) == "INT8":  # dynamic range: int8 matrices, float activations
        extras = [what for at, what in ((9, "peepholes"), (16, "projection")) if reader.given(at)]
        if extras:
            raise GraphPatternError(
                f"{reader.where}: a hybrid (int8 weights) LSTM with {' and '.join(extras)}, which "
                "gatetrace does not replay yet: record the float model (converted without optimizations)"
            )
        hybrid, W, U = _hybrid(reader, (1, 2, 3, 4), (5, 6, 7, 8))
    else:
        W = [reader.array(at, "input weights") for at in range(1, 5)]
        U = [reader.array(at, "recurrent weights") for at in range(5, 9)]
    if integer is None:
        b = [reader.array(at, "biases") for at in range(12, 16)]
    units = W[0].shape[0]
    arrays = {
        "kernel": np.concatenate(
            [np.concatenate([w.T for w in W], axis=1), np.concatenate([u.T for u in U], axis=1)]
        ),
        "bias": np.concatenate(b),
    }
    roles = {f"W_{g}": reader.name(1 + n) for n, g in enumerate(_LSTM_GATES)}
    roles |= {f"U_{g}": reader.name(5 + n) for n, g in enumerate(_LSTM_GATES)}
    roles |= {f"b_{g}": reader.name(12 + n) for n, g in enumerate(_LSTM_GATES)}
    for at, role in ((9, "w_i_diag"), (10, "w_f_diag"), (11, "w_o_diag")):
        if reader.given(at):
            arrays[role], roles[role] = reader.array(at, "peepholes"), reader.name(at)
    output = units
    if reader.given(16):
        projection = reader.array(16, "projection")
        arrays["projection"], roles["projection"] = projection.T, reader.name(16)
        output = projection.shape[0]
    clip = float(getattr(options, "cellClip", 0.0) or 0.0)
    proj_clip = float(getattr(options, "projClip", 0.0) or 0.0)
    return LiteCell(
        name=_name(model, op),
        spec=LITE_LSTM,
        units=units,
        input_size=features,
        output_size=output,
        activation=_activation(reader, options),
        recurrent_activation="sigmoid",
        arrays=arrays,
        variables=roles,
        op=k,
        inputs=reader.tensor(0),
        outputs=int(op.outputs[0]),
        initial={"h": reader.tensor(18), "c": reader.tensor(19)},
        length=steps,
        time_major=bool(getattr(options, "timeMajor", False)),
        backward=_backward(reader),
        cell_clip=clip or None,
        proj_clip=proj_clip or None,
        numbers=_numbers(reader, hybrid, integer),
        hybrid=hybrid,
        integer=integer,
    )


def _rnn(model: LiteModel, k: int, op: Any, kind: str = "UNIDIRECTIONAL_SEQUENCE_RNN") -> LiteCell:
    reader = _Reader(model, k, op, kind)
    features, steps = _input_checks(reader, model)
    hybrid = None
    if reader.type_of(1) == "INT8":  # dynamic range: int8 matrices, float activations
        hybrid, (W,), (U,) = _hybrid(reader, (1,), (2,))
    else:
        W, U = reader.array(1, "weights"), reader.array(2, "recurrent weights")
    b = reader.array(3, "bias")
    return LiteCell(
        name=_name(model, op),
        spec=LITE_RNN,
        units=W.shape[0],
        input_size=features,
        output_size=W.shape[0],
        activation=_activation(reader, op.builtinOptions),
        recurrent_activation="sigmoid",
        arrays={"kernel": np.concatenate([W.T, U.T]), "bias": b},
        variables={"W": reader.name(1), "U": reader.name(2), "b": reader.name(3)},
        op=k,
        inputs=reader.tensor(0),
        outputs=int(op.outputs[0]),
        initial={"h": reader.tensor(4)},
        length=steps,
        time_major=bool(getattr(op.builtinOptions, "timeMajor", False)),
        backward=_backward(reader),
        numbers=_numbers(reader, hybrid),
        hybrid=hybrid,
    )


def _numbers(reader: _Reader, hybrid: LiteHybrid | None, integer: LiteInteger | None = None) -> str:
    """How an op's weights are stored (`LiteCell.numbers`)."""
    if integer is not None:
        return "int8 full integer (int8 activations and weights, int16 cell state: integer kernel)"
    if hybrid is not None:
        how = "asymmetric" if hybrid.asymmetric else "symmetric"
        return f"int8 dynamic range (hybrid kernel, inputs quantised {how} per row)"
    return "float16" if reader.widened else "float32"

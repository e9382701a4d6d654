"""Keras' LSTM, GRU and SimpleRNN layers in a TensorFlow Lite file, lowered to a WHILE loop
of builtin ops (Keras 3 converts every recurrent layer so, tf-keras its GRU and SimpleRNN).

A loop's body subgraph reads its loop variables (counters, the outputs so far, the states,
the input sequence [steps, 1, features]) and returns them for the next iteration. In it:

    GATHER(sequence, step)              what an iteration reads
    FULLY_CONNECTED(x, W), (h, U)       the input and recurrent products, [k * units] wide
    SPLIT(..., k)                       their gate blocks, in the layer's gate order
    LOGISTIC, TANH, RELU                each gate's nonlinearity: a gate is one whose input is
                                        a sum (ADD, RESHAPE between) of one SPLIT block
                                        (block g of both products' SPLITs: gate g)

Four blocks of sigmoid, sigmoid, activation, sigmoid are an LSTM (i, f, c, o); three of
sigmoid, sigmoid, activation a GRU (z, r, h); no SPLIT and one nonlinearity of a sum of the
two products a SimpleRNN. The states are the float loop variables [batch, units] wide: `h` the
one a FULLY_CONNECTED multiplies, `c` the other. A loop that fits none of these is refused in
one line.

What a loop carries is read from the file's interpreter, not from the shapes its subgraphs
declare: converters declare a body's tensors with other shapes than the loop carries (a
stacked sequence as its first element's, anything as [1, 1, 1] where it was not known when
they wrote it), and the WHILE kernel resizes them to what it carries. The main subgraph runs
once on zeros (`_carried`), and what each WHILE received there gives the steps (the
sequence's rows), the features and the units (its `h`'s width). A loop variable the body
passes on unchanged is the main subgraph's tensor it starts from: where that is a constant (a
converter of TensorFlow 2.2-2.4 passed the weights so), it is read as the body's own.

The gates are not recomputed: the body runs an iteration at a time in the file's own
interpreter, and each gate is what its nonlinearity read and returned
(`tracer.values.lite`). The weights are read from the file (the products' matrices, the
biases the products add), and a cell's `arrays` are kept only where a replay from them
gives every gate of the batch within the replay's tolerance. A dynamic-range file
(`Optimize.DEFAULT`) holds its matrices as int8 codes with a scale (and zero point) per
output channel: they are read dequantised, scale x (code - zero point), and the cell says
so (`numbers`); its FULLY_CONNECTED ops quantise their float input a row at a time, so the
replay's tolerance there is that quantisation's bound (half a step of the row's range times
each column's absolute weights), far below what a block read wrongly gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer.cells.found import LiteBody, LiteCell
from tracer.cells.kinds import KERAS_GRU, KERAS_LSTM, KERAS_SIMPLE_RNN, CellSpec
from tracer.load.tflite import LiteModel, tensor_name

__all__ = ["find_loops"]

_NONLINEAR = {"LOGISTIC": "sigmoid", "TANH": "tanh", "RELU": "relu"}
_THROUGH = ("ADD", "RESHAPE")  # a gate's preactivation is a sum of blocks
_BOOL = 6  # the schema's TensorType.BOOL
_FLOAT32, _INT8 = 0, 9  # the schema's TensorType.FLOAT32 and INT8


class _Graph:
    """One loop body's ops, by what they write, with the file's constants (a loop variable the
    body passes on unchanged read as the main subgraph's tensor it starts from)."""

    def __init__(self, model: LiteModel, index: int, loop: Any):
        self.model, self.subgraph = model, model.parsed.subgraphs[index]
        self.ops = list(self.subgraph.operators)
        self.kinds = [model.op_kind(op) for op in self.ops]
        self.writer = {int(t): k for k, op in enumerate(self.ops) for t in op.outputs}
        self.dequantized: set[int] = set()  # int8 constants read as their real values
        body = self.subgraph
        self.outer = {
            int(body.inputs[n]): int(loop.inputs[n])
            for n in range(min(len(body.inputs), len(body.outputs), len(loop.inputs)))
            if int(body.outputs[n]) == int(body.inputs[n])
        }

    def readers(self, tensor: int) -> Iterator[int]:
        return (k for k, op in enumerate(self.ops) if tensor in [int(t) for t in op.inputs])

    def constant(self, tensor: int) -> np.ndarray | None:
        """A float32 constant, or an int8 one dequantised (scale x (code - zero point), per
        channel along its quantised dimension); None for anything else."""
        if tensor in self.outer:
            value = _constant(self.model, self.model.main.tensors[self.outer[tensor]])
        else:
            value = _constant(self.model, self.subgraph.tensors[tensor])
        if value is None:
            return None
        if value.dtype != np.float32:  # (int8 codes, dequantised)
            self.dequantized.add(tensor)
        return value.astype(np.float32)

    def blocks(self, tensor: int) -> set[tuple[int, int]]:
        """The (SPLIT op, block) pairs a sum reaching `tensor` adds."""
        k = self.writer.get(tensor)
        if k is None:
            return set()
        if self.kinds[k] == "SPLIT":
            return {(k, [int(t) for t in self.ops[k].outputs].index(tensor))}
        if self.kinds[k] in _THROUGH:
            return {b for t in self.ops[k].inputs[:2] if t >= 0 for b in self.blocks(int(t))}
        return set()

    def products(self, tensor: int) -> set[int]:
        """The FULLY_CONNECTED ops a sum reaching `tensor` adds."""
        k = self.writer.get(tensor)
        if k is None:
            return set()
        if self.kinds[k] == "FULLY_CONNECTED":
            return {k}
        if self.kinds[k] in _THROUGH:
            return {p for t in self.ops[k].inputs[:2] if t >= 0 for p in self.products(int(t))}
        return set()


def _constant(model: LiteModel, t: Any) -> np.ndarray | None:
    """What tensor `t` holds in the file: a float32 constant, or an int8 one dequantised
    (float64: scale x (code - zero point), per channel along its quantised dimension); None
    for anything else."""
    data = model.parsed.buffers[t.buffer].data
    shape = [int(d) for d in t.shape]
    if data is None or not len(data):
        return None
    if t.type == _FLOAT32:
        return np.frombuffer(bytes(data), np.float32).reshape(shape)
    q = t.quantization
    if t.type != _INT8 or q is None or q.scale is None or not len(q.scale):
        return None
    codes = np.frombuffer(bytes(data), np.int8).reshape(shape).astype(np.float64)
    axis = int(q.quantizedDimension or 0) if len(q.scale) > 1 else 0
    if len(q.scale) not in (1, shape[axis] if shape else 1):
        return None
    along = [1] * len(shape)
    if shape:
        along[axis] = len(q.scale)
    scale = np.asarray(q.scale, np.float64).reshape(along)
    zero = (
        np.zeros_like(scale)
        if q.zeroPoint is None
        else np.asarray(q.zeroPoint, np.float64).reshape(along)
    )
    return scale * (codes - zero)


def find_loops(model: LiteModel) -> list[LiteCell]:
    """The cell of every WHILE loop of the main subgraph (see the module docstring): each
    body read first (what is no Keras cell refused before anything runs), then what each
    loop carries, from one run of the main subgraph."""
    loops = [
        (k, op, _read(model, k, op))
        for k, op in enumerate(model.main.operators)
        if model.op_kind(op) == "WHILE"
    ]
    if not loops:
        return []
    carried = _carried(model, [op for _, op, _ in loops])
    return [
        _loop(model, k, op, body, values)
        for (k, op, body), values in zip(loops, carried, strict=True)
    ]


def _carried(model: LiteModel, loops: list[Any]) -> list[list[np.ndarray]]:
    """What each WHILE op of `loops` receives when the main subgraph runs once on zeros, as
    the file's interpreter holds it: its loop variables' shapes and, where they are fixed
    (counters, constants), values."""
    it = model.interpreter()
    for detail in it.get_input_details():
        it.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    model.invoke(it)
    return [[it.get_tensor(int(t)) for t in op.inputs] for op in loops]


def _refuse(model: LiteModel, k: int, body: Any, why: str) -> GraphPatternError:
    return GraphPatternError(
        f"{model.source}: the WHILE loop of op {k} (body {tensor_name(body)}) {why}; gatetrace records loops "
        "of Keras' LSTM, GRU and SimpleRNN layers: record the model it was converted from"
    )


@dataclass(frozen=True)
class _Body:
    """What a loop's body is, read from its ops alone: the body (`graph`), the loop variable
    it reads a step of (`sequence`) and the tensor of that step (`step_input`), the Keras
    cell, its activations, and each gate's (nonlinearity, input, output)."""

    graph: _Graph
    sequence: int
    step_input: int
    spec: CellSpec
    activation: str
    recurrent_activation: str
    gates: list[tuple[str, int, int]]


def _read(model: LiteModel, k: int, op: Any) -> _Body:
    """The body of WHILE op `k` (see `_Body`); GraphPatternError where it is no Keras cell."""
    options = op.builtinOptions
    g = _Graph(model, options.bodySubgraphIndex, op)
    body = g.subgraph
    inputs = [int(t) for t in body.inputs]
    gathers = [
        j
        for j, kind in enumerate(g.kinds)
        if kind == "GATHER" and int(g.ops[j].inputs[0]) in inputs
    ]
    if any(body.tensors[int(g.ops[j].inputs[0])].type == _BOOL for j in gathers):
        raise _refuse(
            model,
            k,
            body,
            "reads a mask a step (a Masking layer's, or an Embedding's mask_zero), which gatetrace does not "
            "record in TensorFlow Lite loops yet",
        )
    if len(gathers) != 1:
        raise _refuse(model, k, body, f"reads {len(gathers)} sequences a step, not one")
    gather = g.ops[gathers[0]]
    sequence, step_input = inputs.index(int(gather.inputs[0])), int(gather.outputs[0])
    # gates: nonlinearities of one block of the products' SPLITs (none: the one sum of products)
    gates: dict[int, tuple[str, int, int]] = {}
    plain = []
    for j, kind in enumerate(g.kinds):
        if kind not in _NONLINEAR:
            continue
        x, y = int(g.ops[j].inputs[0]), int(g.ops[j].outputs[0])
        blocks = {b for _, b in g.blocks(x)}
        if len(blocks) == 1:
            (block,) = blocks
            if block in gates:
                raise _refuse(model, k, body, f"applies two nonlinearities to block {block}")
            gates[block] = (_NONLINEAR[kind], x, y)
        elif not blocks and len(g.products(x)) == 2:
            plain.append((_NONLINEAR[kind], x, y))
    spec, activation, gate_act = _kind(gates, plain)
    if spec is None:
        shown = ", ".join(f"{gates[b][0]}" for b in sorted(gates)) or "none"
        raise _refuse(
            model,
            k,
            body,
            f"applies {shown} to its gate blocks, which is no Keras cell gatetrace knows",
        )
    chosen = [gates[b] for b in sorted(gates)] if gates else plain
    integers = {body.tensors[t].type for _, x, y in chosen for t in (x, y)} - {_FLOAT32}
    if integers:  # its codes are no values: read as floats they would be silently wrong
        raise GraphPatternError(
            f"{model.source}: the WHILE loop of op {k} (body {tensor_name(body)}) computes its gates in integers "
            "(quantised for integer arithmetic), which gatetrace does not record in loops yet: record the float "
            "or the dynamic-range model"
        )
    return _Body(g, sequence, step_input, spec, activation, gate_act, chosen)


def _loop(model: LiteModel, k: int, op: Any, read: _Body, carried: list[np.ndarray]) -> LiteCell:
    """The cell of WHILE op `k`, whose body is `read`, from what it carries (`carried`)."""
    g, sequence, spec, chosen = read.graph, read.sequence, read.spec, read.gates
    body, options = g.subgraph, op.builtinOptions
    inputs = [int(t) for t in body.inputs]
    if len(inputs) != len(carried):
        raise _refuse(
            model,
            k,
            body,
            f"receives {len(inputs)} arguments for the {len(carried)} loop variables it carries",
        )
    if carried[sequence].ndim != 3:
        raise _refuse(
            model,
            k,
            body,
            f"reads a step of a sequence of {list(carried[sequence].shape)}, not [steps, batch, features]",
        )
    # states: the float loop variables of h's shape; h the one a product multiplies
    floats = [
        n for n, v in enumerate(carried) if n != sequence and v.dtype == np.float32 and v.ndim == 2
    ]
    read_by_products = [
        n
        for n in floats
        if any(
            g.kinds[j] == "FULLY_CONNECTED" and int(g.ops[j].inputs[0]) == inputs[n]
            for j in g.readers(inputs[n])
        )
    ]
    if len(read_by_products) != 1:
        raise _refuse(
            model,
            k,
            body,
            f"multiplies {len(read_by_products)} of its loop variables as states, not one",
        )
    h = read_by_products[0]
    units = int(carried[h].shape[1])
    states = [n for n in floats if carried[n].shape == carried[h].shape]
    if len(states) != len(spec.states):
        raise _refuse(
            model, k, body, f"carries {len(states)} states of {units} units, not {len(spec.states)}"
        )
    named = {"h": h} if len(states) == 1 else {"h": h, "c": next(n for n in states if n != h)}
    steps, features = int(carried[sequence].shape[0]), int(carried[sequence].shape[-1])
    arrays = _weights(g, spec, read.step_input, inputs[h], units, features)
    main_inputs = [int(t) for t in op.inputs]
    own = tensor_name(body) if body.name else ""
    cell = LiteCell(
        numbers="int8 dynamic range" if g.dequantized else "float32",
        name=own.removesuffix("/while_body").removesuffix("while_body") or f"while_{k}",
        spec=spec,
        units=units,
        input_size=features,
        output_size=units,
        activation=read.activation,
        recurrent_activation=read.recurrent_activation,
        arrays=arrays or {},
        variables={},
        op=k,
        inputs=main_inputs[sequence],
        outputs=int(op.outputs[h]),
        initial={s: main_inputs[n] for s, n in named.items()},
        length=steps,
        time_major=True,
        body=LiteBody(
            cond=int(options.condSubgraphIndex),
            body=int(options.bodySubgraphIndex),
            step_input=read.step_input,
            gates=tuple((x, y) for _, x, y in chosen),
            states={s: int(body.outputs[n]) for s, n in named.items()},
            h_input=h,
            finals={s: int(op.outputs[n]) for s, n in named.items()},
        ),
    )
    rng = np.random.RandomState(0)  # (the states and the sequence drawn, the rest as carried)
    trial = [
        rng.uniform(-1, 1, v.shape).astype(np.float32) if n in (sequence, *named.values()) else v
        for n, v in enumerate(carried)
    ]
    if verified(model, cell, trial):
        return cell
    # weights the file holds otherwise than gatetrace reads them: the gates alone
    return replace(cell, spec=replace(spec, weights=()), arrays={})


def _kind(
    gates: dict[int, tuple[str, int, int]], plain: list[tuple[str, int, int]]
) -> tuple[CellSpec | None, str, str]:
    """The Keras cell whose gates these are, its activation and its gates' activation."""
    acts = [gates[b][0] for b in sorted(gates)]
    if sorted(gates) == [0, 1, 2, 3] and acts[0] == acts[1] == acts[3] == "sigmoid":
        return KERAS_LSTM, acts[2], "sigmoid"
    if sorted(gates) == [0, 1, 2] and acts[0] == acts[1] == "sigmoid":
        return KERAS_GRU, acts[2], "sigmoid"
    if not gates and len(plain) == 1:
        return KERAS_SIMPLE_RNN, plain[0][0], "sigmoid"
    return None, "", ""


def _weights(
    g: _Graph, spec: CellSpec, x: int, h: int, units: int, features: int
) -> dict[str, np.ndarray] | None:
    """The cell's arrays as a Keras layer's (`kernel` [features + units, k * units], `bias`,
    for a GRU `recurrent_bias`), read from the products' constants and the constants the
    sums add before the SPLIT; None where they are not plain constants of those shapes."""
    wide = len(spec.gates) * units
    W, U = _product(g, x, wide), _product(g, h, wide)
    if W is None or U is None or W[0].shape[1] != features or U[0].shape[1] != units:
        return None
    kernel = np.concatenate([W[0].T, U[0].T])
    zero = np.zeros(wide, np.float32)
    if spec is not KERAS_GRU:  # one bias, added once, wherever the sums meet it
        added = W[1] | U[1]
        return {"kernel": kernel, "bias": sum(added.values(), zero)}
    if W[1].keys() & U[1].keys():
        return None  # (a GRU's two biases are added apart, before the products meet)
    # reset_after: the recurrent product's bias is its own
    return {
        "kernel": kernel,
        "bias": sum(W[1].values(), zero),
        "recurrent_bias": sum(U[1].values(), zero),
    }


def _product(g: _Graph, reads: int, wide: int) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
    """The matrix of the FULLY_CONNECTED that reads tensor `reads`, and the constant vectors
    (its bias, those ADDs add after it before the SPLIT) by tensor number."""
    for j in g.readers(reads):
        if g.kinds[j] != "FULLY_CONNECTED":
            continue
        op = g.ops[j]
        matrix = g.constant(int(op.inputs[1]))
        if matrix is None or matrix.ndim != 2 or matrix.shape[0] != wide:
            return None
        added: dict[int, np.ndarray] = {}
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            bias = g.constant(int(op.inputs[2]))
            if bias is None:
                return None
            added[int(op.inputs[2])] = bias
        out = int(op.outputs[0])
        while True:
            after = [r for r in g.readers(out) if g.kinds[r] in _THROUGH]
            if len(after) != 1:
                return matrix, added
            for t in g.ops[after[0]].inputs[:2]:
                c = g.constant(int(t)) if t >= 0 else None
                if c is not None and g.kinds[after[0]] == "ADD" and c.shape == (wide,):
                    added[int(t)] = c
            out = int(g.ops[after[0]].outputs[0])
    return None


def verified(model: LiteModel, cell: LiteCell, arguments: list[np.ndarray]) -> bool:
    """Whether a loop cell's `arrays` compute its gates: its body run once in the file's
    interpreter on `arguments` (what the loop carries, its states and sequence drawn at
    random), each gate's preactivation there against the one its arrays give (in float64,
    within 1e-4 of the largest)."""
    body, w = cell.body, cell.arrays
    if body is None or not w:
        return False
    # (its inputs resized to what the loop carries: the body may declare other shapes)
    it = model.interpreter(main=body.body, shapes=[v.shape for v in arguments])
    for t, v in zip(model.parsed.subgraphs[body.body].inputs, arguments, strict=True):
        it.set_tensor(int(t), v)
    model.invoke(it)
    x = it.get_tensor(body.step_input).astype(np.float64)
    h_tensor = int(model.parsed.subgraphs[body.body].inputs[body.h_input])
    h = it.get_tensor(h_tensor).astype(np.float64)
    got = [it.get_tensor(pre).astype(np.float64) for pre, _ in body.gates]
    d, kernel = cell.input_size, w["kernel"].astype(np.float64)
    zx = x @ kernel[:d] + w["bias"]
    zh = h @ kernel[d:] + w.get("recurrent_bias", 0.0)
    blocks = len(body.gates)
    if cell.spec is KERAS_GRU:  # z, r as sums; the candidate's recurrent part after r
        xs, hs = np.split(zx, 3, axis=1), np.split(zh, 3, axis=1)
        r = 1 / (1 + np.exp(-(xs[1] + hs[1])))
        wanted = [xs[0] + hs[0], xs[1] + hs[1], xs[2] + r * hs[2]]
    else:
        wanted = np.split(zx + zh, blocks, axis=1)
    scale = max(1.0, max(np.abs(a).max() for a in got))
    allowed = np.full(zx.shape[1], 1e-4 * scale)
    if cell.numbers != "float32":  # the kernel quantised x and h a row at a time (8 bits)
        allowed += np.abs(x).max() / 254 * np.abs(kernel[:d]).sum(axis=0)
        allowed += np.abs(h).max() / 254 * np.abs(kernel[d:]).sum(axis=0)
    bounds = np.split(allowed[None, :], blocks, axis=1)
    return all(
        bool((np.abs(a - b) <= bound).all())
        for a, b, bound in zip(got, wanted, bounds, strict=True)
    )

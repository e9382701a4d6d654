"""cuDNN's fused RNN ops (`CudnnRNN`, `CudnnRNNV2`, `CudnnRNNV3`), replaced by the same LSTM
or GRU steps, which run on the CPU.

A model exported on a GPU calls cuDNN directly (Keras 3's `model.export` or
`tf.saved_model.save` on a GPU, tf-keras' GPU path, TF1's `CudnnLSTM`): TensorFlow has no CPU
kernel for these ops, and the op keeps its weights in one packed buffer, `params`. For one
layer in one direction on a linear input (what Keras writes, one op per layer), cuDNN
documents the buffer as the input matrices W, then the recurrent matrices R, then an input
bias bW and a recurrent bias bR per gate, each matrix `[units, input]` row-major:

    LSTM, cuDNN gate order i, f, c, o:   W_i W_f W_c W_o  R_i R_f R_c R_o  bW_i .. bW_o  bR_i .. bR_o
        i, f, o = sigmoid(W x + bW + R h + bR);  c~ = tanh(W_c x + bW_c + R_c h + bR_c)
        c = f * c_prev + i * c~;  h = o * tanh(c)
    GRU, cuDNN gate order r, z, h:       W_r W_z W_h  R_r R_z R_h  bW_r bW_z bW_h  bR_r bR_z bR_h
        r, z = sigmoid(W x + bW + R h + bR);  h~ = tanh(W_h x + bW_h + r * (R_h h + bR_h))
        h = z * h_prev + (1 - z) * h~

`replace_cudnn` writes each op's steps out, unrolled over the input's static number of steps,
in the form tf-keras draws a step (`tracer.find.keras_cells`: Keras' gate order i, f, c, o and
z, r, h), with the weights as Consts cut from the buffer's values: `kernel`, `recurrent_kernel`
and `bias` under `<the op's scope>/lstm_cell` or `gru_cell`. An LSTM's two biases always add,
and its `bias` is their sum; a GRU keeps both (Keras' `[2, 3 * units]` bias). The op's outputs
(the output sequence, the final h and c) are read from the steps instead; the op is removed.
An input reversed along time before the op (Keras' `go_backwards`) is read from its end by
the steps, so that each step's input position is known, as for a backward loop.

Refused, in one line naming what was found: several layers or both directions in one op,
`skip_input`, projections, `rnn_relu`/`rnn_tanh`, an input whose number of steps is not
static, per-example `sequence_lengths` (a Keras mask), and any use of the op's reserve space
(training only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from recorders.errors import ModelFormatError
from tracer._tf import tf, v1

__all__ = ["CudnnCall", "cudnn_calls", "replace_cudnn", "params_size"]

_GATES = {"lstm": 4, "gru": 3}
# Where each Keras gate block sits among cuDNN's: Keras draws i, f, c, o (as cuDNN) and z, r, h
# (cuDNN: r, z, h).
_KERAS_ORDER = {"lstm": (0, 1, 2, 3), "gru": (1, 0, 2)}


@dataclass(frozen=True)
class CudnnCall:
    """One cuDNN RNN op to replace: its mode (`lstm` or `gru`), sizes, whether its input is
    time-major, and the names of its input tensors."""

    op: str
    cell: str  # the scope the replacement's weights are named under
    mode: str
    steps: int
    input_size: int
    units: int
    time_major: bool
    inputs: tuple[str, ...]  # input, input_h, input_c
    params: str
    reversed: bool = False  # inputs[0] is the sequence before its reversal (go_backwards)


def params_size(mode: str, input_size: int, units: int) -> int:
    """The length of the packed buffer of one layer, one direction (see the module docstring)."""
    gates = _GATES[mode]
    return gates * units * (input_size + units) + 2 * gates * units


def _refuse(op: tf.Operation, what: str, source: str) -> ModelFormatError:
    return ModelFormatError(
        f"{source}: {op.type} ({op.name}) {what}, which gatetrace cannot run on the CPU yet: it replaces cuDNN's "
        "one-layer, one-direction LSTM and GRU over a fixed number of steps; record the model exported on a CPU, "
        "or the Keras model itself saved with model.save('model.keras')"
    )


def _full_lengths(t: tf.Tensor, steps: int) -> bool:
    """Whether `sequence_lengths` is every example's whole length: Keras fills it with the
    input's number of steps when no mask is given (`tf.fill([batch], steps)`)."""
    if t.op.type != "Fill":
        return False
    value = t.op.inputs[1]
    if value.op.type == "Const":
        return int(tf.make_ndarray(value.op.get_attr("value"))) == steps
    if value.op.type == "StridedSlice" and value.op.inputs[0].op.type == "Shape":
        shape = value.op.inputs[0].op.inputs[0].shape
        index = value.op.inputs[1].op
        if index.type == "Const" and shape.rank:
            return shape[int(tf.make_ndarray(index.get_attr("value")).reshape(-1)[0])] == steps
    return False


def _cell_scope(op: tf.Operation, mode: str) -> str:
    """Where the replacement's weights go: the scope of the kernel variable the packed params
    are cut from (`lstm/lstm_cell` of `lstm/lstm_cell/kernel`, as the same model exported on a
    CPU names its cell), else `<the op's scope>/lstm_cell` (or `gru_cell`)."""
    seen, todo = set[str](), [op.inputs[3].op]
    while todo and len(seen) < 256:
        node = todo.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.type in ("VarHandleOp", "VariableV2"):
            scope, _, leaf = re.sub(r"_\d+$", "", node.name).rpartition("/")
            if leaf == "kernel" and scope and not _taken(op.graph, scope):
                return scope
        todo += [t.op for t in node.inputs]
    return f"{op.name.rpartition('/')[0] or op.name}/{mode}_cell"


def _taken(graph: tf.Graph, scope: str) -> bool:
    """Whether the graph already has ops named like the replacement's weights under `scope`."""
    for name in ("kernel", "recurrent_kernel", "bias"):
        try:
            graph.get_operation_by_name(f"{scope}/{name}")
            return True
        except KeyError:
            pass
    return False


def _unreversed(x: tf.Tensor, axis: int, steps: int) -> tuple[tf.Tensor, bool]:
    """(the sequence, True) if `x` is it reversed along its time axis, wholly (Keras'
    go_backwards: `ReverseSequence` by the full lengths, or `ReverseV2`); else (x, False).
    The steps then read the sequence from its end, so that each is told its input position."""
    op = x.op
    if (
        op.type == "ReverseSequence"
        and op.get_attr("seq_dim") == axis
        and _full_lengths(op.inputs[1], steps)
    ):
        return op.inputs[0], True
    if op.type == "ReverseV2" and op.inputs[1].op.type == "Const":
        dims = [int(d) % 3 for d in tf.make_ndarray(op.inputs[1].op.get_attr("value")).reshape(-1)]
        if dims == [axis]:
            return op.inputs[0], True
    return x, False


def _call(op: tf.Operation, source: str) -> CudnnCall:
    attr = {a: op.get_attr(a) for a in ("rnn_mode", "input_mode", "direction")}
    mode = attr["rnn_mode"].decode()
    if mode not in _GATES:
        raise _refuse(op, f"runs rnn_mode {mode!r}", source)
    if attr["input_mode"] != b"linear_input" or attr["direction"] != b"unidirectional":
        raise _refuse(
            op,
            f"has input_mode {attr['input_mode'].decode()!r} and direction {attr['direction'].decode()!r}",
            source,
        )
    time_major = op.type != "CudnnRNNV3" or op.get_attr("time_major")
    if op.type == "CudnnRNNV3" and op.get_attr("num_proj"):
        raise _refuse(op, "has a projection (num_proj)", source)
    x, h = op.inputs[0].shape, op.inputs[1].shape
    if x.rank != 3 or h.rank != 3 or x[2] is None or h[2] is None:
        raise _refuse(
            op,
            f"reads an input of shape {x} and a state of shape {h} (the feature sizes must be static)",
            source,
        )
    steps = x[0] if time_major else x[1]
    layers = h[0] if time_major else h[1]
    if layers != 1:
        raise _refuse(
            op, f"runs {layers if layers is not None else 'an unknown number of'} layers", source
        )
    if steps is None:
        raise _refuse(
            op, f"reads an input of shape {x}, whose number of steps is not static", source
        )
    if op.type == "CudnnRNNV3" and not _full_lengths(op.inputs[4], steps):
        raise _refuse(op, "is given per-example sequence_lengths (a Keras mask)", source)
    used = [i for i, t in enumerate(op.outputs) if t.consumers()]
    if any(i >= 3 for i in used):
        raise _refuse(op, "has its reserve space read (a training graph)", source)
    sequence, reversed_ = _unreversed(op.inputs[0], 0 if time_major else 1, steps)
    params = op.inputs[3]
    expected = params_size(mode, x[2], h[2])
    if params.shape.rank == 1 and params.shape[0] is not None and params.shape[0] != expected:
        raise _refuse(
            op,
            f"packs {params.shape[0]} parameters where one layer of {h[2]} units on {x[2]} inputs has {expected}",
            source,
        )
    inputs = (sequence.name, op.inputs[1].name, op.inputs[2].name)
    return CudnnCall(
        op.name,
        _cell_scope(op, mode),
        mode,
        steps,
        x[2],
        h[2],
        time_major,
        inputs,
        params.name,
        reversed_,
    )


def cudnn_calls(graph: tf.Graph, source: str) -> list[CudnnCall]:
    """Every cuDNN RNN op in `graph` (none inside functions: see `tracer.load.rebuild.gpu_only_problem`),
    each checked to be one that `replace_cudnn` can replace."""
    return [
        _call(op, source)
        for op in graph.get_operations()
        if op.type in ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
    ]


def _weights(call: CudnnCall, params: np.ndarray) -> dict[str, np.ndarray]:
    """Keras' kernel [input, gates * units], recurrent_kernel [units, gates * units] and bias
    from the packed buffer (see the module docstring)."""
    n, u, k = _GATES[call.mode], call.units, call.input_size
    if params.shape != (params_size(call.mode, k, u),):
        raise ModelFormatError(
            f"{call.op}: its params hold {params.size} values where one layer of {u} units on {k} inputs holds "
            f"{params_size(call.mode, k, u)}: this model cannot be run on the CPU"
        )
    W, params = params[: n * u * k].reshape(n, u, k), params[n * u * k :]
    R, params = params[: n * u * u].reshape(n, u, u), params[n * u * u :]
    bW, bR = params[: n * u].reshape(n, u), params[n * u :].reshape(n, u)
    order = _KERAS_ORDER[call.mode]
    kernel = np.concatenate([W[g].T for g in order], axis=1)
    recurrent = np.concatenate([R[g].T for g in order], axis=1)
    bW, bR = np.concatenate([bW[g] for g in order]), np.concatenate([bR[g] for g in order])
    bias = bW + bR if call.mode == "lstm" else np.stack([bW, bR])
    return {"kernel": kernel, "recurrent_kernel": recurrent, "bias": bias}


def _lstm_step(x, h, c, kernel, recurrent, bias):
    # Keras' blocks: i, f, c, o
    z = tf.nn.bias_add(tf.matmul(x, kernel) + tf.matmul(h, recurrent), bias)
    i, f, c_block, o = tf.split(z, 4, axis=1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(c_block)
    return tf.sigmoid(o) * tf.tanh(c), c


def _gru_step(x, h, kernel, recurrent, input_bias, recurrent_bias):
    # Keras' blocks: z, r, h; reset after the recurrent product, as cuDNN does
    x_z, x_r, x_h = tf.split(tf.nn.bias_add(tf.matmul(x, kernel), input_bias), 3, axis=1)
    h_z, h_r, h_h = tf.split(tf.nn.bias_add(tf.matmul(h, recurrent), recurrent_bias), 3, axis=1)
    z = tf.sigmoid(x_z + h_z)
    r = tf.sigmoid(x_r + h_r)
    candidate = tf.tanh(x_h + r * h_h)
    return z * h + (1 - z) * candidate


def _steps(
    call: CudnnCall, weights: dict[str, np.ndarray], dtype
) -> tuple[v1.GraphDef, dict[str, str]]:
    """The steps replacing `call`, as a GraphDef whose Placeholders stand for the op's inputs
    (named after the inputs' indices), and the names of the tensors replacing its outputs."""
    graph = tf.Graph()
    with graph.as_default():
        steps_first = [call.steps, None] if call.time_major else [None, call.steps]
        one_first = [1, None] if call.time_major else [None, 1]
        x = v1.placeholder(dtype, steps_first + [call.input_size], name="input_0")
        h0 = v1.placeholder(dtype, one_first + [call.units], name="input_1")
        c0 = v1.placeholder(dtype, name="input_2")  # a GRU's is unused (Keras gives 0)
        with tf.name_scope(call.cell):
            kernel = tf.constant(weights["kernel"].astype(dtype.as_numpy_dtype), name="kernel")
            recurrent = tf.constant(
                weights["recurrent_kernel"].astype(dtype.as_numpy_dtype), name="recurrent_kernel"
            )
            bias = tf.constant(weights["bias"].astype(dtype.as_numpy_dtype), name="bias")
            axis = 0 if call.time_major else 1
            xs = tf.unstack(x, num=call.steps, axis=axis)
            h = tf.squeeze(h0, axis=axis)
            c = (
                tf.squeeze(tf.ensure_shape(c0, one_first + [call.units]), axis=axis)
                if call.mode == "lstm"
                else None
            )
            if call.mode == "gru":
                input_bias, recurrent_bias = tf.unstack(bias)
            outputs = []
            for t in range(call.steps):
                x_t = xs[call.steps - 1 - t] if call.reversed else xs[t]
                if call.mode == "lstm":
                    h, c = _lstm_step(x_t, h, c, kernel, recurrent, bias)
                else:
                    h = _gru_step(x_t, h, kernel, recurrent, input_bias, recurrent_bias)
                outputs.append(h)
            # cuDNN's GRU passes its input_c through
            out = {
                0: tf.stack(outputs, axis=axis),
                1: tf.expand_dims(h, axis),
                2: tf.expand_dims(c, axis) if c is not None else c0,
            }
    return graph.as_graph_def(), {f"{call.op}:{i}": t.name for i, t in out.items()}


def replace_cudnn(
    graph_def: v1.GraphDef, calls: list[CudnnCall], params: dict[str, np.ndarray]
) -> v1.GraphDef:
    """`graph_def` with each op of `calls` replaced by its steps, whose weights are cut from
    `params` (the value of each call's params tensor, by tensor name)."""
    nodes = {n.name: n for n in graph_def.node}
    out = v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    renamed: dict[str, str] = {}
    added = []
    for call in calls:
        dtype = tf.as_dtype(nodes[call.op].attr["T"].type)
        steps, outputs = _steps(call, _weights(call, params[call.params]), dtype)
        fed = {f"input_{i}": name for i, name in enumerate(call.inputs)}
        for node in steps.node:
            if node.op == "Placeholder":
                continue
            if node.name in nodes:
                raise ModelFormatError(
                    f"{call.op}: its replacement's op {node.name} is already in the graph"
                )
            inputs = [_tensor_name(i, fed) for i in node.input]
            del node.input[:]
            node.input.extend(inputs)
            added.append(node)
        renamed.update(outputs)
        renamed[f"^{call.op}"] = f"^{outputs[f'{call.op}:0'].partition(':')[0]}"
    gone = {call.op for call in calls}
    out.node.extend(node for node in graph_def.node if node.name not in gone)
    out.node.extend(added)
    for node in out.node:  # readers of a replaced op (another replaced op's steps among them)
        inputs = [
            renamed.get(i if ":" in i or i.startswith("^") else f"{i}:0", i) for i in node.input
        ]
        del node.input[:]
        node.input.extend(_short(i) for i in inputs)
    return out


def _tensor_name(name: str, fed: dict[str, str]) -> str:
    """A step's input: a Placeholder's name is replaced by the op input it stands for."""
    op = name.partition(":")[0]
    if op in fed:
        return _short(fed[op])
    return name


def _short(name: str) -> str:
    """A GraphDef input's form: `op` for output 0, `op:k` otherwise (control inputs as they are)."""
    return name[: -len(":0")] if name.endswith(":0") and not name.startswith("^") else name

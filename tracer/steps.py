"""One application of a cell (one step), recognised by the ops that TensorFlow's cell classes build.

Every cell class in `tf.compat.v1.nn.rnn_cell` starts a step the same way:
`MatMul(ConcatV2([inputs, h_prev]), kernel)` then `BiasAdd(..., bias)`. What follows
tells the kind apart:

    BasicLSTMCell, LSTMCell   BiasAdd -> Split(4) -> i, j, f, o preactivations
    GRUCell                   BiasAdd -> Sigmoid -> Split(2) -> r, u activations
    BasicRNNCell              BiasAdd -> activation -> h

`find_steps(graph)` returns an `Application` per step found: its gate tensors, states,
input, previous states and weights. The same patterns serve unrolled graphs
(`tracer.unrolled`) and while-loop bodies (`tracer.loops`); `cell_of` builds the `Cell`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells import BASIC_LSTM, BASIC_RNN, GRU, KERAS_GRU, KERAS_LSTM, KERAS_SIMPLE_RNN, LSTM, CellSpec
from tracer.edges import consumers_of, const_scalar, feeds_into, only_one, other_input, reads, weight_name, weight_source
from tracer.found import Cell

__all__ = ["Application", "ACTIVATIONS", "find_steps", "cell_of"]

_ADDS = {"Add", "AddV2"}


# TensorFlow op type of a cell's `activation` -> the name gatetrace records.
ACTIVATIONS = {
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Relu6": "relu6",
    "Elu": "elu",
    "Selu": "selu",
    "Softsign": "softsign",
    "Softplus": "softplus",
    "Identity": "linear",
}


def _recurrent_width(concat: tf.Operation, kernel: tf.Tensor) -> int | None:
    """How wide the recurrent state a step reads is: h_prev's width, or kernel rows - input width."""
    width = concat.inputs[1].shape[-1] if concat.inputs[1].shape.rank else None
    if width is None:
        rows, x_width = kernel.shape[0], concat.inputs[0].shape[-1] if concat.inputs[0].shape.rank else None
        width = rows - x_width if rows is not None and x_width is not None else None
    return width


def _is_projection(op: tf.Operation, m: tf.Tensor, units: int, width: int) -> bool:
    kernel = op.inputs[1]
    return op.inputs[0].name == m.name and weight_source(kernel) is not None and kernel.shape.as_list() == [units, width]


def _chain_to_sigmoid(t: tf.Tensor) -> tuple[tf.Operation, list[tf.Tensor]]:
    """Follow `t` through additions to the Sigmoid it ends in; return it and the addends."""
    addends = []
    while True:
        sig = consumers_of(t, {"Sigmoid"})
        if sig:
            return sig[0], addends
        add = only_one(consumers_of(t, _ADDS), "Add or Sigmoid", t.op)
        addends.append(other_input(add, t))
        t = add.outputs[0]


def _clip(t: tf.Tensor) -> tuple[tf.Tensor, float | None]:
    """If `t` goes through `clip_by_value(t, -v, v)` (Minimum, then Maximum), its output and v."""
    for lo in consumers_of(t, {"Minimum"}):
        hi = const_scalar(other_input(lo, t))
        for mx in consumers_of(lo.outputs[0], {"Maximum"}):
            if hi is not None and const_scalar(other_input(mx, lo.outputs[0])) is not None:
                return mx.outputs[0], hi
    return t, None


def _activation_name(op: tf.Operation) -> str:
    try:
        return ACTIVATIONS[op.type]
    except KeyError:
        raise GraphPatternError(
            f"{op.name}: the cell's activation is a {op.type} op; gatetrace knows "
            f"{', '.join(sorted(ACTIVATIONS))}"
        ) from None


@dataclass
class Application:
    spec: CellSpec
    kernel: tf.Operation  # the main kernel's variable or Const
    gate_op: tf.Operation
    preactivation: tuple[tf.Tensor, ...]
    activation: tuple[tf.Tensor, ...]
    states: tuple[tf.Tensor, ...]
    input: tf.Tensor
    previous: tuple[tf.Tensor, ...]
    weights: dict[str, tf.Tensor]
    activation_name: str
    forget_bias: float | None = None
    cell_clip: float | None = None
    proj_clip: float | None = None
    claimed: tuple[str, ...] = field(default=())  # the kernel MatMuls this step owns
    recurrent_activation: str | None = None  # a Keras cell's gate nonlinearity


def _kernel_step(bias_add: tf.Operation) -> tuple[tf.Operation, tf.Operation, tf.Operation] | None:
    """(MatMul, ConcatV2, kernel source) if `bias_add` is `BiasAdd(MatMul(concat, W), b)`."""
    if bias_add.type != "BiasAdd" or weight_source(bias_add.inputs[1]) is None:
        return None
    matmul = bias_add.inputs[0].op
    if matmul.type != "MatMul" or matmul.get_attr("transpose_a") or matmul.get_attr("transpose_b"):
        return None
    kernel = weight_source(matmul.inputs[1])
    concat = matmul.inputs[0].op
    if kernel is None or concat.type != "ConcatV2" or len(concat.inputs) != 3:
        return None
    return matmul, concat, kernel


def _lstm_app(split: tf.Operation) -> Application | None:
    bias_add = split.inputs[1].op
    found = _kernel_step(bias_add)
    if found is None:
        return None
    _, concat, kernel = found
    i, j, f, o = split.outputs  # i = input_gate, j = new_input, f = forget_gate, o = output_gate

    weights = {"kernel": found[0].inputs[1], "bias": bias_add.inputs[1]}
    sig_i, i_terms = _chain_to_sigmoid(i)
    sig_f, f_terms = _chain_to_sigmoid(f)
    sig_o, o_terms = _chain_to_sigmoid(o)
    act_j = only_one(consumers_of(j, ACTIVATIONS), "activation of j", split)

    forget_bias = None
    for term in f_terms:
        value = const_scalar(term)
        if value is not None:
            forget_bias = value
    # Peephole terms are `w_diag * c`: a Mul with one operand read from a variable.
    for role, terms in (("w_i_diag", i_terms), ("w_f_diag", f_terms), ("w_o_diag", o_terms)):
        for term in terms:
            if term.op.type == "Mul":
                for operand in term.op.inputs:
                    if weight_source(operand) is not None:
                        weights[role] = operand

    # c = f * c_prev + i * j: the Mul of sigmoid(i) and act(j), the Add it feeds, and
    # that Add's other operand, the Mul of sigmoid(f) and c_prev.
    input_mul = only_one(
        consumers_of(sig_i.outputs[0], {"Mul"}, lambda op: reads(op, act_j.outputs[0])), "Mul of the input gate", sig_i
    )
    c_raw = only_one(consumers_of(input_mul.outputs[0], _ADDS), "Add forming the cell state", input_mul)
    forget_mul = other_input(c_raw, input_mul.outputs[0]).op
    if forget_mul.type != "Mul" or not reads(forget_mul, sig_f.outputs[0]):
        raise GraphPatternError(f"{c_raw.name}: expected the cell state to add sigmoid(f) * c_prev, found a {forget_mul.type} op")
    c_prev = other_input(forget_mul, sig_f.outputs[0])
    c, cell_clip = _clip(c_raw.outputs[0])

    # h = sigmoid(o) * act(c): the Mul of sigmoid(o) whose other operand reads c.
    m = only_one(
        consumers_of(sig_o.outputs[0], {"Mul"}, lambda op: reads(other_input(op, sig_o.outputs[0]).op, c)),
        "Mul of the output gate",
        sig_o,
    ).outputs[0]
    h, proj_clip = m, None
    units = split.outputs[0].shape[-1]
    recurrent = _recurrent_width(concat, found[0].inputs[1])
    if units is not None and recurrent is not None and recurrent != units:
        # LSTMCell(num_proj=P): h = m @ projection (then clipped), and h_prev is P wide.
        # Other MatMuls may read m too (a readout layer on the last step): match the shape.
        proj = only_one(
            consumers_of(m, {"MatMul"}, lambda op: _is_projection(op, m, units, recurrent)),
            f"projection MatMul of a [{units}, {recurrent}] kernel",
            m.op,
        )
        weights["projection"] = proj.inputs[1]
        h, proj_clip = _clip(proj.outputs[0])

    # BasicLSTMCell writes `multiply(c, sigmoid(f + forget_bias))`; LSTMCell writes
    # `sigmoid(f + forget_bias) * c_prev`. Peepholes, clipping and projection are LSTMCell's.
    basic = forget_mul.inputs[1].name == sig_f.outputs[0].name
    lstm_only = len(weights) > 2 or cell_clip is not None
    return Application(
        spec=LSTM if (lstm_only or not basic) else BASIC_LSTM,
        kernel=kernel,
        gate_op=split,
        preactivation=(bias_add.outputs[0],),
        activation=(sig_i.outputs[0], act_j.outputs[0], sig_f.outputs[0], sig_o.outputs[0]),
        states=(c, h),
        input=concat.inputs[0],
        previous=(c_prev, concat.inputs[1]),
        weights=weights,
        activation_name=_activation_name(act_j),
        forget_bias=forget_bias,
        cell_clip=cell_clip,
        proj_clip=proj_clip,
        claimed=(found[0].name,),
    )


def _gru_app(split: tf.Operation) -> Application | None:
    sigmoid = split.inputs[1].op
    if sigmoid.type != "Sigmoid":
        return None
    bias_add = sigmoid.inputs[0].op
    found = _kernel_step(bias_add)
    if found is None:
        return None
    _, concat, kernel = found
    r, u = split.outputs  # r = reset gate, u = update gate
    r_state = only_one(consumers_of(r, {"Mul"}, lambda op: feeds_into(op, {"ConcatV2"})), "Mul of the reset gate", split)
    cand_concat = only_one(consumers_of(r_state.outputs[0], {"ConcatV2"}), "ConcatV2 of the candidate", r_state)
    cand_matmul = only_one(
        consumers_of(cand_concat.outputs[0], {"MatMul"}, lambda op: weight_source(op.inputs[1]) is not None),
        "MatMul of the candidate",
        cand_concat,
    )
    cand_bias_add = only_one(consumers_of(cand_matmul.outputs[0], {"BiasAdd"}), "BiasAdd of the candidate", cand_matmul)
    if _kernel_step(cand_bias_add) is None:
        return None
    act = only_one(consumers_of(cand_bias_add.outputs[0], ACTIVATIONS), "activation of the candidate", cand_bias_add)
    mix = only_one(consumers_of(act.outputs[0], {"Mul"}, lambda op: feeds_into(op, _ADDS)), "Mul of (1 - u) and the candidate", act)
    new_h = only_one(consumers_of(mix.outputs[0], _ADDS), "Add forming the new state", mix)
    return Application(
        spec=GRU,
        kernel=kernel,
        gate_op=split,
        preactivation=(bias_add.outputs[0], cand_bias_add.outputs[0]),
        activation=(sigmoid.outputs[0], act.outputs[0]),
        states=(new_h.outputs[0],),
        input=concat.inputs[0],
        previous=(concat.inputs[1],),
        weights={
            "kernel": found[0].inputs[1],
            "bias": bias_add.inputs[1],
            "candidate_kernel": cand_matmul.inputs[1],
            "candidate_bias": cand_bias_add.inputs[1],
        },
        activation_name=_activation_name(act),
        claimed=(found[0].name, cand_matmul.name),
    )


def _rnn_app(bias_add: tf.Operation) -> Application | None:
    found = _kernel_step(bias_add)
    consumers = consumers_of(bias_add.outputs[0], ACTIVATIONS)
    if found is None or len(consumers) != 1:
        return None
    matmul, concat, kernel = found
    units = matmul.inputs[1].shape[-1]
    state_width = concat.inputs[1].shape[-1]
    if units is None or state_width != units:
        return None
    act = consumers[0]
    return Application(
        spec=BASIC_RNN,
        kernel=kernel,
        gate_op=bias_add,
        preactivation=(bias_add.outputs[0],),
        activation=(act.outputs[0],),
        states=(act.outputs[0],),
        input=concat.inputs[0],
        previous=(concat.inputs[1],),
        weights={"kernel": matmul.inputs[1], "bias": bias_add.inputs[1]},
        activation_name=_activation_name(act),
    )


# -- Keras cells (tf.keras / Keras 2 LSTMCell, SimpleRNNCell) in TF1 graphs. They read the input
# and the state with separate MatMuls on `kernel` and `recurrent_kernel`, no concat:
#
#     LSTMCell, implementation 2   z = x @ kernel + h_prev @ recurrent_kernel (+ bias); i, f, c, o = split(z, 4)
#     LSTMCell, implementation 1   the kernel and bias split into four blocks; per gate k:
#                                  z_k = x @ kernel_k (+ bias_k) + h_prev @ recurrent_kernel[:, k]
#                                  then c = f * c_prev + i * tanh(c~);  h = o * tanh(c)  (Keras order i, f, c, o;
#                                  gates through sigmoid or Keras 2's hard_sigmoid)
#     GRUCell                      x @ kernel (+ bias) in blocks z, r, h; see _keras_gru_app (implementation 2)
#                                  and _keras_gru1_app (implementation 1)
#     SimpleRNNCell                h = activation(x @ kernel (+ bias) + h_prev @ recurrent_kernel)


def _users(t: tf.Tensor) -> list[tf.Operation]:
    """The ops reading `t`, leaving out the accumulators (`TensorListPushBack`) that a while
    loop built in a graph with gradients adds to its body's every tensor."""
    return [op for op in t.consumers() if op.type != "TensorListPushBack"]


def _input_and_recurrent(add: tf.Operation) -> tuple[tf.Operation, tf.Operation] | None:
    """(x MatMul, h MatMul) if `add` is `AddV2` of a MatMul on a `kernel` and one on a
    `recurrent_kernel` (the x side possibly through a BiasAdd, returned as the MatMul)."""
    if add.type not in _ADDS or len(add.inputs) != 2:
        return None
    sides = []
    for t in add.inputs:
        op = t.op.inputs[0].op if t.op.type == "BiasAdd" else t.op
        if op.type != "MatMul" or op.get_attr("transpose_a") or op.get_attr("transpose_b"):
            return None
        sides.append(op)
    # The variable's name tells them apart (inside a loop body, the argument carrying it is
    # named after it: `..._recurrent_kernel_0`).
    names = [weight_name(m.inputs[1]) for m in sides]
    if sum("recurrent_kernel" in n for n in names) != 1:
        return None
    x_side, h_side = (sides[0], sides[1]) if "recurrent_kernel" in names[1] else (sides[1], sides[0])
    return x_side, h_side


def _lstm_states(f: tf.Tensor, o: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None:
    """(c_prev, c, h) of an LSTM step from its forget and output gates' values:
    `c = f * c_prev + i * j` and `h = o * act(c)`."""
    f_mul = [op for op in _users(f) if op.type == "Mul"]
    c_new = [a for m in f_mul for a in _users(m.outputs[0]) if a.type in _ADDS]
    h_mul = [op for op in _users(o) if op.type == "Mul"]
    if len(f_mul) != 1 or len(c_new) != 1 or len(h_mul) != 1:
        return None
    return other_input(f_mul[0], f), c_new[0].outputs[0], h_mul[0].outputs[0]


def _keras_weights(kernel: tf.Tensor, recurrent: tf.Tensor, bias: tf.Tensor | None) -> dict[str, tf.Tensor]:
    weights = {"kernel": kernel, "recurrent_kernel": recurrent}
    if bias is not None:
        weights["bias"] = bias
    return weights


def _keras_lstm_app(split: tf.Operation) -> Application | None:
    z = split.inputs[1].op
    bias = None
    if z.type == "BiasAdd" and weight_source(z.inputs[1]) is not None:
        bias, z = z.inputs[1], z.inputs[0].op
    sides = _input_and_recurrent(z)
    if sides is None:
        return None
    x_mm, h_mm = sides
    gates = []
    for t in split.outputs:  # Keras order: i, f, c (our j), o
        users = [op for op in _users(t) if op.type in ACTIVATIONS]
        if len(users) != 1:
            return None
        gates.append(users[0].outputs[0])
    i, f, j, o = gates
    states = _lstm_states(f, o)
    if states is None:
        return None
    return Application(
        spec=KERAS_LSTM,
        kernel=weight_source(x_mm.inputs[1]),
        gate_op=split,
        preactivation=tuple(split.outputs),
        activation=(i, f, j, o),
        states=states[1:],
        input=x_mm.inputs[0],
        previous=(states[0], h_mm.inputs[0]),
        weights=_keras_weights(x_mm.inputs[1], h_mm.inputs[1], bias),
        activation_name=ACTIVATIONS[j.op.type],
        claimed=(x_mm.name, h_mm.name),
        recurrent_activation=ACTIVATIONS[i.op.type],
    )


def _gate_nonlinearity(t: tf.Tensor) -> tuple[tf.Tensor, str] | None:
    """(output, name) of the one nonlinearity applied to `t`: an activation op, or Keras 2's
    hard_sigmoid written out as `clip(x * 0.2 + 0.5, 0, 1)`."""
    users = _users(t)
    if len(users) == 1 and users[0].type in ACTIVATIONS:
        return users[0].outputs[0], ACTIVATIONS[users[0].type]
    if len(users) == 1 and users[0].type == "Mul" and const_scalar(other_input(users[0], t)) == 0.2:
        add = [op for op in _users(users[0].outputs[0]) if op.type in _ADDS]
        if len(add) == 1 and const_scalar(other_input(add[0], users[0].outputs[0])) == 0.5:
            out = add[0].outputs[0]
            for _ in range(2):  # Minimum then Maximum, or one ClipByValue
                nxt = [op for op in _users(out) if op.type in ("Minimum", "Maximum", "ClipByValue")]
                if len(nxt) != 1:
                    break
                out = nxt[0].outputs[0]
                if nxt[0].type == "ClipByValue":
                    break
            if out is not add[0].outputs[0]:
                return out, "hard_sigmoid"
    return None


def _column_slice(t: tf.Tensor) -> tuple[tf.Tensor, int] | None:
    """(the matrix, where the block starts) when `t` is a block of columns of a matrix: an
    output of `Split` along axis 1 (its index), or `StridedSlice(m)[:, a:b]` (its first
    column), through Identity and Enter. Blocks of one matrix sort in column order."""
    while t.op.type in ("Identity", "Enter", "Snapshot") and t.op.inputs:
        t = t.op.inputs[0]
    op = t.op
    if op.type == "Split" and const_scalar(op.inputs[0]) in (1, -1):
        return op.inputs[1], t.value_index
    if op.type == "StridedSlice" and op.inputs[0].shape.rank in (None, 2):
        begin = tf.make_ndarray(op.inputs[1].op.get_attr("value")) if op.inputs[1].op.type == "Const" else None
        if begin is None or len(begin) != 2:
            return None
        return op.inputs[0], 0 if op.get_attr("begin_mask") & 2 else int(begin[1])
    return None


def _bias_block(t: tf.Tensor) -> tf.Tensor:
    """The bias variable's read that a gate's bias block (a Split output or a slice) comes
    from; for a GRU with reset_after, the whole [2, 3u] bias its rows were unstacked from."""
    while t.op.type in ("Identity", "Enter", "Snapshot") and t.op.inputs:
        t = t.op.inputs[0]
    if t.op.type == "Split":
        t = t.op.inputs[1]
    elif t.op.type == "StridedSlice":
        t = t.op.inputs[0]
    return t.op.inputs[0] if t.op.type == "Unpack" else t


def _input_blocks(first: tf.Operation) -> tuple[tf.Operation, dict[int, tf.Operation]] | None:
    """(kernel variable, {block start: MatMul}) for the input MatMuls of a Keras cell with
    implementation=1, keyed on `first`, the MatMul of the input with the kernel's first block."""
    if first.type != "MatMul" or first.get_attr("transpose_a") or first.get_attr("transpose_b"):
        return None
    sliced = _column_slice(first.inputs[1])
    kernel = weight_source(sliced[0]) if sliced else None
    if sliced is None or sliced[1] != 0 or kernel is None or "recurrent" in kernel.name or "kernel" not in kernel.name:
        return None
    x = first.inputs[0]
    blocks = {}
    for op in _users(x):
        cut = _column_slice(op.inputs[1]) if op.type == "MatMul" and op.inputs[0].name == x.name else None
        source = weight_source(cut[0]) if cut is not None else None
        if source is not None and source.name == kernel.name:  # blocks of one variable (perhaps several reads)
            blocks[cut[1]] = op
    return kernel, blocks


def _biased(z: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
    """(z after its BiasAdd, the bias variable's read), or (z, None) without one."""
    users = _users(z)
    if len(users) == 1 and users[0].type == "BiasAdd":
        return users[0].outputs[0], _bias_block(users[0].inputs[1])
    return z, None


def _recurrent_block(t: tf.Tensor) -> tuple[tf.Operation, tf.Tensor, int] | None:
    """(MatMul, recurrent kernel read, block start) for `h_prev @ recurrent_kernel[:, block]`,
    possibly through the BiasAdd of a recurrent bias."""
    op = t.op.inputs[0].op if t.op.type == "BiasAdd" else t.op
    cut = _column_slice(op.inputs[1]) if op.type == "MatMul" else None
    if cut is None or weight_source(cut[0]) is None:
        return None
    return op, cut[0], cut[1]


def _keras_lstm1_app(first: tf.Operation) -> Application | None:
    """Keras LSTMCell with implementation=1 (Keras 2's default), keyed on `first`, the
    MatMul of the input with the first column block of `kernel`: one MatMul per gate block
    (a `tf.split` of the kernel in tf.keras, `kernel[:, :units]` slices in Keras 2), plus
    `h_prev @ recurrent_kernel[:, block]`, through sigmoid or hard_sigmoid."""
    found = _input_blocks(first)
    if found is None or len(found[1]) != 4:
        return None
    kernel, blocks = found
    full, x = _column_slice(first.inputs[1])[0], first.inputs[0]
    pre, act, names, h_prev, recurrent, bias, order = [], [], [], None, None, None, []
    for start in sorted(blocks):  # Keras order: i, f, c (our j), o
        z, bias = _biased(blocks[start].outputs[0])
        adds = [op for op in _users(z) if op.type in _ADDS]
        if len(adds) != 1:
            return None
        rec = other_input(adds[0], z).op
        cut = _column_slice(rec.inputs[1]) if rec.type == "MatMul" else None
        source = weight_source(cut[0]) if cut is not None else None
        if source is None or (recurrent is not None and source.name != weight_source(recurrent).name):  # reads of one variable
            return None
        h_prev, recurrent = rec.inputs[0], cut[0]
        order.append(cut[1])
        gate = _gate_nonlinearity(adds[0].outputs[0])
        if gate is None:
            return None
        pre.append(adds[0].outputs[0])
        act.append(gate[0])
        names.append(gate[1])
    if order != sorted(order):  # the recurrent blocks must be in the same order as the input blocks
        return None
    i, f, j, o = act
    states = _lstm_states(f, o)
    if states is None or names[0] != names[1] or names[0] != names[3]:
        return None
    return Application(
        spec=KERAS_LSTM,
        kernel=kernel,
        gate_op=first,
        preactivation=tuple(pre),
        activation=(i, f, j, o),
        states=states[1:],
        input=x,
        previous=(states[0], h_prev),
        weights=_keras_weights(full, recurrent, bias),
        activation_name=names[2],
        claimed=tuple(op.name for op in blocks.values()),
        recurrent_activation=names[0],
    )


def _keras_gru1_app(first: tf.Operation) -> Application | None:
    """Keras GRUCell with implementation=1: per block (z, r, h) `x @ kernel[:, block]
    (+ bias)`; z and r add `h_prev @ recurrent_kernel[:, block] (+ recurrent bias)`; the
    candidate adds `r * (h_prev @ recurrent_kernel[:, 2u:] + recurrent bias)` (reset_after)
    or `(r * h_prev) @ recurrent_kernel[:, 2u:]`."""
    found = _input_blocks(first)
    if found is None or len(found[1]) != 3:
        return None
    kernel, blocks = found
    full, x = _column_slice(first.inputs[1])[0], first.inputs[0]
    parts = [_biased(blocks[start].outputs[0]) for start in sorted(blocks)]  # Keras order z (our u), r, h (our c)
    bias = parts[0][1]
    pre, act, names, recurrent, h_prev = [], [], [], None, None
    for z, _ in parts[:2]:
        adds = [op for op in _users(z) if op.type in _ADDS]
        block = _recurrent_block(other_input(adds[0], z)) if len(adds) == 1 else None
        gate = _gate_nonlinearity(adds[0].outputs[0]) if block is not None else None
        if gate is None:
            return None
        h_prev, recurrent = block[0].inputs[0], block[1]
        pre.append(adds[0].outputs[0])
        act.append(gate[0])
        names.append(gate[1])
    z_c = parts[2][0]
    adds = [op for op in _users(z_c) if op.type in _ADDS]
    candidate = _gate_nonlinearity(adds[0].outputs[0]) if len(adds) == 1 else None
    h_new = [a for m in _users(act[0]) if m.type == "Mul" for a in _users(m.outputs[0]) if a.type in _ADDS]
    if candidate is None or len(h_new) != 1 or names[0] != names[1]:
        return None
    return Application(
        spec=KERAS_GRU,
        kernel=kernel,
        gate_op=first,
        preactivation=(pre[0], pre[1], adds[0].outputs[0]),
        activation=(act[0], act[1], candidate[0]),
        states=(h_new[0].outputs[0],),
        input=x,
        previous=(h_prev,),
        weights=_keras_weights(full, recurrent, bias),
        activation_name=candidate[1],
        claimed=tuple(op.name for op in blocks.values()),
        recurrent_activation=names[0],
    )


def _recurrent_product(block: tf.Tensor) -> tf.Operation | None:
    """The MatMul `h_prev @ recurrent_kernel` whose (biased) product a Keras GRU's z block
    `block` is a column block of: an output of SplitV (tf-keras without reset_after) or
    Split (tf-keras with it), or a column slice (Keras 3); the recurrent bias is added by
    a BiasAdd (tf-keras) or an AddV2 (Keras 3)."""
    if block.op.type == "SplitV":
        matrix = block.op.inputs[0]
    else:
        sliced = _column_slice(block)
        if sliced is None:
            return None
        matrix = sliced[0]
    op = matrix.op
    if op.type == "BiasAdd":
        op = op.inputs[0].op
    elif op.type in _ADDS:
        products = [t.op for t in op.inputs if t.op.type == "MatMul"]
        op = products[0] if len(products) == 1 else op
    return op if op.type == "MatMul" else None


def _whole_bias(bias: tf.Tensor) -> tf.Tensor:
    """The bias a Keras GRU's input bias is read from: with reset_after, both biases are
    rows of one [2, 3u] variable, unstacked (tf-keras) or split and squeezed (Keras 3)."""
    t = bias.op.inputs[0] if bias.op.type == "Squeeze" else bias
    if t.op.type == "Unpack":
        return t.op.inputs[0]
    if t.op.type == "Split" and const_scalar(t.op.inputs[0]) == 0:
        return t.op.inputs[1]
    return bias


def _keras_gru_app(split: tf.Operation) -> Application | None:
    """Keras GRUCell (implementation 2): `x @ kernel (+ input bias)` split into z, r, h blocks;
    `h_prev @ recurrent_kernel (+ recurrent bias)` (reset_after) or `h_prev @ recurrent_kernel[:, :2u]`
    split likewise; z, r = act(x_k + rec_k); c = act(x_h + r * rec_h) (reset_after) or
    act(x_h + (r * h_prev) @ recurrent_kernel[:, 2u:]); h = z * h_prev + (1 - z) * c."""
    mm, bias = split.inputs[1].op, None
    if mm.type == "BiasAdd":
        bias, mm = mm.inputs[1], mm.inputs[0].op
    if mm.type != "MatMul" or weight_source(mm.inputs[1]) is None or "recurrent" in weight_name(mm.inputs[1]):
        return None
    adds = []
    for block in split.outputs[:2]:  # z (our u), r
        users = [op for op in _users(block) if op.type in _ADDS]
        if len(users) != 1:
            return None
        adds.append(users[0])
    gates = [_gate_nonlinearity(a.outputs[0]) for a in adds]
    if None in gates:
        return None
    product = _recurrent_product(other_input(adds[0], split.outputs[0]))
    if product is None:
        return None
    h_prev = product.inputs[0]
    recurrent = product.inputs[1].op.inputs[0] if product.inputs[1].op.type == "StridedSlice" else product.inputs[1]
    c_add = [op for op in _users(split.outputs[2]) if op.type in _ADDS]
    if len(c_add) != 1:
        return None
    candidate = _gate_nonlinearity(c_add[0].outputs[0])
    h_new = [a for m in _users(gates[0][0]) if m.type == "Mul" for a in _users(m.outputs[0]) if a.type in _ADDS]
    if candidate is None or len(h_new) != 1 or gates[0][1] != gates[1][1]:
        return None
    weights = {"kernel": mm.inputs[1], "recurrent_kernel": recurrent}
    if bias is not None:
        weights["bias"] = _whole_bias(bias)
    return Application(
        spec=KERAS_GRU,
        kernel=weight_source(mm.inputs[1]),
        gate_op=split,
        preactivation=(adds[0].outputs[0], adds[1].outputs[0], c_add[0].outputs[0]),
        activation=(gates[0][0], gates[1][0], candidate[0]),
        states=(h_new[0].outputs[0],),
        input=mm.inputs[0],
        previous=(h_prev,),
        weights=weights,
        activation_name=candidate[1],
        claimed=(mm.name, product.name),
        recurrent_activation=gates[0][1],
    )


def _keras_rnn_app(add: tf.Operation) -> Application | None:
    sides = _input_and_recurrent(add)
    users = [op for op in _users(add.outputs[0]) if op.type in ACTIVATIONS]
    if sides is None or len(users) != 1:
        return None
    x_mm, h_mm = sides
    x_side = next(t for t in add.inputs if t.op is x_mm or t.op.inputs[0].op is x_mm)
    weights = {"kernel": x_mm.inputs[1], "recurrent_kernel": h_mm.inputs[1]}
    if x_side.op.type == "BiasAdd":
        weights["bias"] = x_side.op.inputs[1]
    h = users[0].outputs[0]
    return Application(
        spec=KERAS_SIMPLE_RNN,
        kernel=weight_source(x_mm.inputs[1]),
        gate_op=add,
        preactivation=(add.outputs[0],),
        activation=(h,),
        states=(h,),
        input=x_mm.inputs[0],
        previous=(h_mm.inputs[0],),
        weights=weights,
        activation_name=ACTIVATIONS[users[0].type],
        claimed=(x_mm.name, h_mm.name),
    )


def find_steps(graph: tf.Graph) -> list[Application]:
    """Every step of a cell in `graph`: `tf.compat.v1.nn.rnn_cell` classes, and Keras'
    LSTMCell and GRUCell (implementations 1 and 2) and SimpleRNNCell."""
    apps: list[Application] = []
    claimed: set[str] = set()
    for op in graph.get_operations():
        if op.type != "Split":
            continue
        n = op.get_attr("num_split")
        app = (
            (_lstm_app(op) or _keras_lstm_app(op)) if n == 4
            else _gru_app(op) if n == 2
            else _keras_gru_app(op) if n == 3
            else None
        )
        if app is not None:
            apps.append(app)
            claimed.update(app.claimed)
    for op in graph.get_operations():  # Keras cells with implementation=1: keyed on their first input block
        if op.type == "MatMul" and op.name not in claimed:
            app = _keras_lstm1_app(op) or _keras_gru1_app(op)
            if app is not None:
                apps.append(app)
                claimed.update(app.claimed)
    for op in graph.get_operations():
        if op.type == "BiasAdd" and op.inputs[0].op.name not in claimed:
            app = _rnn_app(op)
            if app is not None:
                apps.append(app)
        elif op.type in _ADDS and not claimed.intersection(t.op.name for t in op.inputs):
            app = _keras_rnn_app(op)
            if app is not None and not claimed.intersection(app.claimed):
                apps.append(app)
                claimed.update(app.claimed)
    return apps


def _sizes(spec: CellSpec, kernel: tf.Tensor, projection: tf.Tensor | None, separate: bool = False) -> tuple[int, int, int]:
    """(units, input size, output size) from the main kernel's and the projection's shapes.
    A kernel `separate` from the recurrent one (Keras) has the input rows only."""
    rows, columns = kernel.shape.as_list()
    units = columns // spec.weights[0].blocks
    output_size = units if projection is None else projection.shape.as_list()[1]
    return units, rows if separate else rows - output_size, output_size


def cell_of(app: Application, name: str, kernel: tf.Tensor, projection: tf.Tensor | None, **rest) -> Cell:
    """A Cell of `app`'s class and settings, its sizes read from the kernel and projection;
    `rest` holds weights, variables, steps, and backward or loop."""
    units, input_size, output_size = _sizes(app.spec, kernel, projection, separate="recurrent_kernel" in app.weights)
    return Cell(
        name=name,
        spec=app.spec,
        units=units,
        input_size=input_size,
        output_size=output_size,
        activation=app.activation_name,
        forget_bias=app.forget_bias,
        cell_clip=app.cell_clip,
        proj_clip=app.proj_clip,
        recurrent_activation=app.recurrent_activation,
        **rest,
    )


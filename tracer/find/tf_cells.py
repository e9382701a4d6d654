"""Steps of `tf.compat.v1.nn.rnn_cell` cells, recognised by the ops their `__call__` builds.

Every cell class starts a step the same way, with one kernel on the inputs and the
previous output side by side; what follows tells the kind apart (as TensorFlow draws the
graph, one step, names as `rnn/basic_lstm_cell/...`):

    BasicLSTMCell, LSTMCell (TF 1.0 to 2.x)
        ConcatV2([x, h_prev], 1) -> MatMul(kernel) -> BiasAdd(bias) -> Split(4): i, j, f, o
        c = Sigmoid(f + forget_bias) * c_prev + Sigmoid(i) * act(j)      (Add, Mul)
        h = Sigmoid(o) * act(c)
        LSTMCell adds: peepholes (f + w_f_diag * c_prev ...), ClipByValue on c (cell_clip),
        a projection MatMul on h (num_proj) and its ClipByValue (proj_clip)

    GRUCell
        ConcatV2([x, h_prev]) -> MatMul(gates/kernel) -> BiasAdd -> Sigmoid -> Split(2): r, u
        ConcatV2([x, r * h_prev]) -> MatMul(candidate/kernel) -> BiasAdd -> act: c
        h = u * h_prev + (1 - u) * c

    BasicRNNCell
        ConcatV2([x, h_prev]) -> MatMul(kernel) -> BiasAdd(bias) -> act: h

`act` is the cell's activation (Tanh by default; any op of `ACTIVATIONS`). The same
patterns hold inside `dynamic_rnn`'s while loop bodies and in frozen graphs (the kernel a
Const instead of a variable read).
"""

from __future__ import annotations

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.kinds import BASIC_LSTM, BASIC_RNN, GRU, LSTM
from tracer.find.application import ACTIVATIONS, ADDS, Application
from tracer.find.edges import (
    const_scalar,
    consumers_of,
    feeds_into,
    only_one,
    other_input,
    reads,
    weight_source,
)

__all__ = ["lstm_step", "gru_step", "rnn_step"]


def _static_width(t: tf.Tensor) -> int | None:
    """The last dimension of `t`, or, inside a TF1 while loop where the body's shapes are
    unknown (a frozen, pruned loop), of what enters it: back through Identity, Switch,
    Merge and Enter to the loop variable's initial value or the next iteration's."""
    todo, seen = [t], set()
    while todo:
        t = todo.pop()
        if t.shape.rank and t.shape[-1] is not None:
            return t.shape[-1]
        if t.name in seen:
            continue
        seen.add(t.name)
        if t.op.type in (
            "Identity",
            "RefIdentity",
            "Switch",
            "RefSwitch",
            "Enter",
            "RefEnter",
            "NextIteration",
            "RefNextIteration",
        ):
            todo.append(t.op.inputs[0])
        elif t.op.type in ("Merge", "RefMerge"):
            todo += list(t.op.inputs)
    return None


def _recurrent_width(concat: tf.Operation, kernel: tf.Tensor) -> int | None:
    """How wide the recurrent state a step reads is: h_prev's width, or kernel rows - input width."""
    width = _static_width(concat.inputs[1])
    if width is None:
        rows, x_width = kernel.shape[0], _static_width(concat.inputs[0])
        width = rows - x_width if rows is not None and x_width is not None else None
    return width


def _is_projection(op: tf.Operation, m: tf.Tensor, units: int, width: int) -> bool:
    kernel = op.inputs[1]
    return (
        op.inputs[0].name == m.name
        and weight_source(kernel) is not None
        and kernel.shape.as_list() == [units, width]
    )


def _chain_to_sigmoid(t: tf.Tensor) -> tuple[tf.Operation, list[tf.Tensor]]:
    """Follow `t` through additions to the Sigmoid it ends in; return it and the addends."""
    addends: list[tf.Tensor] = []
    while True:
        sig = consumers_of(t, {"Sigmoid"})
        if sig:
            return sig[0], addends
        add = only_one(consumers_of(t, ADDS), "Add or Sigmoid", t.op)
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


def lstm_step(split: tf.Operation) -> Application | None:
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
        consumers_of(sig_i.outputs[0], {"Mul"}, lambda op: reads(op, act_j.outputs[0])),
        "Mul of the input gate",
        sig_i,
    )
    c_raw = only_one(
        consumers_of(input_mul.outputs[0], ADDS), "Add forming the cell state", input_mul
    )
    forget_mul = other_input(c_raw, input_mul.outputs[0]).op
    if forget_mul.type != "Mul" or not reads(forget_mul, sig_f.outputs[0]):
        raise GraphPatternError(
            f"{c_raw.name}: expected the cell state to add sigmoid(f) * c_prev, found a {forget_mul.type} op"
        )
    c_prev = other_input(forget_mul, sig_f.outputs[0])
    c, cell_clip = _clip(c_raw.outputs[0])

    # h = sigmoid(o) * act(c): the Mul of sigmoid(o) whose other operand reads c.
    m = only_one(
        consumers_of(
            sig_o.outputs[0], {"Mul"}, lambda op: reads(other_input(op, sig_o.outputs[0]).op, c)
        ),
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


def gru_step(split: tf.Operation) -> Application | None:
    sigmoid = split.inputs[1].op
    if sigmoid.type != "Sigmoid":
        return None
    bias_add = sigmoid.inputs[0].op
    found = _kernel_step(bias_add)
    if found is None:
        return None
    _, concat, kernel = found
    r, u = split.outputs  # r = reset gate, u = update gate
    r_state = only_one(
        consumers_of(r, {"Mul"}, lambda op: feeds_into(op, {"ConcatV2"})),
        "Mul of the reset gate",
        split,
    )
    cand_concat = only_one(
        consumers_of(r_state.outputs[0], {"ConcatV2"}), "ConcatV2 of the candidate", r_state
    )
    cand_matmul = only_one(
        consumers_of(
            cand_concat.outputs[0], {"MatMul"}, lambda op: weight_source(op.inputs[1]) is not None
        ),
        "MatMul of the candidate",
        cand_concat,
    )
    cand_bias_add = only_one(
        consumers_of(cand_matmul.outputs[0], {"BiasAdd"}), "BiasAdd of the candidate", cand_matmul
    )
    if _kernel_step(cand_bias_add) is None:
        return None
    act = only_one(
        consumers_of(cand_bias_add.outputs[0], ACTIVATIONS),
        "activation of the candidate",
        cand_bias_add,
    )
    mix = only_one(
        consumers_of(act.outputs[0], {"Mul"}, lambda op: feeds_into(op, ADDS)),
        "Mul of (1 - u) and the candidate",
        act,
    )
    new_h = only_one(consumers_of(mix.outputs[0], ADDS), "Add forming the new state", mix)
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


def rnn_step(bias_add: tf.Operation) -> Application | None:
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

"""Steps of Keras' LSTMCell, GRUCell and SimpleRNNCell (tf-keras 2.x and Keras 3), by their ops.

Keras keeps the input kernel and the recurrent kernel apart, in its own gate order, and
writes its step in two ways: `implementation=2`, the default since Keras 2.2, here, and
`implementation=1`, Keras 2.0/2.1's default and still chosen by some models, one product
per gate block (`tracer.find.keras_blocks`). As TensorFlow draws one step inside `K.rnn`'s
while loop body:

    LSTMCell, implementation 2            blocks i, f, c, o (gatetrace labels i, f, j, o)
        AddV2(MatMul(x, kernel), MatMul(h_prev, recurrent_kernel)) -> BiasAdd(bias) -> Split(4)
        i, f, o = rec_act(...); c = f * c_prev + i * act(c_block); h = o * act(c)

    GRUCell, implementation 2             blocks z, r, h (gatetrace labels u, r, c)
        MatMul(x, kernel) (+ input bias) -> Split(3): x_z, x_r, x_h
        reset_after (tf-keras default):   MatMul(h_prev, recurrent_kernel) (+ recurrent bias) -> Split(3)
                                          c = act(x_h + r * rec_h)
        not reset_after (Keras 2):        MatMul(h_prev, recurrent_kernel[:, :2u]) -> SplitV
                                          c = act(x_h + MatMul(r * h_prev, recurrent_kernel[:, 2u:]))
        z, r = rec_act(x_k + rec_k); h = z * h_prev + (1 - z) * c
        with activation="linear" Keras applies no op to the candidate: c is the sum itself

    SimpleRNNCell
        AddV2(BiasAdd(MatMul(x, kernel), bias), MatMul(h_prev, recurrent_kernel)) -> act: h

The bias is added by `BiasAdd` (tf-keras, Keras 3.11 and later) or by `AddV2` (Keras 3.0 to
3.10, whose exports draw `AddV2(AddV2(MatMul, MatMul), bias)`): both are read.

Inside a loop body the kernels enter as the body's arguments, named after the variables
(`..._recurrent_kernel_0`): that is how the input and recurrent products are told apart.
The helpers both implementations share (`consumers_of`, `lstm_states`, `keras_weights`,
`gate_nonlinearity`, `column_slice`) are here.
"""

from __future__ import annotations

from tracer._tf import tf
from tracer.cells.kinds import KERAS_GRU, KERAS_LSTM, KERAS_SIMPLE_RNN
from tracer.find.application import ACTIVATIONS, ADDS, Application
from tracer.find.edges import const_scalar, other_input, weight_name, weight_source

__all__ = [
    "keras_lstm_step",
    "keras_gru_step",
    "keras_rnn_step",
    "consumers_of",
    "lstm_states",
    "keras_weights",
    "gate_nonlinearity",
    "column_slice",
]


def consumers_of(t: tf.Tensor) -> list[tf.Operation]:
    """The ops reading `t`, leaving out the accumulators (`TensorListPushBack`) that a while
    loop built in a graph with gradients adds to its body's every tensor."""
    return [op for op in t.consumers() if op.type != "TensorListPushBack"]


def _bias_added(t: tf.Tensor, onto: tuple[str, ...]) -> tuple[tf.Tensor, tf.Tensor] | None:
    """(what a bias is added onto, the bias) if `t` adds a bias weight to the output of an op of
    a type in `onto`: by BiasAdd (tf-keras, Keras 3.11 and later) or by AddV2 (Keras 3.0 to
    3.10); the bias may be a row of Keras' [2, 3u] GRU bias. None otherwise."""
    if (
        t.op.type == "BiasAdd"
        and t.op.inputs[0].op.type in onto
        and weight_source(_whole_bias(t.op.inputs[1])) is not None
    ):
        return t.op.inputs[0], t.op.inputs[1]
    if t.op.type in ADDS and len(t.op.inputs) == 2:
        for a, b in (t.op.inputs, reversed(t.op.inputs)):
            if (
                a.op.type in onto
                and b.shape.rank == 1
                and weight_source(_whole_bias(b)) is not None
            ):
                return a, b
    return None


def _input_and_recurrent(add: tf.Operation) -> tuple[tf.Operation, tf.Operation] | None:
    """(x MatMul, h MatMul) if `add` is `AddV2` of a MatMul on a `kernel` and one on a
    `recurrent_kernel` (the x side possibly through an added bias, returned as the MatMul)."""
    if add.type not in ADDS or len(add.inputs) != 2:
        return None
    sides = []
    for t in add.inputs:
        biased = _bias_added(t, ("MatMul",))
        op = biased[0].op if biased else t.op
        if op.type != "MatMul" or op.get_attr("transpose_a") or op.get_attr("transpose_b"):
            return None
        sides.append(op)
    # The variable's name tells them apart (inside a loop body, the argument carrying it is
    # named after it: `..._recurrent_kernel_0`).
    names = [weight_name(m.inputs[1]) for m in sides]
    if sum("recurrent_kernel" in n for n in names) != 1:
        return None
    x_side, h_side = (
        (sides[0], sides[1]) if "recurrent_kernel" in names[1] else (sides[1], sides[0])
    )
    return x_side, h_side


def lstm_states(f: tf.Tensor, o: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None:
    """(c_prev, c, h) of an LSTM step from its forget and output gates' values:
    `c = f * c_prev + i * j` and `h = o * act(c)`."""
    f_mul = [op for op in consumers_of(f) if op.type == "Mul"]
    c_new = [a for m in f_mul for a in consumers_of(m.outputs[0]) if a.type in ADDS]
    h_mul = [op for op in consumers_of(o) if op.type == "Mul"]
    if len(f_mul) != 1 or len(c_new) != 1 or len(h_mul) != 1:
        return None
    return other_input(f_mul[0], f), c_new[0].outputs[0], h_mul[0].outputs[0]


def keras_weights(
    kernel: tf.Tensor, recurrent: tf.Tensor, bias: tf.Tensor | None
) -> dict[str, tf.Tensor]:
    weights = {"kernel": kernel, "recurrent_kernel": recurrent}
    if bias is not None:
        weights["bias"] = bias
    return weights


def keras_lstm_step(split: tf.Operation) -> Application | None:
    z = split.inputs[1].op
    bias = None
    biased = _bias_added(split.inputs[1], tuple(ADDS))
    if biased is not None:
        z, bias = biased[0].op, biased[1]
    sides = _input_and_recurrent(z)
    if sides is None:
        return None
    x_mm, h_mm = sides
    gates = []
    for t in split.outputs:  # Keras order: i, f, c (our j), o
        users = [op for op in consumers_of(t) if op.type in ACTIVATIONS]
        if len(users) != 1:
            return None
        gates.append(users[0].outputs[0])
    i, f, j, o = gates
    states = lstm_states(f, o)
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
        weights=keras_weights(x_mm.inputs[1], h_mm.inputs[1], bias),
        activation_name=ACTIVATIONS[j.op.type],
        claimed=(x_mm.name, h_mm.name),
        recurrent_activation=ACTIVATIONS[i.op.type],
    )


def gate_nonlinearity(t: tf.Tensor) -> tuple[tf.Tensor, str] | None:
    """(output, name) of the one nonlinearity applied to `t`: an activation op, or Keras 2's
    hard_sigmoid written out as `clip(x * 0.2 + 0.5, 0, 1)`."""
    users = consumers_of(t)
    if len(users) == 1 and users[0].type in ACTIVATIONS:
        return users[0].outputs[0], ACTIVATIONS[users[0].type]
    if len(users) == 1 and users[0].type == "Mul" and const_scalar(other_input(users[0], t)) == 0.2:
        add = [op for op in consumers_of(users[0].outputs[0]) if op.type in ADDS]
        if len(add) == 1 and const_scalar(other_input(add[0], users[0].outputs[0])) == 0.5:
            out = add[0].outputs[0]
            for _ in range(2):  # Minimum then Maximum, or one ClipByValue
                nxt = [
                    op
                    for op in consumers_of(out)
                    if op.type in ("Minimum", "Maximum", "ClipByValue")
                ]
                if len(nxt) != 1:
                    break
                out = nxt[0].outputs[0]
                if nxt[0].type == "ClipByValue":
                    break
            if out is not add[0].outputs[0]:
                return out, "hard_sigmoid"
    return None


def _linear_into(t: tf.Tensor, state: tf.Operation) -> tuple[tf.Tensor, str] | None:
    """(t, "linear") when no nonlinearity follows `t` (`activation="linear"`: Keras applies
    nothing) and its one user is the `Mul` whose product the state update `state` adds."""
    users = consumers_of(t)
    if (
        len(users) == 1
        and users[0].type == "Mul"
        and any(op is state for op in consumers_of(users[0].outputs[0]))
    ):
        return t, "linear"
    return None


def column_slice(t: tf.Tensor) -> tuple[tf.Tensor, int] | None:
    """(the matrix, where the block starts) when `t` is a block of columns of a matrix: an
    output of `Split` along axis 1 (its index), or `StridedSlice(m)[:, a:b]` (its first
    column), through Identity and Enter. Blocks of one matrix sort in column order."""
    while t.op.type in ("Identity", "Enter", "Snapshot") and t.op.inputs:
        t = t.op.inputs[0]
    op = t.op
    if op.type == "Split" and const_scalar(op.inputs[0]) in (1, -1):
        return op.inputs[1], t.value_index
    if op.type == "StridedSlice" and op.inputs[0].shape.rank in (None, 2):
        begin = (
            tf.make_ndarray(op.inputs[1].op.get_attr("value"))
            if op.inputs[1].op.type == "Const"
            else None
        )
        if begin is None or len(begin) != 2:
            return None
        return op.inputs[0], 0 if op.get_attr("begin_mask") & 2 else int(begin[1])
    return None


def _recurrent_product(block: tf.Tensor) -> tf.Operation | None:
    """The MatMul `h_prev @ recurrent_kernel` whose (biased) product a Keras GRU's z block
    `block` is a column block of: an output of SplitV (tf-keras without reset_after) or
    Split (tf-keras with it), or a column slice (Keras 3); the recurrent bias is added by
    a BiasAdd (tf-keras) or an AddV2 (Keras 3)."""
    if block.op.type == "SplitV":
        matrix = block.op.inputs[0]
    else:
        sliced = column_slice(block)
        if sliced is None:
            return None
        matrix = sliced[0]
    op = matrix.op
    if op.type == "BiasAdd":
        op = op.inputs[0].op
    elif op.type in ADDS:
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


def keras_gru_step(split: tf.Operation) -> Application | None:
    """Keras GRUCell (implementation 2): `x @ kernel (+ input bias)` split into z, r, h blocks;
    `h_prev @ recurrent_kernel (+ recurrent bias)` (reset_after) or `h_prev @ recurrent_kernel[:, :2u]`
    split likewise; z, r = act(x_k + rec_k); c = act(x_h + r * rec_h) (reset_after) or
    act(x_h + (r * h_prev) @ recurrent_kernel[:, 2u:]); h = z * h_prev + (1 - z) * c."""
    mm, bias = split.inputs[1].op, None
    biased = _bias_added(split.inputs[1], ("MatMul",))
    if biased is not None:
        mm, bias = biased[0].op, biased[1]
    if (
        mm.type != "MatMul"
        or weight_source(mm.inputs[1]) is None
        or "recurrent" in weight_name(mm.inputs[1])
    ):
        return None
    adds = []
    for block in split.outputs[:2]:  # z (our u), r
        users = [op for op in consumers_of(block) if op.type in ADDS]
        if len(users) != 1:
            return None
        adds.append(users[0])
    found = [gate_nonlinearity(a.outputs[0]) for a in adds]
    gates = [g for g in found if g is not None]
    if len(gates) != len(found):
        return None
    product = _recurrent_product(other_input(adds[0], split.outputs[0]))
    if product is None:
        return None
    h_prev = product.inputs[0]
    recurrent = (
        product.inputs[1].op.inputs[0]
        if product.inputs[1].op.type == "StridedSlice"
        else product.inputs[1]
    )
    c_add = [op for op in consumers_of(split.outputs[2]) if op.type in ADDS]
    if len(c_add) != 1:
        return None
    h_new = [
        a
        for m in consumers_of(gates[0][0])
        if m.type == "Mul"
        for a in consumers_of(m.outputs[0])
        if a.type in ADDS
    ]
    if len(h_new) != 1 or gates[0][1] != gates[1][1]:
        return None
    candidate = gate_nonlinearity(c_add[0].outputs[0]) or _linear_into(
        c_add[0].outputs[0], h_new[0]
    )
    if candidate is None:
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


def keras_rnn_step(add: tf.Operation) -> Application | None:
    sides = _input_and_recurrent(add)
    users = [op for op in consumers_of(add.outputs[0]) if op.type in ACTIVATIONS]
    if sides is None or len(users) != 1:
        return None
    x_mm, h_mm = sides
    weights = {"kernel": x_mm.inputs[1], "recurrent_kernel": h_mm.inputs[1]}
    for t in add.inputs:
        biased = _bias_added(t, ("MatMul",))
        if biased is not None and biased[0].op is x_mm:
            weights["bias"] = biased[1]
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

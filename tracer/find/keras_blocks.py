"""Steps of Keras' LSTMCell and GRUCell written with `implementation=1` (Keras 2.0/2.1's default,
still chosen by some models), by their ops: one product per gate block. As TensorFlow draws
one step inside `K.rnn`'s while loop body:

    LSTMCell, implementation 1            blocks i, f, c, o (gatetrace labels i, f, j, o)
        per block k: MatMul(x, kernel[:, k]) (+ bias[k]) + MatMul(h_prev, recurrent_kernel[:, k])
        (kernel blocks by Split in tf-keras, by StridedSlice in Keras 2), then as
        implementation 2 (`tracer.find.keras_cells`); rec_act may be Keras 2's hard_sigmoid
        written out: clip(x * 0.2 + 0.5, 0, 1)
    GRUCell, implementation 1             the same sums as implementation 2, one MatMul per
                                          block (column slices)
"""

from __future__ import annotations

from tracer._tf import tf
from tracer.cells.kinds import KERAS_GRU, KERAS_LSTM
from tracer.find.application import ADDS, Application
from tracer.find.edges import other_input, weight_source
from tracer.find.keras_cells import (
    column_slice,
    consumers_of,
    gate_nonlinearity,
    keras_weights,
    lstm_states,
)

__all__ = ["keras_lstm1_step", "keras_gru1_step"]


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
    sliced = column_slice(first.inputs[1])
    kernel = weight_source(sliced[0]) if sliced else None
    if (
        sliced is None
        or sliced[1] != 0
        or kernel is None
        or "recurrent" in kernel.name
        or "kernel" not in kernel.name
    ):
        return None
    x = first.inputs[0]
    blocks = {}
    for op in consumers_of(x):
        if op.type != "MatMul" or op.inputs[0].name != x.name:
            continue
        cut = column_slice(op.inputs[1])
        source = weight_source(cut[0]) if cut is not None else None
        # blocks of one variable (perhaps several reads)
        if cut is not None and source is not None and source.name == kernel.name:
            blocks[cut[1]] = op
    return kernel, blocks


def _biased(z: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
    """(z after its BiasAdd, the bias variable's read), or (z, None) without one."""
    users = consumers_of(z)
    if len(users) == 1 and users[0].type == "BiasAdd":
        return users[0].outputs[0], _bias_block(users[0].inputs[1])
    return z, None


def _recurrent_block(t: tf.Tensor) -> tuple[tf.Operation, tf.Tensor, int] | None:
    """(MatMul, recurrent kernel read, block start) for `h_prev @ recurrent_kernel[:, block]`,
    possibly through the BiasAdd of a recurrent bias."""
    op = t.op.inputs[0].op if t.op.type == "BiasAdd" else t.op
    cut = column_slice(op.inputs[1]) if op.type == "MatMul" else None
    if cut is None or weight_source(cut[0]) is None:
        return None
    return op, cut[0], cut[1]


def _blocks_of(
    first: tf.Operation, count: int
) -> tuple[tf.Operation, dict[int, tf.Operation], tf.Tensor, tf.Tensor] | None:
    """(the kernel, its `count` column blocks' products, the whole kernel read, the input) of
    the input products keyed on `first`, as `_input_blocks` finds them; None otherwise."""
    found = _input_blocks(first)
    if found is None or len(found[1]) != count:
        return None
    kernel, blocks = found
    sliced = column_slice(first.inputs[1])  # as _input_blocks found it
    if sliced is None:
        return None
    return kernel, blocks, sliced[0], first.inputs[0]


def keras_lstm1_step(first: tf.Operation) -> Application | None:
    """Keras LSTMCell with implementation=1 (Keras 2's default), keyed on `first`, the
    MatMul of the input with the first column block of `kernel`: one MatMul per gate block
    (a `tf.split` of the kernel in tf.keras, `kernel[:, :units]` slices in Keras 2), plus
    `h_prev @ recurrent_kernel[:, block]`, through sigmoid or hard_sigmoid."""
    found = _blocks_of(first, 4)
    if found is None:
        return None
    kernel, blocks, full, x = found
    pre, act, names, order = [], [], [], []
    h_prev, recurrent, bias, recurrent_source = None, None, None, None
    for start in sorted(blocks):  # Keras order: i, f, c (our j), o
        z, bias = _biased(blocks[start].outputs[0])
        adds = [op for op in consumers_of(z) if op.type in ADDS]
        if len(adds) != 1:
            return None
        rec = other_input(adds[0], z).op
        cut = column_slice(rec.inputs[1]) if rec.type == "MatMul" else None
        source = weight_source(cut[0]) if cut is not None else None
        if cut is None or source is None:
            return None
        # reads of one variable
        if recurrent_source is not None and source.name != recurrent_source:
            return None
        recurrent_source = source.name
        h_prev, recurrent = rec.inputs[0], cut[0]
        order.append(cut[1])
        gate = gate_nonlinearity(adds[0].outputs[0])
        if gate is None:
            return None
        pre.append(adds[0].outputs[0])
        act.append(gate[0])
        names.append(gate[1])
    if order != sorted(order):  # the recurrent blocks must be in the same order as the input blocks
        return None
    i, f, j, o = act
    states = lstm_states(f, o)
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
        weights=keras_weights(full, recurrent, bias),
        activation_name=names[2],
        claimed=tuple(op.name for op in blocks.values()),
        recurrent_activation=names[0],
    )


def keras_gru1_step(first: tf.Operation) -> Application | None:
    """Keras GRUCell with implementation=1: per block (z, r, h) `x @ kernel[:, block]
    (+ bias)`; z and r add `h_prev @ recurrent_kernel[:, block] (+ recurrent bias)`; the
    candidate adds `r * (h_prev @ recurrent_kernel[:, 2u:] + recurrent bias)` (reset_after)
    or `(r * h_prev) @ recurrent_kernel[:, 2u:]`."""
    found = _blocks_of(first, 3)
    if found is None:
        return None
    kernel, blocks, full, x = found
    # Keras order z (our u), r, h (our c)
    parts = [_biased(blocks[start].outputs[0]) for start in sorted(blocks)]
    bias = parts[0][1]
    pre, act, names, recurrent, h_prev = [], [], [], None, None
    for z, _ in parts[:2]:
        adds = [op for op in consumers_of(z) if op.type in ADDS]
        block = _recurrent_block(other_input(adds[0], z)) if len(adds) == 1 else None
        gate = gate_nonlinearity(adds[0].outputs[0]) if block is not None else None
        if block is None or gate is None:
            return None
        h_prev, recurrent = block[0].inputs[0], block[1]
        pre.append(adds[0].outputs[0])
        act.append(gate[0])
        names.append(gate[1])
    z_c = parts[2][0]
    adds = [op for op in consumers_of(z_c) if op.type in ADDS]
    candidate = gate_nonlinearity(adds[0].outputs[0]) if len(adds) == 1 else None
    h_new = [
        a
        for m in consumers_of(act[0])
        if m.type == "Mul"
        for a in consumers_of(m.outputs[0])
        if a.type in ADDS
    ]
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
        weights=keras_weights(full, recurrent, bias),
        activation_name=candidate[1],
        claimed=tuple(op.name for op in blocks.values()),
        recurrent_activation=names[0],
    )

"""LSTM cells: TensorFlow's `BasicLSTMCell` and `LSTMCell`, Keras' `LSTM` (and `ConvLSTM*D`,
whose step is an LSTM's once its convolutions are summed: `tracer.values.conv`).

    z = [x, h_prev] @ kernel + bias;  i, j, f, o = split(z, 4)      (Keras: i, f, c, o)
    c = f_act(f + forget_bias) * c_prev + i_act(i) * act(j)        (clipped to cell_clip)
    h = o_act(o) * act(c)                                           (@ projection, clipped)

with peepholes (`LSTMCell(use_peepholes=True)`): w_i * c_prev inside i's gate, w_f * c_prev
inside f's, w_o * c inside o's. The gates' activation is the sigmoid in TensorFlow's cells,
the layer's `recurrent_activation` in Keras'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from tracer.cells.activations import sigmoid_into
from tracer.cells.kinds.spec import (
    Array,
    CellMath,
    CellSpec,
    GateHold,
    GateWeights,
    Options,
    Replaying,
    hold_gates,
)

__all__ = ["BASIC_LSTM", "LSTM", "KERAS_LSTM", "KERAS_CONV_LSTM", "LITE_LSTM"]


def _clip(x: Array, v: float | None) -> Array:
    return x if v is None else np.clip(x, -v, v)


class _Lstm(CellMath):
    def reference_step(
        self, spec: CellSpec, x: Array, h: Array, c: Array, w: Mapping[str, Array], o: Options
    ) -> tuple[Array, Array, Array, Array]:
        z = np.concatenate([x, h], axis=1) @ w["kernel"] + w["bias"]
        # i = input_gate, j = new_input, f = forget_gate, o = output_gate (in the spec's order)
        pre = dict(zip(spec.gates, np.split(z, 4, axis=1), strict=True))
        sig, peep = o.gate_activation, "w_i_diag" in w
        ig = sig(pre["i"] + w["w_i_diag"] * c) if peep else sig(pre["i"])
        f = pre["f"] + o.forget_bias
        fg = sig(f + w["w_f_diag"] * c) if peep else sig(f)
        jg = o.activation(pre["j"])
        c = _clip(fg * c + ig * jg, o.cell_clip)
        og = sig(pre["o"] + w["w_o_diag"] * c) if peep else sig(pre["o"])
        h = og * o.activation(c)
        if "projection" in w:
            h = _clip(h @ w["projection"], o.proj_clip)
        post = {"i": ig, "j": jg, "f": fg, "o": og}
        return (
            np.stack([pre[g] for g in spec.gates], axis=1),
            np.stack([post[g] for g in spec.gates], axis=1),
            h,
            c,
        )

    def replay_step(
        self,
        r: Replaying,
        pre: Array,
        z: Array,
        a: Array,
        h: Array,
        c: Array,
        held: GateHold | None = None,
    ) -> tuple[Array, Array | None]:
        w, o = r.weights, r.options
        i_, j_, f_, o_ = (r.columns[g] for g in "ijfo")
        fb = np.float32(o.forget_bias)
        peep = "w_i_diag" in w
        # each gate held (`held`) as its preactivation is complete and as its activation is
        # computed: o's, with peepholes, after the new c it reads
        early = ("i", "j", "f") if peep else ("i", "j", "f", "o")
        hold_gates(held, r, tuple(r.columns), True, pre)
        if r.plain and not peep:
            # i = input_gate, j = new_input, f = forget_gate, o = output_gate
            for g in (i_, f_, o_):
                sigmoid_into(z[:, g], a[:, g], fb if g is f_ else None)
            np.tanh(z[:, j_], out=a[:, j_])
            hold_gates(held, r, early, False, a)
            c_new = a[:, f_] * c
            c_new += a[:, i_] * a[:, j_]
            if o.cell_clip is not None:
                np.clip(c_new, -o.cell_clip, o.cell_clip, out=c_new)
            h_new = np.tanh(c_new)
            h_new *= a[:, o_]
        else:
            sig, act = o.gate_activation, o.activation
            i, j, f, og = z[:, i_], z[:, j_], z[:, f_], z[:, o_]
            a[:, i_] = sig(i + w["w_i_diag"] * c if peep else i)
            a[:, f_] = sig(f + fb + w["w_f_diag"] * c if peep else f + fb)
            a[:, j_] = act(j)
            if not peep:
                a[:, o_] = sig(og)
            hold_gates(held, r, early, False, a)
            c_new = a[:, f_] * c + a[:, i_] * a[:, j_]
            if o.cell_clip is not None:
                c_new = np.clip(c_new, -o.cell_clip, o.cell_clip)
            if peep:
                a[:, o_] = sig(og + w["w_o_diag"] * c_new)
                hold_gates(held, r, "o", False, a)
            h_new = a[:, o_] * act(c_new)
        if "projection" in w:
            h_new = h_new @ w["projection"]
            if o.proj_clip is not None:
                h_new = np.clip(h_new, -o.proj_clip, o.proj_clip)
        return h_new, c_new


class _KerasLstm(_Lstm):
    """Keras' LSTM: TensorFlow's step in Keras' gate order, with the layer's activations;
    the float64 reference is TensorFlow's cells' only."""

    reference_step = CellMath.reference_step


# i = input_gate, j = new_input, f = forget_gate, o = output_gate: the order of
# `i, j, f, o = array_ops.split(value=gate_inputs, num_or_size_splits=4, axis=1)`.
# Parts of each preactivation (`--values ...,contributions`, tracer.values.parts):
# input = x W_g, recurrent = h_prev U_g, bias = b_g; forget_bias is the cell's own constant,
# in no part. LSTMCell(use_peepholes=True): peephole = w_i * c_prev, w_f * c_prev, w_o * c,
# reported beside the preactivation, not in it (the split's output does not hold it).
BASIC_LSTM = CellSpec(
    kind="BasicLSTMCell",
    gates=("i", "j", "f", "o"),
    gate_names=("input gate", "new input", "forget gate", "output gate"),
    sigmoid_before_split=False,
    states=("c", "h"),
    weights=tuple(GateWeights("kernel", "bias", k, 4) for k in range(4)),
    kernel_suffix="/kernel",
    math=_Lstm(),
)

# LSTMCell builds the same gates in the same order; peepholes, clipping and a projection
# are options on top (see tracer.find.graph).
LSTM = replace(BASIC_LSTM, kind="LSTMCell")

# Keras layers (tf-keras and Keras 3), named by their layer class. Their kernel and recurrent
# kernel are stacked into one `kernel` (input rows first) when read (tracer.load.keras).
# Keras LSTM blocks are i, f, c, o: c is our j (new input), recorded in Keras' order.
KERAS_LSTM = replace(
    BASIC_LSTM,
    kind="LSTM",
    gates=("i", "f", "j", "o"),
    gate_names=("input gate", "forget gate", "new input", "output gate"),
    math=_KerasLstm(),
)

# Keras ConvLSTM1D/2D/3D: Keras LSTM's gates i, f, c, o (the last axis of each kernel), each
# preactivation a convolution of the input plus a convolution of the previous output
# (tracer.values.conv). Its kernels are stacked like the LSTM's, each flattened to
# [taps * channels, 4 * filters]; a unit is one filter at one position (position * filters + filter).
KERAS_CONV_LSTM = replace(KERAS_LSTM, kind="ConvLSTM")

# TensorFlow Lite's UNIDIRECTIONAL_SEQUENCE_LSTM: its inputs 1-4 are the input-to-gate
# matrices of the input gate, forget gate, cell (new input) and output gate, in that order,
# as are its recurrent matrices (5-8) and biases (12-15): i, f, c, o, Keras' order, with c
# our j. The gates apply the logistic, the new input and the cell the op's activation;
# optional peepholes (9-11), cell clipping and a projection (16) as LSTMCell's.
LITE_LSTM = replace(KERAS_LSTM, kind="UnidirectionalSequenceLSTM")

"""One spec per RNN cell type: gate labels and order, where the nonlinearity sits, weight layout.

A spec describes what TensorFlow's `tf.compat.v1.nn.rnn_cell` classes build (and Keras'
`LSTM`, `GRU` and `SimpleRNN` layers compute), so that the graph walker (`tracer.find.graph`),
the weight slicer (`tracer.values.weights`), the replay and the numpy reference all read the
layout from one place. It holds no TensorFlow objects.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "CellSpec",
    "HasSpec",
    "GateWeights",
    "BASIC_LSTM",
    "LSTM",
    "GRU",
    "BASIC_RNN",
    "KERAS_LSTM",
    "KERAS_GRU",
    "KERAS_SIMPLE_RNN",
    "KERAS_CONV_LSTM",
    "SPECS",
    "spec_for",
]


@dataclass(frozen=True)
class GateWeights:
    """Where one gate's weights sit: column block `block` of `blocks` in kernel `kernel`.

    The kernel's first `input_size` rows act on the input, the remaining rows on the
    recurrent state (or, for the GRU candidate, on `r * h_prev`).
    """

    kernel: str
    bias: str
    block: int
    blocks: int


@dataclass(frozen=True)
class CellSpec:
    """What one RNN cell class computes, as far as gatetrace needs to know.

    kind:                 the TensorFlow class name.
    gates:                gate labels, in the order of the kernel's column blocks.
    gate_names:           what each label means.
    sigmoid_before_split: True when the graph applies the gate sigmoid to the whole
                          `[batch, blocks * units]` matrix before splitting it (GRUCell);
                          False when it splits the preactivations first (LSTM cells).
    states:               the state tensors recorded per step (`c` cell state, `h` output).
    weights:              per gate, the kernel and bias it reads and its column block.
    kernel_suffix:        what follows the cell's name in its main kernel's variable name.
    """

    kind: str
    gates: tuple[str, ...]
    gate_names: tuple[str, ...]
    sigmoid_before_split: bool
    states: tuple[str, ...]
    weights: tuple[GateWeights, ...]
    kernel_suffix: str

    @property
    def is_lstm(self) -> bool:
        return self.states == ("c", "h")


class HasSpec:
    """`kind` and `gates` for a found cell, read from its `spec` (graph cells and Keras layers)."""

    name: str
    spec: CellSpec
    units: int
    input_size: int

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def gates(self) -> tuple[str, ...]:
        return self.spec.gates


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
)

# LSTMCell builds the same gates in the same order; peepholes, clipping and a projection
# are options on top (see tracer.find.graph).
LSTM = replace(BASIC_LSTM, kind="LSTMCell")

# r = reset gate, u = update gate: `value = sigmoid(gate_inputs); r, u = split(value, 2)`;
# c = candidate: `activation(concat([x, r * h_prev]) @ candidate_kernel + candidate_bias)`.
# Parts: r, u as for the LSTM; c: input = x W_c, recurrent = (r * h_prev) U_c, bias = b_c.
GRU = CellSpec(
    kind="GRUCell",
    gates=("r", "u", "c"),
    gate_names=("reset gate", "update gate", "candidate"),
    sigmoid_before_split=True,
    states=("h",),
    weights=(
        GateWeights("kernel", "bias", 0, 2),
        GateWeights("kernel", "bias", 1, 2),
        GateWeights("candidate_kernel", "candidate_bias", 0, 1),
    ),
    kernel_suffix="/gates/kernel",
)

# h = activation(concat([x, h_prev]) @ kernel + bias): the single "gate" is the new state.
# Parts: input = x W, recurrent = h_prev U, bias = b.
BASIC_RNN = CellSpec(
    kind="BasicRNNCell",
    gates=("h",),
    gate_names=("new state",),
    sigmoid_before_split=False,
    states=("h",),
    weights=(GateWeights("kernel", "bias", 0, 1),),
    kernel_suffix="/kernel",
)

# Keras layers (tf-keras and Keras 3), named by their layer class. Their kernel and recurrent
# kernel are stacked into one `kernel` (input rows first) when read (tracer.load.keras).
# Keras LSTM blocks are i, f, c, o: c is our j (new input), recorded in Keras' order.
KERAS_LSTM = replace(
    BASIC_LSTM,
    kind="LSTM",
    gates=("i", "f", "j", "o"),
    gate_names=("input gate", "forget gate", "new input", "output gate"),
)

# Keras GRU blocks are z, r, h: z is our u (update gate), h our c (candidate). With
# reset_after (the default) the recurrent bias is separate: `recurrent_bias`.
# Parts with reset_after: u, r: input, recurrent, bias, recurrent_bias = b_r (its slice);
# c: recurrent = r * (h_prev U_c), recurrent_bias = r * b_r. Without: as GRUCell.
KERAS_GRU = CellSpec(
    kind="GRU",
    gates=("u", "r", "c"),
    gate_names=("update gate", "reset gate", "candidate"),
    sigmoid_before_split=False,
    states=("h",),
    weights=tuple(GateWeights("kernel", "bias", k, 3) for k in range(3)),
    kernel_suffix="/kernel",
)

KERAS_SIMPLE_RNN = replace(BASIC_RNN, kind="SimpleRNN")

# Keras ConvLSTM1D/2D/3D: Keras LSTM's gates i, f, c, o (the last axis of each kernel), each
# preactivation a convolution of the input plus a convolution of the previous output
# (tracer.values.conv). Its kernels are stacked like the LSTM's, each flattened to
# [taps * channels, 4 * filters]; a unit is one filter at one position (position * filters + filter).
KERAS_CONV_LSTM = replace(KERAS_LSTM, kind="ConvLSTM")

SPECS: dict[str, CellSpec] = {
    s.kind: s
    for s in (
        BASIC_LSTM,
        LSTM,
        GRU,
        BASIC_RNN,
        KERAS_LSTM,
        KERAS_GRU,
        KERAS_SIMPLE_RNN,
        KERAS_CONV_LSTM,
    )
}


def spec_for(kind: str) -> CellSpec:
    """The spec of a TensorFlow cell class name, e.g. `spec_for("GRUCell")`."""
    try:
        return SPECS[kind]
    except KeyError:
        raise ValueError(f"unknown cell kind {kind!r}: expected one of {sorted(SPECS)}") from None

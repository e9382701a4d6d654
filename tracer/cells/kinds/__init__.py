"""Every cell kind gatetrace knows, one module a family: its specs (gate labels and order,
weight layout) and its math (one step in float64 for the reference, in float32 for the
replays), on the interface of `spec.py`.

    lstm.py   BasicLSTMCell, LSTMCell, Keras LSTM (and ConvLSTM's step), TensorFlow Lite's LSTM op
    gru.py    GRUCell, Keras GRU
    rnn.py    BasicRNNCell, Keras SimpleRNN, TensorFlow Lite's RNN op

A new kind is a module here and its line in `SPECS`; the graph walker finds its steps by a
pattern of its own (`tracer.find.tf_cells`, `tracer.find.keras_cells`).
"""

from tracer.cells.kinds.gru import GRU, KERAS_GRU
from tracer.cells.kinds.lstm import BASIC_LSTM, KERAS_CONV_LSTM, KERAS_LSTM, LITE_LSTM, LSTM
from tracer.cells.kinds.rnn import BASIC_RNN, KERAS_SIMPLE_RNN, LITE_RNN
from tracer.cells.kinds.spec import (
    CellMath,
    CellSpec,
    GateHold,
    GateWeights,
    HasSpec,
    Options,
    Replaying,
)

__all__ = [
    "CellSpec",
    "CellMath",
    "Options",
    "Replaying",
    "GateHold",
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
    "LITE_LSTM",
    "LITE_RNN",
    "SPECS",
    "spec_for",
]

# every kind, by the name of its TensorFlow class, Keras layer or TensorFlow Lite op
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
        LITE_LSTM,
        LITE_RNN,
    )
}


def spec_for(kind: str) -> CellSpec:
    """The spec of a TensorFlow cell class name, e.g. `spec_for("GRUCell")`."""
    try:
        return SPECS[kind]
    except KeyError:
        raise ValueError(f"unknown cell kind {kind!r}: expected one of {sorted(SPECS)}") from None

"""Every step of every cell in a graph: the step patterns of each cell family, run side by side.

`find_steps(graph)` tries each `Split` (4 ways: an LSTM; 2: a TF GRUCell; 3: a Keras
GRU), each unclaimed `MatMul` (Keras cells with implementation=1, keyed on their first
input block), then each `BiasAdd` and `AddV2` (simple RNN cells) against the patterns of
`tracer.find.tf_cells` and `tracer.find.keras_cells`, and returns an `Application` per step
found. The same patterns serve unrolled graphs (`tracer.find.unrolled`) and while-loop
bodies (`tracer.find.loops`).
"""

from __future__ import annotations

from tracer._tf import tf
from tracer.find.application import ADDS, Application
from tracer.find.keras_blocks import keras_gru1_step, keras_lstm1_step
from tracer.find.keras_cells import keras_gru_step, keras_lstm_step, keras_rnn_step
from tracer.find.tf_cells import gru_step, lstm_step, rnn_step

__all__ = ["find_steps"]


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
            (lstm_step(op) or keras_lstm_step(op))
            if n == 4
            else gru_step(op)
            if n == 2
            else keras_gru_step(op)
            if n == 3
            else None
        )
        if app is not None:
            apps.append(app)
            claimed.update(app.claimed)
    # Keras cells with implementation=1: keyed on their first input block
    for op in graph.get_operations():
        if op.type == "MatMul" and op.name not in claimed:
            app = keras_lstm1_step(op) or keras_gru1_step(op)
            if app is not None:
                apps.append(app)
                claimed.update(app.claimed)
    for op in graph.get_operations():
        if op.type == "BiasAdd" and op.inputs[0].op.name not in claimed:
            app = rnn_step(op)
            if app is not None:
                apps.append(app)
        elif op.type in ADDS and not claimed.intersection(t.op.name for t in op.inputs):
            app = keras_rnn_step(op)
            if app is not None and not claimed.intersection(app.claimed):
                apps.append(app)
                claimed.update(app.claimed)
    return apps

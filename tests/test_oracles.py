"""Every way gatetrace computes values instead of fetching the model's own tensors is checked
on every batch against an oracle gatetrace did not build (`docs/how-cells-are-found.md`,
"checked against"). Each test here gives one such path a deliberately wrong reading of the
weights, one a reader could plausibly make (two gate blocks taken for each other, a block's
layout misread, a bias row misplaced), and shows the oracle refusing it: the right reading
passes the same check, the wrong one raises ReplayMismatchError naming the cell.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from recorders.errors import ReplayMismatchError
from tests.test_keras import FEATURES, T, keras_module, randomise


def _swapped(a: np.ndarray, blocks: int, first: int = 0, second: int = 1) -> np.ndarray:
    """`a` with two of its `blocks` column blocks (gates) exchanged."""
    parts = np.split(a, blocks, axis=-1)
    parts[first], parts[second] = parts[second], parts[first]
    return np.concatenate(parts, axis=-1)


def _keras_plan(model):
    from tracer.find.keras import find_layers
    from tracer.load.keras import wrap
    from tracer.values.keras import KerasPlan, resolve_inputs

    km = wrap(model)
    cells = find_layers(km)
    x = np.random.RandomState(0).uniform(-1, 1, (4, *model.inputs[0].shape[1:])).astype(np.float32)
    return KerasPlan, km, cells, resolve_inputs(km, x)


def _keras_model(kind: str):
    keras = keras_module("keras3")
    x = keras.Input((T, FEATURES), name="x")
    layer = {
        "LSTM": lambda: keras.layers.LSTM(4, return_sequences=True),
        "GRU": lambda: keras.layers.GRU(4, return_sequences=True),
        "SimpleRNN": lambda: keras.layers.SimpleRNN(4, return_sequences=True),
    }[kind]()
    model = keras.Model(x, layer(x))
    randomise(model, seed=5)
    return model


# a plausible misreading of each Keras cell's arrays (gatetrace's: kernel [input + units, k units])
MISREAD = {
    "LSTM": lambda a, u: {**a, "kernel": _swapped(a["kernel"], 4)},  # i and f taken for each other
    "GRU": lambda a, u: {**a, "bias": a["recurrent_bias"], "recurrent_bias": a["bias"]},
    "SimpleRNN": lambda a, u: {  # the recurrent matrix read transposed
        **a,
        "kernel": np.concatenate([a["kernel"][:-u], a["kernel"][-u:].T]),
    },
}


@pytest.mark.parametrize("kind", sorted(MISREAD))
def test_a_keras_replay_is_checked_against_the_layer_as_keras_runs_it(kind):
    """Keras layers are replayed in numpy; the oracle is the layer itself, called by Keras
    on the same batch (its outputs)."""
    plan, km, cells, batch = _keras_plan(_keras_model(kind))
    (cell,) = cells
    plan(km, cells).fetch(batch)  # the reading gatetrace makes: equal
    wrong = replace(cell, arrays=MISREAD[kind](cell.arrays, cell.units))
    with pytest.raises(ReplayMismatchError, match=f"cell {cell.name}: replayed outputs differ"):
        plan(km, [wrong]).fetch(batch)


def test_a_conv_lstm_replay_is_checked_against_the_layer_as_keras_runs_it():
    """ConvLSTM's patches: the kernel's taps read in the wrong order (its rows on the input
    reversed) are refused by the layer's own outputs."""
    from tests.test_conv_lstm import conv_model

    plan, km, cells, batch = _keras_plan(conv_model("keras3", "3d-same"))
    (cell,) = cells
    plan(km, cells).fetch(batch)
    kernel = cell.arrays["kernel"]  # [input taps x channels + recurrent taps x filters, 4 filters]
    inputs = kernel.shape[0] - int(np.prod(cell.conv.kernel_size)) * cell.conv.filters
    wrong = np.concatenate([kernel[:inputs][::-1], kernel[inputs:]])
    with pytest.raises(ReplayMismatchError, match="cell conv_lstm: replayed outputs differ"):
        plan(km, [replace(cell, arrays={**cell.arrays, "kernel": wrong})]).fetch(batch)


def test_a_keras_2_cudnn_layer_is_checked_against_keras_own_conversion():
    """A CuDNNLSTM runs as the LSTM Keras' own loader converts it to; the stored blocks taken
    for the matrices cuDNN multiplies by (gatetrace's reading before) are refused by that
    LSTM's outputs."""
    from tests.test_keras_files import cudnn_model
    from tracer.find.keras import find_layers
    from tracer.load.keras import wrap
    from tracer.load.keras_cudnn import on_cpu
    from tracer.values.keras import KerasPlan, resolve_inputs

    original = cudnn_model()
    km = wrap(on_cpu(original))
    cells = [c for c in find_layers(km) if c.name == "cu_dnnlstm_1"]
    x = np.random.RandomState(0).uniform(-1, 1, (4, T, FEATURES)).astype(np.float32)
    batch = resolve_inputs(km, x)
    KerasPlan(km, cells).fetch(batch)
    stored = original.get_layer("cu_dnnlstm_1")
    kernel = np.concatenate([stored.kernel.numpy(), stored.recurrent_kernel.numpy()])
    wrong = replace(cells[0], arrays={**cells[0].arrays, "kernel": kernel})
    with pytest.raises(ReplayMismatchError, match="cell cu_dnnlstm_1: replayed outputs differ"):
        KerasPlan(km, [wrong]).fetch(batch)


def test_a_tflite_fused_op_is_checked_against_the_interpreter(tmp_path):
    """A fused UNIDIRECTIONAL_SEQUENCE_LSTM is replayed from the file's weights; the oracle is
    the op's own outputs and final states in the file's interpreter."""
    from tests.test_tflite import D, _model
    from tracer._tf import tf
    from tracer.find.lite import find_ops
    from tracer.load.tflite import LiteModel
    from tracer.load.tflite_check import checked
    from tracer.values.lite import LitePlan

    path = tmp_path / "lstm.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(_model("tf-keras-lstm")).convert())
    model = LiteModel(*checked(path, "lstm.tflite"), "lstm.tflite")
    (cell,) = find_ops(model)
    x = {model.inputs[0]: np.random.RandomState(0).uniform(-1, 1, (3, 5, D)).astype(np.float32)}
    LitePlan(model, [cell]).fetch(x)
    wrong = {**cell.arrays, "kernel": _swapped(cell.arrays["kernel"], 4, 1, 3)}  # f and o
    with pytest.raises(ReplayMismatchError, match="cell lstm: replayed"):
        LitePlan(model, [replace(cell, arrays=wrong)]).fetch(x)


@pytest.mark.parametrize("kind", ["LSTMBlockCell", "BlockLSTM", "GRUBlockCell"])
def test_a_fused_tf1_op_is_checked_against_its_own_gates(kind):
    """A fused op's activations are its own outputs; the preactivations are computed from
    its weights and checked against every gate it outputs (before: the input gate only, so
    f and o taken for each other went unnoticed)."""
    import tracer
    from tests.test_fused import D, T, build
    from tracer.values.fused import fused_values
    from tracer.values.weights import read_weights

    graph, session, _ = build(kind)
    model = tracer.from_session(session)
    (cell,) = tracer.find_cells(graph)
    x = np.random.RandomState(2).uniform(-1, 1, (3, T, D)).astype(np.float32)
    names = cell.fused.tensors()
    fetched = dict(zip(names, session.run(names, {"x:0": x}), strict=True))
    weights = read_weights(model.session, [cell])[cell.name]
    fused_values(cell, fetched, weights)
    if kind == "GRUBlockCell":  # r and u taken for each other
        wrong = {**weights, "kernel": _swapped(weights["kernel"], 2)}
        gate = "r"
    else:  # f and o taken for each other (blocks 2 and 3 of i, j, f, o)
        wrong = {**weights, "kernel": _swapped(weights["kernel"], 4, 2, 3)}
        gate = "f"
    with pytest.raises(ReplayMismatchError, match=f"op's own gate {gate} differs"):
        fused_values(cell, fetched, wrong)
    session.close()

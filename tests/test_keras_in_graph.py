"""Keras layers and cells inside TF1 session graphs, as tf.keras scripts built them.

A Keras `LSTM` and `SimpleRNN` layer run in Keras' own while loop (`K.rnn`, control flow
v1 and v2): replayed and checked against the loop. Keras cells called by hand over the
steps: fetched from their own ops. Every recorded value is compared with a float64
recomputation of Keras' formulas written here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from tests.conftest import session_model
from tracer._tf import tf, v1
from tracer.cli import main

T, D = 6, 4


def keras():
    import tracer._tf  # noqa: F401  (TF_USE_LEGACY_KERAS before tf_keras loads)

    # isort: split
    import tf_keras

    return tf_keras


def sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def hard_sigmoid(v):
    """Keras 2's and tf-keras' hard_sigmoid."""
    return np.clip(0.2 * v + 0.5, 0.0, 1.0)


def keras_lstm64(x, kernel, recurrent, bias, gate=sig):
    """Keras LSTM from zero state: activations [examples, steps, (i, f, j=c, o), units] and h."""
    x = np.asarray(x, np.float64)
    u = recurrent.shape[0]
    h, c = np.zeros((len(x), u)), np.zeros((len(x), u))
    act, hs = np.zeros((len(x), x.shape[1], 4, u)), np.zeros((len(x), x.shape[1], u))
    for t in range(x.shape[1]):
        i, f, j, o = np.split(x[:, t] @ kernel + h @ recurrent + bias, 4, axis=1)
        i, f, j, o = gate(i), gate(f), np.tanh(j), gate(o)
        c = f * c + i * j
        h = o * np.tanh(c)
        act[:, t], hs[:, t] = np.stack([i, f, j, o], 1), h
    return act, hs


def keras_rnn64(x, kernel, recurrent, bias):
    x = np.asarray(x, np.float64)
    h = np.zeros((len(x), recurrent.shape[0]))
    hs = np.zeros((len(x), x.shape[1], recurrent.shape[0]))
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ kernel + bias + h @ recurrent)
        hs[:, t] = h
    return hs


def keras_gru64(x, kernel, recurrent, bias):
    """Keras GRU from zero state (bias [2, 3u] with reset_after, [3u] without): activations
    [examples, steps, (u=z, r, c=h), units]."""
    x = np.asarray(x, np.float64)
    u = recurrent.shape[0]
    h = np.zeros((len(x), u))
    act = np.zeros((len(x), x.shape[1], 3, u))
    for t in range(x.shape[1]):
        if bias.ndim == 2:
            xz, rz = x[:, t] @ kernel + bias[0], h @ recurrent + bias[1]
            z, r = sig(xz[:, :u] + rz[:, :u]), sig(xz[:, u : 2 * u] + rz[:, u : 2 * u])
            c = np.tanh(xz[:, 2 * u :] + r * rz[:, 2 * u :])
        else:
            xz = x[:, t] @ kernel + bias
            z, r = (
                sig(xz[:, :u] + h @ recurrent[:, :u]),
                sig(xz[:, u : 2 * u] + h @ recurrent[:, u : 2 * u]),
            )
            c = np.tanh(xz[:, 2 * u :] + (r * h) @ recurrent[:, 2 * u :])
        h = z * h + (1 - z) * c
        act[:, t] = np.stack([z, r, c], 1)
    return act


def weights(values, scope):
    return values[f"{scope}/kernel"], values[f"{scope}/recurrent_kernel"], values[f"{scope}/bias"]


STYLES = {  # how the LSTM layer was configured: tf.keras' defaults, and Keras 2.2's
    "tf.keras": {},
    "keras-2.2": {"implementation": 1, "recurrent_activation": "hard_sigmoid"},
}


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("fmt", ["checkpoint", "frozen"])
def test_keras_layers_in_a_session_graph_are_replayed_exactly(style, cf, fmt, tmp_path, capsys):
    K = keras()

    def body():
        x = v1.placeholder(tf.float32, [None, T, D], name="x")
        y = K.layers.LSTM(3, return_sequences=True, name="lstm", **STYLES[style])(x)
        tf.identity(K.layers.SimpleRNN(2, return_sequences=True, name="rnn")(y), name="output")

    # frozen: as Keras 2 models were served
    path, values = session_model(body, tmp_path, fmt, "output", cf)
    xs = np.random.RandomState(3).uniform(-1, 1, (5, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert "recorded 2 cells on 5 sequences" in capsys.readouterr().out
    rec = Recording(tmp_path / "rec")
    act, h = keras_lstm64(
        xs, *weights(values, "lstm/lstm_cell"), gate=hard_sigmoid if style == "keras-2.2" else sig
    )
    for g, gate in enumerate("ifjo"):
        np.testing.assert_allclose(
            rec.gate_array("lstm/lstm_cell", gate, "activation"), act[:, :, g], atol=1e-5
        )
    np.testing.assert_allclose(
        rec.state_array("rnn/simple_rnn_cell", "h"),
        keras_rnn64(h, *weights(values, "rnn/simple_rnn_cell")),
        atol=1e-5,
    )
    table = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    j = table[
        (table["cell"] == "lstm/lstm_cell")
        & (table["gate"] == "j")
        & (table["source"] == "recurrent")
    ].sort_values(["row", "unit"])
    np.testing.assert_array_equal(
        j["value"].to_numpy().reshape(3, 3), values["lstm/lstm_cell/recurrent_kernel"][:, 6:9]
    )


@pytest.mark.parametrize("implementation", [1, 2])
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_keras_gru_in_a_session_graph_is_replayed_exactly(
    implementation, reset_after, cf, tmp_path, capsys
):
    K = keras()

    def body():
        x = v1.placeholder(tf.float32, [None, T, D], name="x")
        # return_sequences=False under control flow v1 makes tf-keras' own loop write one
        # TensorArray index twice (the model cannot run): v1 keeps all outputs, v2 the last.
        K.layers.GRU(
            3,
            reset_after=reset_after,
            implementation=implementation,
            return_sequences=cf == "v1",
            name="gru",
        )(x)

    path, values = session_model(body, tmp_path, control_flow=cf)
    xs = np.random.RandomState(5).uniform(-1, 1, (4, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    rec = Recording(tmp_path / "rec")
    act = keras_gru64(xs, *weights(values, "gru/gru_cell"))
    for g, gate in enumerate("urc"):
        np.testing.assert_allclose(
            rec.gate_array("gru/gru_cell", gate, "activation"), act[:, :, g], atol=1e-5
        )
    table = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    assert ("recurrent_bias" in set(table["source"])) == reset_after


def test_a_layer_unrolled_by_keras_is_fetched_from_its_own_ops(tmp_path, capsys):
    """`LSTM(unroll=True)`: Keras applies its cell once per step in the graph, no loop."""
    K = keras()
    path, values = session_model(
        lambda: K.layers.LSTM(3, unroll=True, return_sequences=True, name="lstm")(
            v1.placeholder(tf.float32, [None, T, D], name="x")
        ),
        tmp_path,
    )
    xs = np.random.RandomState(8).uniform(-1, 1, (3, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    )
    assert "recorded 1 cell on 3 sequences" in capsys.readouterr().out
    act, _ = keras_lstm64(xs, *weights(values, "lstm/lstm_cell"))
    rec = Recording(tmp_path / "rec")
    for g, gate in enumerate("ifjo"):
        np.testing.assert_allclose(
            rec.gate_array("lstm/lstm_cell", gate, "activation"), act[:, :, g], atol=1e-5
        )


def test_keras_cells_called_by_hand_are_fetched_from_their_own_ops(tmp_path, capsys):
    """A tf.keras SimpleRNNCell called for 90 steps, an LSTMCell and a GRUCell for 6, in a session graph."""
    K = keras()
    steps = 90

    def body():
        x = v1.placeholder(tf.float32, [None, steps, D], name="x")
        rnn = K.layers.SimpleRNNCell(3, name="by_hand")
        state = [tf.zeros([tf.shape(x)[0], 3])]
        for t in range(steps):
            _, state = rnn(x[:, t], state)
        lstm = K.layers.LSTMCell(3, name="lstm_by_hand")
        lstm_state = [tf.zeros([tf.shape(x)[0], 3])] * 2
        for t in range(T):
            _, lstm_state = lstm(x[:, t], lstm_state)
        gru = K.layers.GRUCell(3, name="gru_by_hand")  # reset_after, tf.keras' default
        gru_state = [tf.zeros([tf.shape(x)[0], 3])]
        for t in range(T):
            _, gru_state = gru(x[:, t], gru_state)

    path, values = session_model(body, tmp_path)
    xs = np.random.RandomState(4).uniform(-1, 1, (3, steps, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert main(["inspect", path]) == 0
    assert "by_hand: fetched from gate ops" in capsys.readouterr().out
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    )
    rec = Recording(tmp_path / "rec")
    np.testing.assert_allclose(
        rec.gate_array("by_hand", "h", "activation"),
        keras_rnn64(xs, *weights(values, "by_hand")),
        atol=1e-5,
    )
    act, _ = keras_lstm64(xs[:, :T], *weights(values, "lstm_by_hand"))
    for g, gate in enumerate("ifjo"):
        np.testing.assert_allclose(
            rec.gate_array("lstm_by_hand", gate, "activation"), act[:, :, g], atol=1e-5
        )
    act = keras_gru64(xs[:, :T], *weights(values, "gru_by_hand"))
    for g, gate in enumerate("urc"):
        np.testing.assert_allclose(
            rec.gate_array("gru_by_hand", gate, "activation"), act[:, :, g], atol=1e-5
        )


def keras_2_2_lstm(x, units):
    """Keras 2.2.4's LSTM as its TensorFlow backend built it in a TF1 graph: `build` slices the
    kernel, recurrent kernel and bias into gate blocks once, outside the loop; the cell
    (implementation 1, hard_sigmoid written out) runs in `K.rnn`'s control-flow-v1 while loop
    over TensorArrays."""
    features = x.shape[-1]
    with v1.variable_scope("lstm_1"):
        kernel = v1.get_variable("kernel", [features, 4 * units])
        recurrent = v1.get_variable("recurrent_kernel", [units, 4 * units])
        bias = v1.get_variable("bias", [4 * units])
    k = [kernel[:, g * units : (g + 1) * units] for g in range(4)]
    r = [recurrent[:, g * units : (g + 1) * units] for g in range(4)]
    b = [bias[g * units : (g + 1) * units] for g in range(4)]

    def hard_sigmoid(v):
        return tf.clip_by_value(0.2 * v + 0.5, 0.0, 1.0)

    steps = tf.shape(x)[1]
    inputs = v1.TensorArray(tf.float32, size=steps).unstack(tf.transpose(x, [1, 0, 2]))
    outputs = v1.TensorArray(tf.float32, size=steps)
    zeros = tf.zeros([tf.shape(x)[0], units])

    def step(t, out, h, c):
        x_t = inputs.read(t)
        z = [tf.nn.bias_add(tf.matmul(x_t, k[g]), b[g]) for g in range(4)]
        i = hard_sigmoid(z[0] + tf.matmul(h, r[0]))
        f = hard_sigmoid(z[1] + tf.matmul(h, r[1]))
        c = f * c + i * tf.tanh(z[2] + tf.matmul(h, r[2]))
        o = hard_sigmoid(z[3] + tf.matmul(h, r[3]))
        h = o * tf.tanh(c)
        return t + 1, out.write(t, h), h, c

    _, out, _, _ = tf.while_loop(
        lambda t, *_: t < steps, step, [tf.constant(0), outputs, zeros, zeros]
    )
    return tf.transpose(out.stack(), [1, 0, 2])


def test_a_keras_2_2_lstm_frozen_for_serving(tmp_path, capsys):
    def body():
        tf.identity(
            keras_2_2_lstm(v1.placeholder(tf.float32, [None, T, D], name="x"), 3), name="output"
        )

    path, values = session_model(body, tmp_path, "frozen", "output", "v1")
    xs = np.random.RandomState(6).uniform(-1, 1, (4, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    act, _ = keras_lstm64(xs, *weights(values, "lstm_1"), gate=hard_sigmoid)
    rec = Recording(tmp_path / "rec")
    for g, gate in enumerate("ifjo"):
        np.testing.assert_allclose(
            rec.gate_array("lstm_1", gate, "activation"), act[:, :, g], atol=1e-5
        )


def test_a_masked_keras_loop_in_a_session_graph_fails_loudly(tmp_path, capsys):
    """Masking inside K.rnn's loop is not replayed: the check against the loop says so in one
    line, and nothing of the cell is written."""
    K = keras()
    path, _ = session_model(
        lambda: K.layers.LSTM(3, return_sequences=True, name="lstm")(
            K.layers.Masking(0.0)(v1.placeholder(tf.float32, [None, T, D], name="x"))
        ),
        tmp_path,
    )
    xs = np.random.RandomState(9).uniform(-1, 1, (3, T, D)).astype(np.float32)
    xs[1, 3:] = 0.0  # masked steps
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "cell lstm/lstm_cell: replayed final c differ from the graph's by up to" in err
    )
    assert not (tmp_path / "rec").exists()

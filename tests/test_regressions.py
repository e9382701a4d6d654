"""The three situations users asked about in public, pinned down."""

from __future__ import annotations

import numpy as np

import tracer
from tests.conftest import R, build
from tracer._tf import tf, v1

TOL = 1e-5


def test_basic_lstm_3_units_7_steps_fixed_batch_of_one():
    """BasicLSTMCell(3) under static_rnn, placeholder [1, 7, 4]: which ops hold the gates?"""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.BasicLSTMCell(num_units=3), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    built = build(body, steps=7, features=4, batch=1)
    (cell,) = tracer.find_cells(built.graph)
    assert [s.gate_op for s in cell.steps] == ["rnn/basic_lstm_cell/split"] + [
        f"rnn/basic_lstm_cell/split_{k}" for k in range(1, 7)
    ]
    assert cell.variables == {
        "kernel": "rnn/basic_lstm_cell/kernel",
        "bias": "rnn/basic_lstm_cell/bias",
    }
    x = np.random.RandomState(0).randn(1, 7, 4).astype(np.float32)
    ct = tracer.trace(tracer.from_session(built.session), {"x": x})["rnn/basic_lstm_cell"]
    expected = tracer.run_cell("BasicLSTMCell", built.weights["rnn/basic_lstm_cell"], x)
    np.testing.assert_allclose(ct.preactivation, expected["preactivation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(ct.activation, expected["activation"], atol=TOL, rtol=0)


def test_mnist_shapes_w_and_u_are_kernel_slices_and_unit_3_recomputes_by_hand():
    """One step of 784 inputs into BasicLSTMCell(128): W = kernel[:784, k*128:(k+1)*128]."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(128), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    built = build(body, steps=1, features=784)
    model = tracer.from_session(built.session)
    (cell,) = tracer.find_cells(built.graph)
    kernel = built.weights["rnn/basic_lstm_cell"]["kernel"]
    bias = built.weights["rnn/basic_lstm_cell"]["bias"]
    gw = tracer.gate_weights(cell, tracer.read_weights(built.session, [cell])[cell.name])
    for k, gate in enumerate("ijfo"):
        np.testing.assert_array_equal(gw[gate].W, kernel[:784, k * 128 : (k + 1) * 128])
        np.testing.assert_array_equal(gw[gate].U, kernel[784:, k * 128 : (k + 1) * 128])
        np.testing.assert_array_equal(gw[gate].b, bias[k * 128 : (k + 1) * 128])

    x = np.random.RandomState(1).rand(2, 1, 784).astype(np.float32)
    ct = tracer.trace(model, {"x": x})["rnn/basic_lstm_cell"]
    # By hand, unit 3, zero initial state: only W and b matter at step 0.
    for k, gate in enumerate("ijfo"):
        pre = x[:, 0].astype(np.float64) @ gw[gate].W[:, 3].astype(np.float64) + gw[gate].b[3]
        np.testing.assert_allclose(ct.preactivation[:, 0, k, 3], pre, atol=TOL, rtol=0)
    f = ct.preactivation[:, 0, 2, 3].astype(np.float64)
    np.testing.assert_allclose(
        ct.activation[:, 0, 2, 3], 1 / (1 + np.exp(-(f + 1.0))), atol=TOL, rtol=0
    )


def test_basic_rnn_called_directly_w_is_the_first_3_rows():
    """BasicRNNCell(2) called as cell(inputs, state) on [4, 3] inputs with a zero state."""
    graph = tf.Graph()
    with graph.as_default():
        inputs = v1.placeholder(tf.float32, [4, 3], name="inputs")
        cell = R.BasicRNNCell(num_units=2)
        output, _ = cell(inputs, cell.zero_state(4, tf.float32))
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        kernel, bias = session.run([cell.weights[0], cell.weights[1]])
    assert kernel.shape == (5, 2)
    (found,) = tracer.find_cells(graph)
    assert (found.name, found.kind, len(found.steps), found.input_size) == (
        "basic_rnn_cell",
        "BasicRNNCell",
        1,
        3,
    )
    w = tracer.gate_weights(found, tracer.read_weights(session, [found])[found.name])["h"]
    np.testing.assert_array_equal(w.W, kernel[:3])
    np.testing.assert_array_equal(w.U, kernel[3:])
    x = np.random.RandomState(2).randn(4, 3).astype(np.float32)
    ct = tracer.trace(tracer.from_session(session), {"inputs": x})["basic_rnn_cell"]
    np.testing.assert_allclose(
        ct.activation[:, 0, 0], np.tanh(x.astype(np.float64) @ kernel[:3] + bias), atol=TOL, rtol=0
    )
    np.testing.assert_allclose(
        ct.states["h"][:, 0], session.run(output, {inputs: x}), atol=TOL, rtol=0
    )

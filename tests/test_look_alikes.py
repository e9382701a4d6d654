"""Cells that look like the ones gatetrace knows and compute something else are never read as
those: TF 1.15 contrib's UGRNNCell (one kernel MatMul split in two, like a GRU's gates),
CoupledInputForgetGateLSTMCell (split in three) and LayerNormBasicLSTMCell (split in four, like
BasicLSTMCell, a layer norm after each gate). Built with the ops their TF 1.15 source builds, in
`static_rnn` and `dynamic_rnn`; each is refused in one line, and nothing is recorded.
"""

from __future__ import annotations

import pytest

from tests.conftest import R, run_cli, session_model
from tracer._tf import tf, v1

STEPS, FEATURES, UNITS = 5, 3, 4


class UGRNNCell(R.RNNCell):
    def __init__(self, forget_bias=1.0):
        super().__init__()
        self.forget_bias = forget_bias

    state_size = output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or "ugrnn_cell", reuse=v1.AUTO_REUSE):
            w = v1.get_variable("kernel", [x.shape[-1] + UNITS, 2 * UNITS])
            b = v1.get_variable("bias", [2 * UNITS])
            g_act, c_act = tf.split(tf.nn.bias_add(tf.matmul(tf.concat([x, state], 1), w), b), 2, 1)
            g = tf.sigmoid(g_act + self.forget_bias)
            h = g * state + (1.0 - g) * tf.tanh(c_act)
            return h, h


class CoupledInputForgetGateLSTMCell(R.RNNCell):
    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or "coupled_input_forget_gate_lstm_cell", reuse=v1.AUTO_REUSE):
            c_prev, m_prev = state
            w = v1.get_variable("W_0", [x.shape[-1] + UNITS, 3 * UNITS])
            b = v1.get_variable("B", [3 * UNITS])
            j, f, o = tf.split(tf.nn.bias_add(tf.matmul(tf.concat([x, m_prev], 1), w), b), 3, 1)
            f_act = tf.sigmoid(f + 1.0)
            c = f_act * c_prev + (1 - f_act) * tf.tanh(j)
            h = tf.sigmoid(o) * tf.tanh(c)
            return h, R.LSTMStateTuple(c, h)


class LayerNormBasicLSTMCell(R.RNNCell):
    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    @staticmethod
    def _norm(v, scope):
        with v1.variable_scope(scope):
            gamma = v1.get_variable("gamma", [UNITS], initializer=v1.constant_initializer(1.0))
            beta = v1.get_variable("beta", [UNITS], initializer=v1.constant_initializer(0.0))
        mean, var = tf.nn.moments(v, [1], keepdims=True)
        return (v - mean) * tf.math.rsqrt(var + 1e-3) * gamma + beta

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or "layer_norm_basic_lstm_cell", reuse=v1.AUTO_REUSE):
            c, h = state
            w = v1.get_variable("kernel", [x.shape[-1] + UNITS, 4 * UNITS])
            i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), w), 4, 1)
            i, j, f, o = (
                self._norm(v, n)
                for v, n in zip(
                    (i, j, f, o), ("input", "transform", "forget", "output"), strict=True
                )
            )
            new_c = self._norm(c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j), "state")
            new_h = tf.tanh(new_c) * tf.sigmoid(o)
            return new_h, R.LSTMStateTuple(new_c, new_h)


@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize(
    "cell", [UGRNNCell, CoupledInputForgetGateLSTMCell, LayerNormBasicLSTMCell]
)
def test_a_look_alike_cell_is_refused_never_read_as_a_known_one(cell, loop, tmp_path):
    def body():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        if loop:
            v1.nn.dynamic_rnn(cell(), x, dtype=tf.float32)
        else:
            v1.nn.static_rnn(cell(), tf.unstack(x, axis=1), dtype=tf.float32)

    path, _ = session_model(body, tmp_path)
    done = run_cli("inspect", path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert "no RNN cell found" in done.stderr

"""Cells that look like the ones gatetrace knows and compute something else are never read as
those. TF 1.15 contrib's cells, built with the ops their TF 1.15 source builds: UGRNNCell (one
kernel MatMul split in two, like a GRU's gates), CoupledInputForgetGateLSTMCell (split in
three), LayerNormBasicLSTMCell (split in four, like BasicLSTMCell, a layer norm after each
gate), NASCell (two products split in eight), IndRNNCell and IndyLSTMCell (a product of the
input only, the state multiplied elementwise), GLSTMCell (a concat-MatMul-split in four per
group of units), PhasedLSTMCell (a GRU-like split in two of sigmoids, gated by time) and
TimeFreqLSTMCell (an LSTM's split in four over three concatenated inputs). In `static_rnn` and
`dynamic_rnn`, each is refused in one line that names the cell's ops, and nothing is recorded.
"""

from __future__ import annotations

import pytest

from tests.conftest import R, run_cli, session_model
from tracer._tf import tf, v1

STEPS, FEATURES, UNITS = 5, 3, 4


class UGRNNCell(R.RNNCell):
    scope = "ugrnn_cell"

    def __init__(self, forget_bias=1.0):
        super().__init__()
        self.forget_bias = forget_bias

    state_size = output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            w = v1.get_variable("kernel", [x.shape[-1] + UNITS, 2 * UNITS])
            b = v1.get_variable("bias", [2 * UNITS])
            g_act, c_act = tf.split(tf.nn.bias_add(tf.matmul(tf.concat([x, state], 1), w), b), 2, 1)
            g = tf.sigmoid(g_act + self.forget_bias)
            h = g * state + (1.0 - g) * tf.tanh(c_act)
            return h, h


class CoupledInputForgetGateLSTMCell(R.RNNCell):
    scope = "coupled_input_forget_gate_lstm_cell"
    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            c_prev, m_prev = state
            w = v1.get_variable("W_0", [x.shape[-1] + UNITS, 3 * UNITS])
            b = v1.get_variable("B", [3 * UNITS])
            j, f, o = tf.split(tf.nn.bias_add(tf.matmul(tf.concat([x, m_prev], 1), w), b), 3, 1)
            f_act = tf.sigmoid(f + 1.0)
            c = f_act * c_prev + (1 - f_act) * tf.tanh(j)
            h = tf.sigmoid(o) * tf.tanh(c)
            return h, R.LSTMStateTuple(c, h)


class LayerNormBasicLSTMCell(R.RNNCell):
    scope = "layer_norm_basic_lstm_cell"
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
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
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


class NASCell(R.RNNCell):
    scope = "nas_cell"
    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            c_prev, m_prev = state
            w_m = v1.get_variable("recurrent_kernel", [UNITS, 8 * UNITS])
            w_x = v1.get_variable("kernel", [x.shape[-1], 8 * UNITS])
            m = tf.split(tf.matmul(m_prev, w_m), 8, axis=1)
            i = tf.split(tf.matmul(x, w_x), 8, axis=1)
            one = [
                tf.sigmoid(i[0] + m[0]),
                tf.nn.relu(i[1] + m[1]),
                tf.sigmoid(i[2] + m[2]),
                tf.nn.relu(i[3] * m[3]),
                tf.tanh(i[4] + m[4]),
                tf.sigmoid(i[5] + m[5]),
                tf.tanh(i[6] + m[6]),
                tf.sigmoid(i[7] + m[7]),
            ]
            two = [
                tf.tanh(one[0] * one[1]),
                tf.tanh(one[2] + one[3]),
                tf.tanh(one[4] * one[5]),
                tf.sigmoid(one[6] + one[7]),
            ]
            new_c = tf.tanh(two[0] + c_prev) * two[1]
            new_m = tf.tanh(new_c * tf.tanh(two[2] + two[3]))
            return new_m, R.LSTMStateTuple(new_c, new_m)


class IndRNNCell(R.RNNCell):
    scope = "ind_rnn_cell"
    state_size = output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            w = v1.get_variable("input_kernel", [x.shape[-1], UNITS])
            u = v1.get_variable("recurrent_kernel", [UNITS])
            b = v1.get_variable("bias", [UNITS])
            h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w) + state * u, b))
            return h, h


class IndyLSTMCell(R.RNNCell):
    scope = "indy_lstm_cell"
    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            c, h = state
            w = v1.get_variable("kernel_w", [x.shape[-1], 4 * UNITS])
            u = v1.get_variable("kernel_u", [1, 4 * UNITS])
            b = v1.get_variable("bias", [4 * UNITS])
            gates = tf.nn.bias_add(tf.matmul(x, w) + tf.tile(h, [1, 4]) * u, b)
            i, j, f, o = tf.split(gates, 4, axis=1)
            new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
            new_h = tf.tanh(new_c) * tf.sigmoid(o)
            return new_h, R.LSTMStateTuple(new_c, new_h)


class GLSTMCell(R.RNNCell):
    """Two groups: each reads its half of the inputs and of the output, through its own kernel."""

    scope = "glstm_cell"

    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            c_prev, m_prev = state
            size = UNITS // 2
            parts: list[list] = [[], [], [], []]
            for g in range(2):
                with v1.variable_scope(f"group{g}"):
                    x_g = tf.concat(
                        [
                            tf.slice(x, [0, g * size], [-1, size]),
                            tf.slice(m_prev, [0, g * size], [-1, size]),
                        ],
                        1,
                    )
                    w = v1.get_variable("kernel", [2 * size, 4 * size])
                    for part, gate in zip(
                        parts, tf.split(tf.matmul(x_g, w), 4, axis=1), strict=True
                    ):
                        part.append(gate)
            i, j, f, o = (
                tf.nn.bias_add(tf.concat(p, 1), v1.get_variable(f"bias_{n}", [UNITS]))
                for p, n in zip(parts, "ijfo", strict=True)
            )
            c = tf.sigmoid(f + 1.0) * c_prev + tf.sigmoid(i) * tf.tanh(j)
            m = tf.sigmoid(o) * tf.tanh(c)
            return m, R.LSTMStateTuple(c, m)


class PhasedLSTMCell(R.RNNCell):
    """Its input is (time, features): the gates open and close with a learned period per unit."""

    scope = "phased_lstm_cell"

    state_size = property(lambda self: R.LSTMStateTuple(UNITS, UNITS))
    output_size = property(lambda self: UNITS)

    @staticmethod
    def _linear(args, width, scope):
        with v1.variable_scope(scope):
            joined = tf.concat(args, 1)
            w = v1.get_variable("kernel", [joined.shape[-1], width])
            return tf.nn.bias_add(tf.matmul(joined, w), v1.get_variable("bias", [width]))

    def __call__(self, inputs, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            c_prev, h_prev = state
            time, x = inputs
            mask = tf.sigmoid(self._linear([x, h_prev], 2 * UNITS, "mask_gates"))
            input_gate, forget_gate = tf.split(mask, 2, axis=1)
            new_input = tf.tanh(self._linear([x, h_prev], UNITS, "new_input"))
            new_c = c_prev * forget_gate + input_gate * new_input
            output_gate = tf.sigmoid(self._linear([x, h_prev], UNITS, "output_gate"))
            new_h = tf.tanh(new_c) * output_gate
            period = v1.get_variable("period", [UNITS], initializer=v1.constant_initializer(3.0))
            phase = v1.get_variable("phase", [UNITS], initializer=v1.constant_initializer(0.5))
            ratio_on = v1.get_variable(
                "ratio_on", [UNITS], initializer=v1.constant_initializer(0.1)
            )
            shifted = time - phase
            cycle = (
                tf.stop_gradient(tf.math.floormod(shifted, period) - shifted) + shifted
            ) / period
            k_up = 2 * cycle / ratio_on
            k = tf.where(cycle < ratio_on, 2 - k_up, 0.001 * cycle)
            k = tf.where(cycle < 0.5 * ratio_on, k_up, k)
            new_c = k * new_c + (1 - k) * c_prev
            new_h = k * new_h + (1 - k) * h_prev
            return new_h, R.LSTMStateTuple(new_c, new_h)


class TimeFreqLSTMCell(R.RNNCell):
    """One frequency block spanning the whole input: each step reads the inputs, the previous
    output in time and (zero, for the first block) the previous block's output in frequency.
    Its state is [c, m] concatenated; it needs a batch size known when the graph is built."""

    scope = "time_freq_lstm_cell"

    state_size = property(lambda self: 2 * UNITS)
    output_size = property(lambda self: UNITS)

    def __call__(self, x, state, scope=None):
        with v1.variable_scope(scope or self.scope, reuse=v1.AUTO_REUSE):
            w = v1.get_variable("W_0", [x.shape[-1] + 2 * UNITS, 4 * UNITS])
            b = v1.get_variable("B", [4 * UNITS])
            m_prev_freq = tf.zeros([int(x.shape[0]), UNITS])
            c_prev = tf.slice(state, [0, 0], [-1, UNITS])
            m_prev = tf.slice(state, [0, UNITS], [-1, UNITS])
            lstm = tf.nn.bias_add(tf.matmul(tf.concat([x, m_prev, m_prev_freq], 1), w), b)
            i, j, f, o = tf.split(lstm, 4, axis=1)
            c = tf.sigmoid(f + 1.0) * c_prev + tf.sigmoid(i) * tf.tanh(j)
            m = tf.sigmoid(o) * tf.tanh(c)
            return m, tf.concat([c, m], 1)


LOOK_ALIKES = [
    UGRNNCell,
    CoupledInputForgetGateLSTMCell,
    LayerNormBasicLSTMCell,
    NASCell,
    IndRNNCell,
    IndyLSTMCell,
    GLSTMCell,
    PhasedLSTMCell,
    TimeFreqLSTMCell,
]


def build(cell, loop: bool) -> None:
    """The cell over a [batch, STEPS, features] placeholder `x` (and, for the phased LSTM, the
    time of each step, `t`), in `static_rnn` or `dynamic_rnn`, as the TF 1.15 scripts ran them."""
    batch = 8 if cell is TimeFreqLSTMCell else None  # its zero state needs the batch size
    width = UNITS if cell is GLSTMCell else FEATURES  # each group reads its share of the inputs
    x = v1.placeholder(tf.float32, [batch, STEPS, width], name="x")
    inputs = x
    if cell is PhasedLSTMCell:
        inputs = (v1.placeholder(tf.float32, [batch, STEPS, 1], name="t"), x)
    if loop:
        v1.nn.dynamic_rnn(cell(), inputs, dtype=tf.float32)
    else:
        steps = tf.nest.map_structure(lambda a: tf.unstack(a, axis=1), inputs)
        if cell is PhasedLSTMCell:
            steps = list(zip(*steps, strict=True))
        v1.nn.static_rnn(cell(), steps, dtype=tf.float32)


@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("cell", LOOK_ALIKES)
def test_a_look_alike_cell_is_refused_never_read_as_a_known_one(cell, loop, tmp_path):
    path, _ = session_model(lambda: build(cell, loop), tmp_path)
    done = run_cli("inspect", path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    # the line names the cell, by the ops of its scope (the class's own, as TF 1.15 named it)
    assert f"{cell.scope}/" in done.stderr, done.stderr
    assert "no RNN cell found" in done.stderr or "does not read" in done.stderr

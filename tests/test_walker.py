"""The graph walker: cells found under every scope variant, steps in order, metadata read."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from recorders.errors import NoCellFoundError
from tests.conftest import CONFIGS, R, build, static_body
from tracer._tf import tf, v1

TOL = 1e-5


def names(cells):
    return [c.name for c in cells]


def test_steps_are_ordered_numerically_past_ten():
    built = build(static_body(CONFIGS["BasicLSTMCell"]), steps=12)
    (cell,) = tracer.find_cells(built.graph)
    assert [s.gate_op for s in cell.steps] == ["rnn/basic_lstm_cell/split"] + [
        f"rnn/basic_lstm_cell/split_{k}" for k in range(1, 12)
    ]
    assert [s.position for s in cell.steps] == list(range(12))
    assert cell.describe()["last_step"]["gate_tensors"] == [
        f"rnn/basic_lstm_cell/split_11:{k}" for k in range(4)
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "BasicLSTMCell",
            dict(
                kind="BasicLSTMCell",
                units=3,
                input_size=4,
                output_size=3,
                forget_bias=0.7,
                activation="tanh",
            ),
        ),
        (
            "LSTMCell",
            dict(kind="LSTMCell", units=3, forget_bias=1.0, cell_clip=None, num_proj=None),
        ),
        (
            "LSTMCell-peepholes-proj-clip",
            dict(
                kind="LSTMCell",
                units=4,
                input_size=4,
                output_size=2,
                num_proj=2,
                forget_bias=0.5,
                cell_clip=0.4,
                proj_clip=0.25,
            ),
        ),
        (
            "GRUCell",
            dict(kind="GRUCell", units=3, input_size=4, forget_bias=None, activation="tanh"),
        ),
        ("GRUCell-relu", dict(kind="GRUCell", activation="relu")),
        ("BasicRNNCell", dict(kind="BasicRNNCell", units=3, input_size=4, activation="tanh")),
    ],
)
def test_cell_metadata_is_read_from_the_graph(name, expected):
    (cell,) = tracer.find_cells(build(static_body(CONFIGS[name])).graph)
    for key, value in expected.items():
        assert getattr(cell, key) == value, key
    assert cell.gates == tracer.spec_for(expected["kind"]).gates
    assert len(cell.steps) == 5


def test_user_scope_multirnn_stack_and_weights_by_edges(inputs):
    def body(x):
        cell = R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(2), R.BasicRNNCell(2)])
        with v1.variable_scope("encoder"):
            outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    built = build(body)
    cells = tracer.find_cells(built.graph)
    assert names(cells) == [
        "encoder/rnn/multi_rnn_cell/cell_0/basic_lstm_cell",
        "encoder/rnn/multi_rnn_cell/cell_1/gru_cell",
        "encoder/rnn/multi_rnn_cell/cell_2/basic_rnn_cell",
    ]
    # Op scopes repeat `rnn/` (encoder/rnn/rnn/...), variable scopes do not.
    assert (
        cells[0].steps[0].gate_op == "encoder/rnn/rnn/multi_rnn_cell/cell_0/basic_lstm_cell/split"
    )
    assert (
        cells[1].variables["candidate_kernel"]
        == "encoder/rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel"
    )
    assert [c.input_size for c in cells] == [4, 3, 2]
    # Layer by layer, each layer's input is the one below's output at the same position.
    result = tracer.trace(tracer.from_session(built.session), {"x": inputs})
    x = inputs
    for cell in cells:
        w = built.weights[cell.name]
        expected = tracer.run_cell(cell.kind, w, x)
        np.testing.assert_allclose(
            result[cell.name].activation, expected["activation"], atol=TOL, rtol=0
        )
        x = expected["states"]["h"]


def test_bidirectional_steps_are_input_positions(inputs):
    def body(x):
        outputs, _, _ = v1.nn.static_bidirectional_rnn(
            R.BasicLSTMCell(3), R.GRUCell(3), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    built = build(body)
    fw, bw = sorted(tracer.find_cells(built.graph), key=lambda c: c.name.split("/")[1] != "fw")
    assert (fw.name, bw.name) == (
        "bidirectional_rnn/fw/basic_lstm_cell",
        "bidirectional_rnn/bw/gru_cell",
    )
    assert (fw.backward, bw.backward) == (False, True)
    # The backward cell's first computed step (split) read the last input position.
    assert bw.steps[-1].gate_op == "bidirectional_rnn/bw/bw/gru_cell/split"
    assert bw.steps[0].gate_op == "bidirectional_rnn/bw/bw/gru_cell/split_4"
    result = tracer.trace(tracer.from_session(built.session), {"x": inputs})
    expected = tracer.run_cell("GRUCell", built.weights[bw.name], inputs, backward=True)
    np.testing.assert_allclose(result[bw.name].activation, expected["activation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(
        result[bw.name].states["h"], expected["states"]["h"], atol=TOL, rtol=0
    )


def test_several_independent_rnns_in_one_graph():
    def body(x):
        a, _ = v1.nn.static_rnn(
            R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32, scope="question"
        )
        b, _ = v1.nn.static_rnn(
            R.BasicLSTMCell(5), tf.unstack(x[:, :3], axis=1), dtype=tf.float32, scope="answer"
        )
        return [a[-1], b[-1]]

    cells = tracer.find_cells(build(body).graph)
    assert [(c.name, c.units, len(c.steps)) for c in cells] == [
        ("answer/basic_lstm_cell", 5, 3),
        ("question/basic_lstm_cell", 3, 5),
    ]


def test_training_graph_with_gradients_and_a_readout_layer():
    """Gradient ops read the forward tensors and a dense readout reads the last h."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.LSTMCell(4, num_proj=2), tf.unstack(x, axis=1), dtype=tf.float32
        )
        logits = v1.layers.dense(outputs[-1], 2, name="readout")
        loss = tf.reduce_mean(tf.square(logits))
        v1.train.AdamOptimizer(0.1).minimize(loss)
        return [logits]

    (cell,) = tracer.find_cells(build(body).graph)
    assert (cell.kind, cell.units, cell.num_proj, len(cell.steps)) == ("LSTMCell", 4, 2, 5)
    assert cell.variables["projection"] == "rnn/lstm_cell/projection/kernel"


def test_a_cell_called_directly():
    def body(x):
        cell = R.GRUCell(2)
        h1, _ = cell(x[:, 0], cell.zero_state(tf.shape(x)[0], tf.float32))
        return [h1]

    (cell,) = tracer.find_cells(build(body).graph)
    assert (cell.name, cell.kind, len(cell.steps)) == ("gru_cell", "GRUCell", 1)


def test_no_cell_names_what_was_looked_for():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="features")
        v1.layers.dense(x, 3, name="classifier")
    with pytest.raises(NoCellFoundError) as err:
        tracer.find_cells(graph, "model.ckpt.meta")
    message = str(err.value)
    assert message.startswith(
        "no RNN cell found in model.ckpt.meta: looked for Split ops fed by a kernel MatMul"
    )
    assert "nearest ops: classifier/MatMul, classifier/BiasAdd" in message


def test_a_while_loop_without_a_cell_says_so():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        v1.while_loop(
            lambda i, a: i < 3, lambda i, a: (i + 1, tf.tanh(a) * 2.0), [tf.constant(0), x]
        )
    with pytest.raises(
        NoCellFoundError,
        match=r"runs a while loop \(while\), in which no cell of these kinds was found either",
    ):
        tracer.find_cells(graph)


def test_no_cell_in_a_static_rnn_with_sequence_length_says_why():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 5, 4], name="x")
        lengths = v1.placeholder(tf.int32, [None], name="lengths")
        v1.nn.static_rnn(
            R.BasicLSTMCell(3), tf.unstack(x, axis=1), sequence_length=lengths, dtype=tf.float32
        )
    with pytest.raises(
        NoCellFoundError,
        match=r"runs its steps inside conditionals \(rnn/cond\).*pass the lengths to gatetrace with --lengths",
    ):
        tracer.find_cells(graph)

"""Cells of your own, found by the names of their ops (`tracer.find.named`, `--gate-ops`).

Built as the code people publish builds them: an LSTM written out gate by gate with four
weight matrices per gate (each gate's op named `forget_gate_3`), and the multiplicative LSTM
of the sentiment-neuron code (`m = (x @ wmx) * (h @ wmh)`, `z = x @ wx + m @ wh + b`, split in
four, gates left with TensorFlow's names `model/Sigmoid_{3t + k}`). Every recorded value is
checked against a float64 numpy recomputation from the weights.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, v1

T, D, H, N = 5, 3, 4, 6


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _save(session, graph, folder):
    with graph.as_default():
        return v1.train.Saver().save(session, str(folder / "model.ckpt"))


@pytest.fixture(scope="module")
def hand_lstm(tmp_path_factory):
    """An LSTM from scratch: W, U, b per gate, unrolled by a Python loop over tf.unstack."""
    folder = tmp_path_factory.mktemp("hand_lstm")
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(1)
        x = v1.placeholder(v1.float32, [None, T, D], name="x")
        w = {}
        with v1.variable_scope("my_lstm"):
            for g in "ifoc":
                w[g] = (
                    v1.get_variable(f"W_{g}", [D, H]),
                    v1.get_variable(f"U_{g}", [H, H]),
                    v1.get_variable(f"b_{g}", [H], initializer=v1.random_normal_initializer()),
                )
        h = c = v1.zeros([v1.shape(x)[0], H])
        names = {"i": "input", "f": "forget", "o": "output", "c": "cell"}
        for t, x_t in enumerate(v1.unstack(x, axis=1)):
            z = {g: v1.matmul(x_t, W) + v1.matmul(h, U) + b for g, (W, U, b) in w.items()}
            i, f, o = (v1.sigmoid(z[g], name=f"my_lstm/{names[g]}_gate_{t}") for g in "ifo")
            g_ = v1.tanh(z["c"], name=f"my_lstm/cell_gate_{t}")
            c = v1.identity(f * c + i * g_, name=f"my_lstm/c_{t}")
            h = v1.identity(o * v1.tanh(c), name=f"my_lstm/h_{t}")
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        weights = session.run(w)
    prefix = _save(session, graph, folder)
    session.close()
    return prefix, weights


def _hand_lstm_reference(weights, x):
    """Every gate and state of the hand-written LSTM, in float64."""
    w = {g: [np.asarray(a, np.float64) for a in v] for g, v in weights.items()}
    h = c = np.zeros((len(x), H))
    out = {k: [] for k in ("input", "forget", "output", "cell", "c", "h")}
    for t in range(T):
        z = {g: x[:, t] @ W + h @ U + b for g, (W, U, b) in w.items()}
        i, f, o, g_ = _sigmoid(z["i"]), _sigmoid(z["f"]), _sigmoid(z["o"]), np.tanh(z["c"])
        c = f * c + i * g_
        h = o * np.tanh(c)
        for k, v in (("input", i), ("forget", f), ("output", o), ("cell", g_), ("c", c), ("h", h)):
            out[k].append(v)
    return {k: np.stack(v, axis=1) for k, v in out.items()}, {
        "input": "i",
        "forget": "f",
        "output": "o",
        "cell": "c",
    }


@pytest.fixture(scope="module")
def mlstm(tmp_path_factory):
    """The multiplicative LSTM as the sentiment-neuron code builds it (TF1, `mlstm` in its
    `encoder.py`): the sequence cut by tf.split, one mLSTM step per position, gates left
    with TensorFlow's own op names."""
    folder = tmp_path_factory.mktemp("mlstm")
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(2)
        X = v1.placeholder(v1.float32, [None, T, D], name="X")
        with v1.variable_scope("model"):
            inputs = [v1.squeeze(v, [1]) for v in v1.split(X, T, 1)]
            with v1.variable_scope("lstm"):
                wx = v1.get_variable("wx", [D, H * 4])
                wh = v1.get_variable("wh", [H, H * 4])
                wmx = v1.get_variable("wmx", [D, H])
                wmh = v1.get_variable("wmh", [H, H])
                b = v1.get_variable("b", [H * 4], initializer=v1.random_normal_initializer())
            c = h = v1.zeros([v1.shape(X)[0], H])
            for idx, x in enumerate(inputs):
                m = v1.matmul(x, wmx) * v1.matmul(h, wmh)
                z = v1.matmul(x, wx) + v1.matmul(m, wh) + b
                i, f, o, u = v1.split(z, 4, 1)
                i, f, o = v1.nn.sigmoid(i), v1.nn.sigmoid(f), v1.nn.sigmoid(o)
                u = v1.tanh(u)
                c = f * c + i * u
                h = o * v1.tanh(c)
                inputs[idx] = h
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        weights = session.run({"wx": wx, "wh": wh, "wmx": wmx, "wmh": wmh, "b": b})
    prefix = _save(session, graph, folder)
    session.close()
    return prefix, weights


def _mlstm_reference(weights, x):
    """The mLSTM's gates i, f, o (sigmoids) and u (the first tanh of a step), in float64."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    h = c = np.zeros((len(x), H))
    out = {k: [] for k in ("i", "f", "o", "u", "tanh_c")}
    for t in range(T):
        m = (x[:, t] @ w["wmx"]) * (h @ w["wmh"])
        z = x[:, t] @ w["wx"] + m @ w["wh"] + w["b"]
        i, f, o, u = np.split(z, 4, axis=1)
        i, f, o, u = _sigmoid(i), _sigmoid(f), _sigmoid(o), np.tanh(u)
        c = f * c + i * u
        h = o * np.tanh(c)
        for k, v in (("i", i), ("f", f), ("o", o), ("u", u), ("tanh_c", np.tanh(c))):
            out[k].append(v)
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def _inputs(seed=0):
    return np.random.RandomState(seed).randn(N, T, D).astype(np.float32)


def test_a_hand_written_lstm_records_by_the_names_of_its_gates(hand_lstm, tmp_path):
    import recorders
    import tracer

    prefix, weights = hand_lstm
    x = _inputs()
    with tracer.load_model(prefix) as model:
        cells = tracer.find_named(
            model.graph,
            r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<step>\d+)",
            states=r"(?P<cell>my_lstm)/(?P<state>[ch])_(?P<step>\d+)",
        )
        assert [(c.name, c.kind, c.gates, c.spec.states, c.units) for c in cells] == [
            ("my_lstm", "named", ("input", "forget", "output", "cell"), ("c", "h"), H)
        ]
        tracer.record(model, {"x": x}, tmp_path / "run", cells=cells, batch_size=4)
    rec = recorders.Recording(tmp_path / "run")
    expected, _ = _hand_lstm_reference(weights, x.astype(np.float64))
    for gate in ("input", "forget", "output", "cell"):
        got = rec.gate_array("my_lstm", gate)
        np.testing.assert_allclose(got, expected[gate], atol=2e-6)
    for state in ("c", "h"):
        np.testing.assert_allclose(rec.state_array("my_lstm", state), expected[state], atol=2e-6)
    # each gate's W, U and b, where its preactivation reads them: here all of them
    table = pd.read_parquet(tmp_path / "run" / "weights.parquet")
    for gate, g in (("input", "i"), ("forget", "f"), ("output", "o"), ("cell", "c")):
        for source, matrix in zip(("input", "recurrent", "bias"), weights[g], strict=True):
            rows = table[(table.gate == gate) & (table.source == source)]
            got = np.zeros(np.shape(matrix), np.float32)
            if np.ndim(matrix) == 1:
                got[rows.unit.to_numpy()] = rows.value.to_numpy()
            else:
                got[rows.row.to_numpy(), rows.unit.to_numpy()] = rows.value.to_numpy()
            np.testing.assert_array_equal(got, matrix)
    # the same cell without a step group: each op's step is how many of the input's steps it read
    with tracer.load_model(prefix, restore=False) as model:
        (walked,) = tracer.find_named(model.graph, r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_\d+")
    assert [s.activation for s in walked.steps] == [s.activation for s in cells[0].steps]
    # the preactivation is the nonlinearity's input: its inverse gives it back
    pre = rec.gate_array("my_lstm", "forget", "preactivation")
    np.testing.assert_allclose(_sigmoid(pre.astype(np.float64)), expected["forget"], atol=2e-6)


def test_an_mlstm_records_by_a_pattern_without_steps_or_gates(mlstm, tmp_path):
    """Sigmoid_{3t}, _{3t+1}, _{3t+2}: the step is found by walking the graph (how many of
    the split input's steps each op has read), the gates named by nonlinearity and order."""
    import recorders
    import tracer

    prefix, weights = mlstm
    x = _inputs(1)
    with tracer.load_model(prefix) as model:
        (cell,) = tracer.find_named(model.graph, r"model/Sigmoid(_\d+)?")
        assert (cell.name, cell.gates, cell.units, cell.input_size) == (
            "model",
            ("sigmoid_0", "sigmoid_1", "sigmoid_2"),
            H,
            D,
        )
        assert [s.position for s in cell.steps] == list(range(T))
        tracer.record(model, {"X": x}, tmp_path / "run", cells=[cell])
        (tanh,) = tracer.find_named(model.graph, r"(?P<cell>model)/Tanh(_\d+)?")
        assert tanh.gates == ("tanh_0", "tanh_1")  # u, then tanh(c), as the step computes them
        trace = tracer.trace(model, {"X": x}, cells=[tanh])
    expected = _mlstm_reference(weights, x.astype(np.float64))
    rec = recorders.Recording(tmp_path / "run")
    for gate, name in zip(("sigmoid_0", "sigmoid_1", "sigmoid_2"), "ifo", strict=True):
        np.testing.assert_allclose(rec.gate_array("model", gate), expected[name], atol=2e-6)
    # W = wx, U = wh (on m = (x wmx) * (h wmh)) and b, each gate's column block of them
    table = pd.read_parquet(tmp_path / "run" / "weights.parquet")
    for k, gate in enumerate(("sigmoid_0", "sigmoid_1", "sigmoid_2")):
        cols = slice(k * H, (k + 1) * H)
        for source, matrix in (("input", "wx"), ("recurrent", "wh"), ("bias", "b")):
            rows = table[(table.gate == gate) & (table.source == source)]
            block = np.asarray(weights[matrix])[..., cols]
            got = np.zeros(block.shape, np.float32)
            if block.ndim == 1:
                got[rows.unit.to_numpy()] = rows.value.to_numpy()
            else:
                got[rows.row.to_numpy(), rows.unit.to_numpy()] = rows.value.to_numpy()
            np.testing.assert_array_equal(got, block)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    variables = manifest["cells"][0]["variables"]
    assert variables["sigmoid_1/input"] == "model/lstm/wx"
    # the matrices m is made of, which wh acts on: the cell's own, no gate's
    assert (variables["own/wmx"], variables["own/wmh"]) == ("model/lstm/wmx", "model/lstm/wmh")
    assert "weights_not_known" not in manifest["cells"][0]
    assert tanh.unknown_weights == {
        "tanh_1": "its preactivation is not a sum of matrix products and biases of variables"
    }
    got = trace[tanh.name]
    for k, name in enumerate(("u", "tanh_c")):
        np.testing.assert_allclose(got.activation[:, :, k], expected[name], atol=2e-6)


GATE_OPS = r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<step>\d+)"
STATE_OPS = r"(?P<cell>my_lstm)/(?P<state>[ch])_(?P<step>\d+)"


def _record_hand_lstm(prefix, tmp_path, seed, *flags):
    """`gatetrace record` of the hand-written LSTM by --gate-ops (and `flags`) on inputs of
    `seed`; returns the recording's folder and the inputs."""
    x = _inputs(seed)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    done = run_cli(
        "record",
        prefix,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(out),
        "--gate-ops",
        GATE_OPS,
        *flags,
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    return out, x


def test_the_command_line_records_by_gate_ops(hand_lstm, tmp_path):
    import recorders

    prefix, weights = hand_lstm
    out, x = _record_hand_lstm(prefix, tmp_path, 2)
    expected, _ = _hand_lstm_reference(weights, x.astype(np.float64))
    rec = recorders.Recording(out)
    np.testing.assert_allclose(rec.gate_array("my_lstm", "output"), expected["output"], atol=2e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    (cell,) = manifest["cells"]
    assert (cell["kind"], cell["gates"], cell["steps"]) == (
        "named",
        ["input", "forget", "output", "cell"],
        T,
    )


@pytest.mark.parametrize(
    "pattern, states, says",
    [
        (r"my_lstm/nothing_(\d+)", None, "matches no op of"),
        (r"MatMul(_\d+)?", None, "is a MatMul op, not a gate's nonlinearity"),
        (r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<step>[0-24])", None, "not at step 3"),
        (
            r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<step>\d+)",
            r"my_lstm/(?P<state>c)_(?P<step>[0-3])",
            "states",
        ),
        (
            r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<when>\d+)",
            None,
            "its named groups are cell, gate and step",
        ),
        (
            r"(?P<cell>my_lstm)/\w+_(?P<gate>gate)_(?P<step>\d+)",
            None,
            "are both gate gate of step 0",
        ),
        (r"my_lstm/(", None, "not a regular expression"),
    ],
)
def test_a_pattern_that_does_not_name_a_cell_is_one_line(hand_lstm, pattern, states, says):
    import tracer
    from recorders.errors import GraphPatternError

    prefix, _ = hand_lstm
    with tracer.load_model(prefix, restore=False) as model:
        with pytest.raises(GraphPatternError) as err:
            tracer.find_named(model.graph, pattern, states=states)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_gates_of_different_widths_are_refused():
    import tracer
    from recorders.errors import GraphPatternError

    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(v1.float32, [None, T, D], name="x")
        h = v1.zeros([v1.shape(x)[0], H])
        for t, x_t in enumerate(v1.unstack(x, axis=1)):
            a = v1.sigmoid(v1.layers.dense(v1.concat([x_t, h], 1), H), name=f"c/a_{t}")
            b = v1.sigmoid(v1.layers.dense(a, H + 1), name=f"c/b_{t}")
            h = a * v1.reduce_mean(b, axis=1, keepdims=True)
    with pytest.raises(
        GraphPatternError,
        match=r"different shapes \(c/a_0:0 is \[batch, 4\], c/b_0:0 \[batch, 5\]\)",
    ):
        tracer.find_named(graph, r"(?P<cell>c)/(?P<gate>[ab])_(?P<step>\d+)")


def test_ops_of_a_tf1_loop_are_emitted_and_a_tf2_loop_is_named_in_its_body(tmp_path):
    """A TF1 while loop's ops are in the graph, in the loop's frame: named there, once an
    iteration, the frame is rewritten to emit them; they equal the gates of TensorFlow's own
    cell that runs there. A TF2 loop's ops are in a function: a pattern naming them as the
    graph would matches nothing, and the line says where the loop's ops are looked for."""
    import tracer
    from recorders.errors import GraphPatternError

    v1.disable_control_flow_v2()
    try:
        graph = v1.Graph()
        with graph.as_default():
            x = v1.placeholder(v1.float32, [None, T, D], name="x")
            v1.nn.dynamic_rnn(v1.nn.rnn_cell.BasicLSTMCell(H), x, dtype=v1.float32)
            session = v1.Session(graph=graph)
            session.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(session, str(tmp_path / "v1.ckpt"))
        session.close()
    finally:
        v1.enable_control_flow_v2()
    x_ = _inputs(10)
    with tracer.load_model(prefix) as model:
        (named,) = tracer.find_named(
            model.graph, r"(?P<cell>rnn)/while/basic_lstm_cell/(?:Sigmoid|Tanh)(?:_\d+)?"
        )
        assert (named.gates, named.loop.control_flow) == (
            ("sigmoid_0", "sigmoid_1", "tanh_0", "tanh_1", "sigmoid_2"),
            "v1",
        )
        own = tracer.trace(model, {"x": x_}, cells=[named])["rnn"]
        known = tracer.trace(model, {"x": x_})["rnn/basic_lstm_cell"]
    # BasicLSTMCell applies sigmoid(f + forget_bias), sigmoid(i), tanh(j), tanh(c), sigmoid(o)
    gates = known.cell.gates
    for k, gate in ((0, "f"), (1, "i"), (2, "j"), (4, "o")):
        np.testing.assert_array_equal(
            own.activation[:, :, k], known.activation[:, :, gates.index(gate)]
        )
    np.testing.assert_allclose(own.activation[:, :, 3], np.tanh(known.states["c"]), atol=1e-6)

    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(v1.float32, [None, T, D], name="x")
        v1.nn.dynamic_rnn(v1.nn.rnn_cell.BasicLSTMCell(H), x, dtype=v1.float32)
    with pytest.raises(GraphPatternError, match="nor of its while loops' bodies") as err:
        tracer.find_named(graph, r"rnn/while/basic_lstm_cell/Sigmoid(_\d+)?")
    assert "\n" not in str(err.value)


def test_inspect_units_and_the_view_read_a_recording_of_a_cell_of_your_own(hand_lstm, tmp_path):
    """A named cell's recording is a recording like any other: `inspect` lists it, `units`
    ranks its units against labels, the view's answers read it."""
    import recorders
    from recorders.view import data

    prefix, weights = hand_lstm
    out, x = _record_hand_lstm(prefix, tmp_path, 3, "--state-ops", STATE_OPS)
    shown = run_cli("inspect", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    (cell,) = json.loads(shown.stdout)["cells"]
    assert (cell["name"], cell["gates"], cell["states"]) == (
        "my_lstm",
        ["input", "forget", "output", "cell"],
        ["c", "h"],
    )
    # a label per sequence: whether its last h of unit 1 is above the median
    expected, _ = _hand_lstm_reference(weights, x.astype(np.float64))
    last = expected["h"][:, -1, 1]
    labels = (last > np.median(last)).astype(np.int64)
    np.save(tmp_path / "labels.npy", labels)
    ranked = run_cli("units", str(out), "--labels", str(tmp_path / "labels.npy"), "--json")
    assert ranked.returncode == 0, ranked.stderr
    rows = json.loads(ranked.stdout)
    assert {"table": "states", "name": "h", "unit": 1, "score": 1.0}.items() <= next(
        r for r in rows if (r["table"], r["name"], r["unit"]) == ("states", "h", 1)
    ).items()
    rec = recorders.Recording(out)
    assert [c["name"] for c in data.overview(rec)["cells"]] == ["my_lstm"]
    grid = data.heatmap(rec, "my_lstm", "forget", example=2)
    np.testing.assert_allclose(
        np.array(grid["values"], dtype=np.float64), expected["forget"][2], atol=2e-6
    )


def test_inspect_proposes_the_mlstm_and_record_says_how_to_record_it(mlstm, tmp_path):
    """No cell TensorFlow ships is in the mLSTM's graph: `inspect` lists what looks like one of
    your own, with the pattern that records it; `record` without a pattern says the same in
    its one line. The pattern proposed records the gates exactly."""
    import recorders

    prefix, weights = mlstm
    shown = run_cli("inspect", prefix, "--json")
    assert shown.returncode == 0, shown.stderr
    (proposal,) = json.loads(shown.stdout)["proposals"]
    assert proposal == {
        "cell": "model",
        "gate_ops": r"model/(?:Sigmoid|Tanh)(?:_\d+)?",
        "gates": ["sigmoid_0", "sigmoid_1", "sigmoid_2", "tanh_0", "tanh_1"],
        "steps": T,
        "first_step": "model/Sigmoid",
        "last_step": f"model/Sigmoid_{3 * (T - 1)}",
    }
    table = run_cli("inspect", prefix)
    assert table.returncode == 0 and f"--gate-ops '{proposal['gate_ops']}'" in table.stdout
    x = _inputs(4)
    np.save(tmp_path / "x.npy", x)
    refused = run_cli(
        "record", prefix, "--feed", f"X={tmp_path / 'x.npy'}", "--out", str(tmp_path / "no")
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"--gate-ops '{proposal['gate_ops']}' records it" in refused.stderr
    done = run_cli(
        "record",
        prefix,
        "--feed",
        f"X={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "run"),
        "--gate-ops",
        proposal["gate_ops"],
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = recorders.Recording(tmp_path / "run")
    expected = _mlstm_reference(weights, x.astype(np.float64))
    for gate, name in zip(proposal["gates"], ("i", "f", "o", "u", "tanh_c"), strict=True):
        np.testing.assert_allclose(rec.gate_array("model", gate), expected[name], atol=2e-6)


# -- Keras cells of your own ---------------------------------------------------------------


def _keras_cells(framework: str):
    """The guide's MinimalRNNCell (no nonlinearity: its state is all it has) and an LSTM-like
    cell with sigmoid gates, written as each Keras' guide writes a cell."""
    from tests.test_keras import keras_module

    keras = keras_module(framework)
    if framework == "keras3":
        ops = keras.ops
        matmul, concat, split = ops.matmul, ops.concatenate, ops.split
        sigmoid, tanh = ops.sigmoid, ops.tanh
    else:
        from tracer._tf import tf

        matmul, split, sigmoid, tanh = tf.matmul, tf.split, tf.sigmoid, tf.tanh

        def concat(xs, axis):
            return tf.concat(xs, axis)

    class MinimalRNNCell(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.state_size = units

        def build(self, input_shape):
            self.kernel = self.add_weight(
                shape=(input_shape[-1], self.units), initializer="uniform", name="kernel"
            )
            self.recurrent_kernel = self.add_weight(
                shape=(self.units, self.units), initializer="uniform", name="recurrent_kernel"
            )
            self.built = True

        def call(self, inputs, states):
            prev_output = states[0]
            output = matmul(inputs, self.kernel) + matmul(prev_output, self.recurrent_kernel)
            return output, [output]

    class LSTMLike(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.state_size = [units, units]

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1] + self.units, 4 * self.units), name="w")
            self.b = self.add_weight(shape=(4 * self.units,), name="b", initializer="random_normal")
            self.built = True

        def call(self, inputs, states):
            h, c = states
            z = matmul(concat([inputs, h], axis=-1), self.w) + self.b
            i, f, o, g = split(z, 4, axis=-1)
            i, f, o, g = sigmoid(i), sigmoid(f), sigmoid(o), tanh(g)
            c = f * c + i * g
            h = o * tanh(c)
            return h, [h, c]

    return keras, MinimalRNNCell, LSTMLike


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_keras_cells_of_your_own_give_the_nonlinearities_their_call_applies(framework, tmp_path):
    import recorders
    import tracer

    keras, MinimalRNNCell, LSTMLike = _keras_cells(framework)
    inp = keras.Input((T, D))
    seq = keras.layers.RNN(LSTMLike(H), return_sequences=True, name="rnn")(inp)
    out = keras.layers.RNN(MinimalRNNCell(3), go_backwards=True, name="minimal")(seq)
    model = keras.Model(inp, out)
    x = _inputs(5)
    got = tracer.trace(model, x, gate_names={"rnn": ["i", "f", "o", "g", "tanh_c"]})
    rnn, minimal = got["rnn"], got["minimal"]
    assert (rnn.cell.kind, rnn.cell.gates, rnn.cell.spec.states) == (
        "named",
        ("i", "f", "o", "g", "tanh_c"),
        ("state_0", "state_1"),
    )
    assert (minimal.cell.gates, minimal.cell.spec.states) == ((), ("state_0",))
    # float64 numpy from the cells' weights
    lstm_like = model.get_layer("rnn").cell
    w, b = (np.asarray(v, np.float64) for v in (lstm_like.w.numpy(), lstm_like.b.numpy()))
    h = c = np.zeros((N, H))
    hs = []
    for t in range(T):
        z = np.concatenate([x[:, t], h], axis=1) @ w + b
        i, f, o, g = np.split(z, 4, axis=1)
        i, f, o, g = _sigmoid(i), _sigmoid(f), _sigmoid(o), np.tanh(g)
        c = f * c + i * g
        h = o * np.tanh(c)
        expected = {"i": i, "f": f, "o": o, "g": g, "tanh_c": np.tanh(c)}
        for k, name in enumerate(rnn.cell.gates):
            np.testing.assert_allclose(rnn.activation[:, t, k], expected[name], atol=2e-6)
        np.testing.assert_allclose(rnn.preactivation[:, t, 0], np.split(z, 4, axis=1)[0], atol=2e-5)
        np.testing.assert_allclose(rnn.states["state_1"][:, t], c, atol=2e-6)
        hs.append(h)
    cell = model.get_layer("minimal").cell
    k_, r_ = (np.asarray(v.numpy(), np.float64) for v in (cell.kernel, cell.recurrent_kernel))
    state = np.zeros((N, 3))
    for t in reversed(range(T)):  # go_backwards: indexed by input position
        state = hs[t] @ k_ + state @ r_
        np.testing.assert_allclose(minimal.states["state_0"][:, t], state, atol=2e-6)
    # recorded like any layer, and read back
    tracer.record(model, x, tmp_path / "run", gate_names={"rnn": ["i", "f", "o", "g", "tanh_c"]})
    rec = recorders.Recording(tmp_path / "run")
    assert rec.cells == ["rnn", "minimal"] and rec.gates("minimal") == []
    np.testing.assert_array_equal(rec.gate_array("rnn", "f"), rnn.activation[:, :, 1])
    np.testing.assert_array_equal(rec.state_array("minimal", "state_0"), minimal.states["state_0"])
    assert list(rec.steps("minimal")) == list(range(T))


def test_gate_names_that_do_not_fit_are_one_line():
    import tracer
    from recorders.errors import GraphPatternError

    keras, _, LSTMLike = _keras_cells("keras3")
    inp = keras.Input((T, D))
    model = keras.Model(inp, keras.layers.RNN(LSTMLike(H), name="rnn")(inp))
    x = _inputs(6)
    with pytest.raises(
        GraphPatternError, match=r"gate_names gives 2 names \(i, f\) for its 5 nonlinearities"
    ):
        tracer.trace(model, x, gate_names={"rnn": ["i", "f"]})
    with pytest.raises(
        GraphPatternError, match="gate_names names lstm, not a layer over a cell of your own"
    ):
        tracer.trace(model, x, gate_names={"lstm": ["i"]})


_MY_CELLS = """
import keras


class LSTMLike(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = [units, units]

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1] + self.units, 4 * self.units), name="w")
        self.b = self.add_weight(shape=(4 * self.units,), name="b", initializer="random_normal")

    def call(self, inputs, states):
        h, c = states
        z = keras.ops.matmul(keras.ops.concatenate([inputs, h], axis=-1), self.w) + self.b
        i, f, o, g = keras.ops.split(z, 4, axis=-1)
        c = keras.ops.sigmoid(f) * c + keras.ops.sigmoid(i) * keras.ops.tanh(g)
        h = keras.ops.sigmoid(o) * keras.ops.tanh(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "units": self.units}
"""


def test_a_keras_file_of_your_own_cell_loads_only_with_the_file_of_its_classes(tmp_path):
    """A .keras file names its cell class, not its code: refused (the line says how to load
    it), then recorded with --custom-objects naming the Python file that defines it; a Lambda
    beside it stays refused."""
    import recorders
    import tracer
    from tests.test_keras import keras_module
    from tracer.load.custom import custom_objects

    keras = keras_module("keras3")
    (tmp_path / "my_cells.py").write_text(_MY_CELLS)
    LSTMLike = custom_objects(tmp_path / "my_cells.py")["LSTMLike"]
    inp = keras.Input((T, D), name="seq")
    model = keras.Model(inp, keras.layers.RNN(LSTMLike(H), return_sequences=True, name="rnn")(inp))
    model.save(tmp_path / "own.keras")
    x = _inputs(7)
    np.save(tmp_path / "x.npy", x)
    expected = tracer.trace(model, x)["rnn"]
    args = ("record", str(tmp_path / "own.keras"), "--feed", f"seq={tmp_path / 'x.npy'}", "--quiet")
    refused = run_cli(*args, "--out", str(tmp_path / "no"))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "LSTMLike (not one of Keras' own layers)" in refused.stderr
    assert "--custom-objects FILE.py" in refused.stderr and not (tmp_path / "no").exists()
    done = run_cli(
        *args, "--out", str(tmp_path / "run"), "--custom-objects", str(tmp_path / "my_cells.py")
    )
    assert done.returncode == 0, done.stderr
    rec = recorders.Recording(tmp_path / "run")
    assert rec.gates("rnn") == ["sigmoid_0", "sigmoid_1", "tanh_0", "sigmoid_2", "tanh_1"]
    for k, gate in enumerate(rec.gates("rnn")):
        np.testing.assert_allclose(
            rec.gate_array("rnn", gate), expected.activation[:, :, k], atol=1e-6
        )
    # what the file names beyond the classes of yours is checked as before
    lam = keras.Model(inp, keras.layers.Lambda(lambda t: t * 2)(model(inp)))
    lam.save(tmp_path / "lambda.keras")
    with pytest.raises(tracer.UnsafeGraphError, match="Lambda"):
        tracer.load_model(tmp_path / "lambda.keras", custom_objects=tmp_path / "my_cells.py")


def test_a_cell_of_your_own_in_a_while_loop_is_emitted_by_the_loop(tmp_path):
    """A hand-written LSTM run by tf.while_loop (TF2 control flow): its gate ops are named in
    the loop's body, once an iteration; the loop is rewritten to emit them, and each
    iteration is a step. Exact against float64 numpy."""
    import recorders
    import tracer

    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(v1.float32, [None, T, D], name="x")
        W = {g: v1.get_variable(f"my_lstm/W_{g}", [D + H, H]) for g in "ifoc"}
        h0 = v1.zeros([v1.shape(x)[0], H])

        def body(t, h, c):
            z = {g: v1.matmul(v1.concat([v1.gather(x, t, axis=1), h], 1), W[g]) for g in "ifoc"}
            i = v1.sigmoid(z["i"], name="my_lstm/input_gate")
            f = v1.sigmoid(z["f"], name="my_lstm/forget_gate")
            o = v1.sigmoid(z["o"], name="my_lstm/output_gate")
            g_ = v1.tanh(z["c"], name="my_lstm/cell_gate")
            c = v1.identity(f * c + i * g_, name="my_lstm/c")
            return t + 1, o * v1.tanh(c), c

        v1.while_loop(lambda t, h, c: t < T, body, [v1.constant(0), h0, h0])
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        weights = session.run(W)
        prefix = v1.train.Saver().save(session, str(tmp_path / "loop.ckpt"))
    session.close()
    x_ = _inputs(8)
    with tracer.load_model(prefix) as model:
        (cell,) = tracer.find_named(
            model.graph,
            r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate",
            states=r"(?P<cell>my_lstm)/(?P<state>c)",
        )
        assert (cell.gates, cell.spec.states, cell.loop.loop) == (
            ("input", "forget", "output", "cell"),
            ("c",),
            "while",
        )
        tracer.record(model, {"x": x_}, tmp_path / "run", cells=[cell])
    rec = recorders.Recording(tmp_path / "run")
    w = {g: np.asarray(v, np.float64) for g, v in weights.items()}
    h = c = np.zeros((N, H))
    for t in range(T):
        z = {g: np.concatenate([x_[:, t], h], axis=1) @ w[g] for g in "ifoc"}
        i, f, o, g_ = _sigmoid(z["i"]), _sigmoid(z["f"]), _sigmoid(z["o"]), np.tanh(z["c"])
        c = f * c + i * g_
        h = o * np.tanh(c)
        for gate, value in (("input", i), ("forget", f), ("output", o), ("cell", g_)):
            np.testing.assert_allclose(rec.gate_array("my_lstm", gate)[:, t], value, atol=2e-6)
        np.testing.assert_allclose(rec.state_array("my_lstm", "c")[:, t], c, atol=2e-6)
    with tracer.load_model(prefix, restore=False) as model:
        with pytest.raises(tracer.GraphPatternError, match="leave the step group out"):
            tracer.find_named(model.graph, r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate(?P<step>\d*)")


def test_the_new_flags_refuse_in_one_line_before_anything_is_written(hand_lstm, tmp_path):
    """--gate-ops, --state-ops and --custom-objects: a refusal is one line, exit 2, and leaves
    no folder that later looks like a started recording."""
    prefix, _ = hand_lstm
    np.save(tmp_path / "x.npy", _inputs())
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    base = ("record", prefix, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out"))
    for flags, says in (
        (
            ("--custom-objects", str(tmp_path / "exits.py")),
            f"--custom-objects {tmp_path / 'exits.py'}: importing it called sys.exit(3)",
        ),
        (("--gate-ops", "my_lstm/nothing"), "matches no op of"),
        (("--state-ops", "my_lstm/c_0"), "--state-ops names the states of a cell --gate-ops names"),
        (
            ("--gate-ops", GATE_OPS, "--values", "contributions"),
            "--gate-ops with --values contributions",
        ),
        (("--custom-objects", str(tmp_path / "missing.py")), "expected a Python file (.py)"),
    ):
        done = run_cli(*base, *flags)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (flags, done.stderr)
        assert done.stderr.startswith("gatetrace: error: ") and says in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()


def test_a_recording_of_states_only_is_checked_as_any_other(tmp_path):
    """A cell of your own without a nonlinearity is recorded by its states: a folder of
    `states/` alone reads as a recording, its files checked as every recording's are (a
    link planted below it is refused in one line, never followed)."""
    import recorders
    import tracer

    keras, MinimalRNNCell, _ = _keras_cells("keras3")
    inp = keras.Input((T, D))
    model = keras.Model(inp, keras.layers.RNN(MinimalRNNCell(3), name="minimal")(inp))
    tracer.record(model, _inputs(9), tmp_path / "run")
    assert not (tmp_path / "run" / "gates").exists()
    rec = recorders.Recording(tmp_path / "run")
    assert rec.state_array("minimal", "state_0").shape == (N, T, 3)
    (part,) = (tmp_path / "run" / "states").rglob("part-*.parquet")
    (tmp_path / "elsewhere.parquet").write_bytes(part.read_bytes())
    part.unlink()
    part.symlink_to(tmp_path / "elsewhere.parquet")
    with pytest.raises(recorders.RecordingError) as err:
        recorders.Recording(tmp_path / "run").state_array("minimal", "state_0")
    assert "is a symbolic link" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_a_masked_layer_of_your_own_skips_steps_as_keras_does(framework, tmp_path):
    """Padding masked by a Masking layer: the traced step's states carry through a masked step
    as Keras carries them (the layer's outputs check it), and no row is recorded there."""
    import recorders
    import tracer

    keras, _, LSTMLike = _keras_cells(framework)
    inp = keras.Input((T, D))
    masked = keras.layers.Masking(0.0)(inp)
    model = keras.Model(
        inp, keras.layers.RNN(LSTMLike(H), return_sequences=True, name="rnn")(masked)
    )
    x = _inputs(11)
    x[1, 3:] = 0  # padding at the end
    x[2, :2] = 0  # and at the start
    got = tracer.trace(model, x)["rnn"]
    cell = model.get_layer("rnn").cell
    w, b = (np.asarray(v.numpy(), np.float64) for v in (cell.w, cell.b))
    h = c = np.zeros((N, H))
    for t in range(T):
        keep = np.abs(x[:, t]).sum(axis=1, keepdims=True) > 0
        z = np.concatenate([x[:, t], h], axis=1) @ w + b
        i, f, o, g = np.split(z, 4, axis=1)
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        h, c = np.where(keep, h_new, h), np.where(keep, c_new, c)
        np.testing.assert_allclose(got.states["state_1"][:, t], c, atol=2e-6)
    tracer.record(model, x, tmp_path / "run")
    frame = recorders.Recording(tmp_path / "run").gate_frame(gates=["sigmoid_0"])
    assert set(frame[frame.example == 1].step) == {0, 1, 2}
    assert set(frame[frame.example == 2].step) == {2, 3, 4}


def _seqgan_target_lstm():
    """SeqGAN's `target_lstm.py` as its TF1 script builds it: token embeddings unstacked into a
    TensorArray, a hand-written LSTM (`i = tf.sigmoid(tf.matmul(x, Wi) + tf.matmul(h, Ui) +
    bi)`, the state [h, c] stacked) run by `tf.while_loop` whose input `x_t` is a loop
    variable, the next one read from the TensorArray (teacher forcing from a start token)."""
    from tests.conftest import tf

    V, E = 7, D
    x = v1.placeholder(v1.int32, [None, T], name="x")
    embeddings = v1.Variable(v1.random_normal([V, E]), name="g_embeddings")
    params = {
        name: v1.Variable(v1.random_normal(shape), name=name)
        for gate in "ifoc"
        for name, shape in ((f"W{gate}", [E, H]), (f"U{gate}", [H, H]), (f"b{gate}", [H]))
    }
    processed = v1.transpose(v1.nn.embedding_lookup(embeddings, x), perm=[1, 0, 2])
    ta_emb_x = v1.TensorArray(dtype=v1.float32, size=T).unstack(processed)
    h0 = v1.zeros([v1.shape(x)[0], H])
    h0 = v1.stack([h0, h0])
    p = params

    def unit(x_t, hidden_memory_tm1):
        previous_hidden_state, c_prev = v1.unstack(hidden_memory_tm1)
        i = v1.sigmoid(
            v1.matmul(x_t, p["Wi"]) + v1.matmul(previous_hidden_state, p["Ui"]) + p["bi"]
        )
        f = v1.sigmoid(
            v1.matmul(x_t, p["Wf"]) + v1.matmul(previous_hidden_state, p["Uf"]) + p["bf"]
        )
        o = v1.sigmoid(
            v1.matmul(x_t, p["Wo"]) + v1.matmul(previous_hidden_state, p["Uo"]) + p["bo"]
        )
        c_ = v1.nn.tanh(
            v1.matmul(x_t, p["Wc"]) + v1.matmul(previous_hidden_state, p["Uc"]) + p["bc"]
        )
        c = f * c_prev + i * c_
        return v1.stack([o * v1.nn.tanh(c), c])

    def recurrence(i, x_t, h_tm1):
        h_t = unit(x_t, h_tm1)
        return i + 1, ta_emb_x.read(i), h_t

    start = v1.nn.embedding_lookup(embeddings, v1.fill([v1.shape(x)[0]], 0))
    tf.raw_ops.Identity(
        input=v1.while_loop(lambda i, _1, _2: i < T, recurrence, (0, start, h0))[2], name="out"
    )


@pytest.mark.parametrize("control_flow", ["v1", "v2"])
def test_a_cell_of_your_own_in_a_loop_gets_its_weights_and_input_size(control_flow, tmp_path):
    """SeqGAN's hand-written LSTM in a while loop, recorded with --gate-ops: each gate's
    preactivation is a sum of products of variables, as unrolled, so W, U, b per gate are the
    script's variables and the input size is the embedding's (before: input size 0, no
    weights, "its ops run in a while loop's body"); the gates equal the equations of the
    script, written here in float64 numpy; the candidate's tanh of c says why it has none."""
    from tests.conftest import session_model

    path, values = session_model(_seqgan_target_lstm, tmp_path, control_flow=control_flow)
    tokens = np.random.RandomState(4).randint(0, 7, (N, T)).astype(np.int32)
    np.save(tmp_path / "x.npy", tokens)
    pattern = r"(?:while/)?(?:Sigmoid|Tanh)(?:_\d+)?"  # (a v2 body's ops are named in its function)
    shown = run_cli("inspect", path, "--gate-ops", pattern, "--json")
    assert shown.returncode == 0, shown.stderr
    (cell,) = json.loads(shown.stdout)["cells"]
    assert (cell["input_size"], cell["units"]) == (D, H), cell
    out = tmp_path / "run"
    done = run_cli(
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--gate-ops",
        pattern,
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    import recorders

    rec = recorders.Recording(out)
    (name,) = rec.cells
    assert rec.gates(name) == ["sigmoid_0", "sigmoid_1", "sigmoid_2", "tanh_0", "tanh_1"]
    w = {k: np.asarray(v, np.float64) for k, v in values.items()}
    emb = w["g_embeddings"]
    xs = [emb[np.zeros(N, int)]] + [emb[tokens[:, t]] for t in range(T - 1)]
    h = c = np.zeros((N, H))
    for t in range(T):
        z = {g: xs[t] @ w[f"W{g}"] + h @ w[f"U{g}"] + w[f"b{g}"] for g in "ifoc"}
        i, f, o, g_ = _sigmoid(z["i"]), _sigmoid(z["f"]), _sigmoid(z["o"]), np.tanh(z["c"])
        c = f * c + i * g_
        h = o * np.tanh(c)
        for gate, pre, act in (
            ("sigmoid_0", z["i"], i),
            ("sigmoid_1", z["f"], f),
            ("sigmoid_2", z["o"], o),
            ("tanh_0", z["c"], g_),
        ):
            np.testing.assert_allclose(
                rec.gate_array(name, gate, "preactivation")[:, t], pre, atol=1e-5
            )
            np.testing.assert_allclose(rec.gate_array(name, gate)[:, t], act, atol=1e-5)
    weights = pd.read_parquet(out / "weights.parquet")
    for gate, g in (("sigmoid_0", "i"), ("sigmoid_1", "f"), ("sigmoid_2", "o"), ("tanh_0", "c")):
        mine = weights[weights["gate"] == gate]
        for source, want in (("input", w[f"W{g}"]), ("recurrent", w[f"U{g}"])):
            got = mine[mine["source"] == source].pivot(index="row", columns="unit", values="value")
            np.testing.assert_array_equal(got.to_numpy(), want.astype(np.float32))
        b = mine[mine["source"] == "bias"].sort_values("unit")["value"].to_numpy()
        np.testing.assert_array_equal(b, w[f"b{g}"].astype(np.float32))
    assert "tanh_1" not in set(weights["gate"])
    manifest = json.loads((out / "manifest.json").read_text())
    (described,) = manifest["cells"]
    assert list(described["weights_not_known"]) == ["tanh_1"]  # tanh(c): not a sum of products


@pytest.mark.parametrize(
    "steps, says",
    [
        (
            (0, 1, 2, 3, 99999999999999999999),
            "named at steps 0 to 99999999999999999999 but not at step 4",
        ),
        ((0, 1, 2, 3, 2**40), f"named at steps 0 to {2**40} but not at step 4"),
        ((2**40, 2**40 + 1), f"names step {2**40 + 1}, more steps than the graph's"),
    ],
)
def test_steps_a_pattern_names_are_checked_before_anything_is_sized(steps, says):
    """A step group reading 20 digits, or 2^40, beside steps 0-3 (before: the process grew to
    23 GiB sizing the steps between): one line, at once."""
    import time

    import tracer

    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(v1.float32, [None, D], name="x")
        w = v1.get_variable("w", [D, H])
        for t in steps:
            v1.sigmoid(v1.matmul(x, w), name=f"my/f_gate_{t}")
    started = time.monotonic()
    with pytest.raises(tracer.GraphPatternError, match=re.escape(says)):
        tracer.find_named(graph, r"(?P<cell>my)/(?P<gate>\w)_gate_(?P<step>\d+)")
    assert time.monotonic() - started < 5


def test_a_pattern_that_backtracks_without_end_is_stopped(monkeypatch):
    """Nested quantifiers over op names of 45 characters: the round's own example,
    `(\\w+)+`, answers at once (the engine sees through it; before: minutes), and one that
    does backtrack without end, `(a|aa)+` (Fibonacci(45) ways to split), is stopped at the time
    limit and said in one line."""
    import time

    import tracer
    from tracer.find import named

    monkeypatch.setattr(named, "MATCHING_SECONDS", 1.0)
    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(v1.float32, [None, D], name="x")
        for t in range(3):
            v1.sigmoid(x, name=f"{'a' * 45}/i_{t}")
    started = time.monotonic()
    with pytest.raises(tracer.GraphPatternError, match="matches no op of the graph"):
        tracer.find_named(graph, r"(?P<cell>(\w+)+)/i_(?P<step>\d+)x")
    with pytest.raises(tracer.GraphPatternError, match=r"took more than 1 s and was stopped"):
        tracer.find_named(graph, r"(?P<cell>(a|aa)+)/i_(?P<step>\d+)x")
    assert time.monotonic() - started < 5
    (cell,) = tracer.find_named(
        graph, r"(?P<cell>\w+)/(?P<gate>i)_(?P<step>\d+)"
    )  # an ordinary one
    assert cell.name == "a" * 45


def test_a_gate_the_graph_optimizer_would_fuse_away_is_fetched(tmp_path):
    """A cell of your own whose output is tanh(z * sigmoid(z)) (Swish): TensorFlow's remapper
    fuses z * sigmoid(z) into one op and drops the Sigmoid being fetched (before: "... not
    found in the Graph"); gatetrace's sessions run with the remapper off. Exact against numpy."""
    from tests.conftest import session_model

    def body():
        x = v1.placeholder(v1.float32, [None, T, D], name="x")
        W, U = v1.get_variable("swish/W", [D, H]), v1.get_variable("swish/U", [H, H])
        h = v1.zeros([v1.shape(x)[0], H])
        for t, x_t in enumerate(v1.unstack(x, axis=1)):
            z = v1.matmul(x_t, W) + v1.matmul(h, U)
            h = v1.tanh(z * v1.sigmoid(z, name=f"swish/gate_{t}"), name=f"swish/h_{t}")

    path, values = session_model(body, tmp_path)
    x = _inputs(3)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    done = run_cli(
        "record", path, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(out),
        "--gate-ops", r"(?P<cell>swish)/(?P<gate>gate)_(?P<step>\d+)",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import recorders

    rec = recorders.Recording(out)
    W, U = (np.asarray(values[k], np.float64) for k in ("swish/W", "swish/U"))
    h = np.zeros((len(x), H))
    for t in range(T):
        z = x[:, t].astype(np.float64) @ W + h @ U
        s = _sigmoid(z)
        np.testing.assert_allclose(rec.gate_array("swish", "gate")[:, t], s, atol=1e-5)
        h = np.tanh(z * s)

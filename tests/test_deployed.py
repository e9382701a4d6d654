"""Graphs as they were deployed: frozen and pruned to one output, constant inputs, scalar feeds.

Each graph is built and frozen the way TF1 deployment scripts did it
(`convert_variables_to_constants` keeps only what the named output needs), recorded
through the CLI, and compared with a float64 LSTM written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import session_model
from tracer._tf import tf, v1
from tracer.cli import main

R = v1.nn.rnn_cell
U, D, T = 3, 4, 5


def lstm64(x, kernel, bias, forget_bias=1.0, lengths=None):
    """BasicLSTMCell in float64 from zero state: activations [examples, steps, i j f o, units] and h."""

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    x = np.asarray(x, np.float64)
    n = len(x)
    c, h = np.zeros((n, U)), np.zeros((n, U))
    act, hs = np.zeros((n, x.shape[1], 4, U)), np.zeros((n, x.shape[1], U))
    for t in range(x.shape[1]):
        i, j, f, o = np.split(np.concatenate([x[:, t], h], 1) @ kernel + bias, 4, axis=1)
        new_c = c * sig(f + forget_bias) + sig(i) * np.tanh(j)
        new_h = np.tanh(new_c) * sig(o)
        act[:, t] = np.stack([sig(i), np.tanh(j), sig(f + forget_bias), sig(o)], 1)
        live = (np.ones(n, bool) if lengths is None else t < lengths)[:, None]
        c, h = np.where(live, new_c, c), np.where(live, new_h, h)
        hs[:, t] = h
    return act, hs


def pruned_stack(tmp_path, cf: str, layers: int):
    """dynamic_rnn over `layers` BasicLSTMCells with sequence lengths, frozen to its final h only."""

    def body():
        x = v1.placeholder(tf.float32, [None, T, D], name="x")
        lengths = v1.placeholder(tf.int32, [None], name="lengths")
        cell = (
            R.MultiRNNCell([R.BasicLSTMCell(U) for _ in range(layers)])
            if layers > 1
            else R.BasicLSTMCell(U)
        )
        _, state = v1.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
        # all that the deployed model returns
        tf.identity((state[-1] if layers > 1 else state).h, name="final_h")

    return session_model(body, tmp_path, "frozen", "final_h", cf)


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("layers", [1, 2])
def test_a_loop_pruned_to_its_final_h_is_replayed_and_checked(cf, layers, tmp_path, capsys):
    path, values = pruned_stack(tmp_path, cf, layers)
    xs = np.random.RandomState(0).uniform(-1, 1, (6, T, D)).astype(np.float32)
    n = np.array([5, 3, 0, 1, 5, 2], np.int32)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "n.npy", n)
    argv = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--feed",
        f"lengths={tmp_path / 'n.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    rec = Recording(tmp_path / "rec")
    valid = np.arange(T)[None, :] < n[:, None]
    inputs = xs
    for layer in range(layers):
        scope = (
            f"rnn/multi_rnn_cell/cell_{layer}/basic_lstm_cell"
            if layers > 1
            else "rnn/basic_lstm_cell"
        )
        act, h = lstm64(inputs, values[f"{scope}/kernel"], values[f"{scope}/bias"], lengths=n)
        for g, gate in enumerate("ijfo"):
            np.testing.assert_allclose(
                rec.gate_array(scope, gate, "activation")[valid], act[:, :, g][valid], atol=1e-5
            )
        # dynamic_rnn's outputs are zero past each length
        inputs = np.where(valid[:, :, None], h, 0.0)


def test_a_pruned_layer_that_nothing_checks_is_recorded_from_its_loop_and_refused_to_replay(
    tmp_path, capsys
):
    """The lower layer of a stack pruned to the top layer's final h: nothing of its loop's own
    outputs is left. Its loop emits its gates all the same; a replay (the path left for a
    live session's graph, which cannot be rebuilt) could not be checked, and is refused."""
    import tracer

    path, values = pruned_stack(tmp_path, "v1", 2)
    xs = np.random.RandomState(2).uniform(-1, 1, (2, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "n.npy", np.array([T, T], np.int32))
    lower = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell"
    argv = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--feed",
        f"lengths={tmp_path / 'n.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--cells",
        "rnn/multi_rnn_cell/cell_0/*",
        "--quiet",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    act, _ = lstm64(xs, values[f"{lower}/kernel"], values[f"{lower}/bias"])
    for g, gate in enumerate("ijfo"):
        np.testing.assert_allclose(
            Recording(tmp_path / "rec").gate_array(lower, gate, "activation"),
            act[:, :, g],
            atol=1e-5,
        )

    with tracer.load_model(path) as model:
        cells = [c for c in tracer.find_cells(model.graph) if c.name == lower]
        with pytest.raises(
            tracer.GatetraceError,
            match="nothing its loop rnn/while/while_context computes is left in the graph",
        ):
            tracer.trace(
                tracer.from_session(model.session),
                {"x": xs, "lengths": np.array([T, T], np.int32)},
                cells,
            )


def test_a_constant_input_and_no_feed_records_one_example(tmp_path, capsys):
    """A graph whose input is a Const (a frozen demo, a microcontroller export): nothing to feed."""
    xs = np.random.RandomState(1).uniform(-1, 1, (1, T, D)).astype(np.float32)

    def body():
        _, state = v1.nn.dynamic_rnn(
            R.BasicLSTMCell(U), tf.constant(xs, name="audio_features"), dtype=tf.float32
        )
        tf.identity(state.h, name="final_h")

    path, values = session_model(body, tmp_path, "frozen", "final_h")
    assert main(["record", path, "--out", str(tmp_path / "rec"), "--quiet"]) == 0, (
        capsys.readouterr().err
    )
    assert "on 1 sequences" in capsys.readouterr().out
    act, _ = lstm64(xs, values["rnn/basic_lstm_cell/kernel"], values["rnn/basic_lstm_cell/bias"])
    rec = Recording(tmp_path / "rec")
    for g, gate in enumerate("ijfo"):
        np.testing.assert_allclose(
            rec.gate_array("rnn/basic_lstm_cell", gate, "activation"), act[:, :, g], atol=1e-5
        )


def test_a_scalar_keep_prob_fed_from_a_0d_npy(tmp_path, capsys):
    def body():
        x = v1.placeholder(tf.float32, [None, T, D], name="x")
        keep_prob = v1.placeholder(tf.float32, [], name="keep_prob")
        cell = R.DropoutWrapper(R.BasicLSTMCell(U), output_keep_prob=keep_prob)
        v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)

    path, values = session_model(body, tmp_path)
    xs = np.random.RandomState(2).uniform(-1, 1, (4, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "keep.npy", np.float32(1.0))
    argv = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--feed",
        f"keep_prob={tmp_path / 'keep.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    act, _ = lstm64(xs, values["rnn/basic_lstm_cell/kernel"], values["rnn/basic_lstm_cell/bias"])
    rec = Recording(tmp_path / "rec")
    np.testing.assert_allclose(
        rec.gate_array("rnn/basic_lstm_cell", "f", "activation"), act[:, :, 2], atol=1e-5
    )

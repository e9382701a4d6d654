"""One kernel, several chains: cells are chains of steps, not kernels.

Built the way TF1 scripts built them: a bidirectional RNN given the same cell object for
both directions (static and dynamic, control flow v1 and v2), and a char-rnn whose
training script rebuilt the model for sampling in the same graph (variable reuse). Every
recorded value is compared with a float64 LSTM written here, run on the inputs in the
order each chain reads them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from recorders import Recording, RecordingError, RecordingWriter
from tests.conftest import randomise
from tracer._tf import tf, v1
from tracer.cli import main

R = v1.nn.rnn_cell
UNITS, FEATURES, T = 3, 4, 5


def lstm64(x, kernel, bias, forget_bias, lengths=None):
    """BasicLSTMCell / LSTMCell (no peepholes) in float64 from zero state: preactivations and
    activations [examples, steps, i j f o, units]; with `lengths`, state is carried past them."""
    x, kernel, bias = (np.asarray(a, np.float64) for a in (x, kernel, bias))
    n, steps, _ = x.shape

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    c, h = np.zeros((n, UNITS)), np.zeros((n, UNITS))
    pre, act = np.zeros((n, steps, 4, UNITS)), np.zeros((n, steps, 4, UNITS))
    for t in range(steps):
        z = np.concatenate([x[:, t], h], axis=1) @ kernel + bias
        i, j, f, o = np.split(z, 4, axis=1)
        new_c = c * sig(f + forget_bias) + sig(i) * np.tanh(j)
        new_h = np.tanh(new_c) * sig(o)
        pre[:, t] = np.stack([i, j, f, o], axis=1)
        act[:, t] = np.stack([sig(i), np.tanh(j), sig(f + forget_bias), sig(o)], axis=1)
        live = np.ones(n, bool) if lengths is None else t < lengths
        c, h = np.where(live[:, None], new_c, c), np.where(live[:, None], new_h, h)
    return pre, act


def reversed_within(x, lengths):
    """Each sequence reversed within its length (what the backward direction reads)."""
    out = x.copy()
    for k, n in enumerate(lengths):
        out[k, :n] = x[k, :n][::-1]
    return out


def check_gates(rec: Recording, cell: str, pre, act, valid) -> None:
    for g, gate in enumerate("ijfo"):
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "preactivation")[valid], pre[:, :, g][valid], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "activation")[valid], act[:, :, g][valid], atol=1e-5
        )
        assert np.isnan(rec.gate_array(cell, gate, "activation")[~valid]).all()


def by_position(values, lengths):
    """A backward reference (step t read position n-1-t) re-indexed by input position."""
    out = np.full_like(values, np.nan)
    for k, n in enumerate(lengths):
        out[k, :n] = values[k, :n][::-1]
    return out


@pytest.mark.parametrize("how", ["static", "dynamic-v1", "dynamic-v2"])
def test_one_cell_for_both_directions_gives_two_cells(how, tmp_path, capsys):
    if how == "dynamic-v1":
        v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, T, FEATURES], name="x")
            lengths = v1.placeholder(tf.int32, [None], name="lengths")
            # one object: one kernel for both directions
            cell = R.BasicLSTMCell(UNITS, forget_bias=0.7)
            if how == "static":
                v1.nn.static_bidirectional_rnn(
                    cell, cell, tf.unstack(x, axis=1), dtype=tf.float32, sequence_length=None
                )
            else:
                v1.nn.bidirectional_dynamic_rnn(
                    cell, cell, x, sequence_length=lengths, dtype=tf.float32
                )
            session = v1.Session(graph=graph)
            session.run(v1.global_variables_initializer())
        randomise(session, graph)
        with graph.as_default():
            kernel, bias = session.run([v for v in v1.global_variables()])
            path = str(tmp_path / "ckpt" / "model.ckpt")
            v1.train.Saver().save(session, path)
    finally:
        v1.enable_control_flow_v2()
    xs = np.random.RandomState(3).uniform(-1, 1, (6, T, FEATURES)).astype(np.float32)
    n = np.array([5, 3, 0, 1, 5, 2] if how != "static" else [T] * 6)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "n.npy", n.astype(np.int32))
    assert main(["inspect", path, "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    names = sorted(c["name"] for c in cells)
    assert (
        len(names) == 2
        and len(set(names)) == 2
        and all(name.startswith("bidirectional_rnn/fw/basic_lstm_cell@") for name in names)
    )
    # the shortest part that differs
    assert names == [
        "bidirectional_rnn/fw/basic_lstm_cell@bw",
        "bidirectional_rnn/fw/basic_lstm_cell@fw",
    ]
    assert all(
        c["shares_weights_with"] == [other]
        for c, other in zip(sorted(cells, key=lambda c: c["name"]), names[::-1], strict=True)
    )
    # from the loop input's static time axis where the cells are replayed
    assert [c["steps"] for c in cells] == [T, T]
    feeds = ["--feed", f"x={tmp_path / 'x.npy'}"] + (
        ["--feed", f"lengths={tmp_path / 'n.npy'}"] if how != "static" else []
    )
    assert main(["record", path, *feeds, "--out", str(tmp_path / "rec"), "--quiet"]) == 0
    assert "recorded 2 cells on 6 sequences" in capsys.readouterr().out
    rec = Recording(tmp_path / "rec")
    valid = np.arange(T)[None, :] < n[:, None]
    forward, backward = sorted(names, key=lambda name: "bw" in name.rpartition("@")[2])
    pre, act = lstm64(xs, kernel, bias, 0.7, n)
    check_gates(rec, forward, pre, act, valid)
    pre, act = lstm64(reversed_within(xs, n), kernel, bias, 0.7, n)
    check_gates(rec, backward, by_position(pre, n), by_position(act, n), valid)
    manifest = json.loads((tmp_path / "rec" / "manifest.json").read_text())
    assert manifest["rows"]["gates"] == int(valid.sum()) * 4 * UNITS * 2


def char_rnn(tmp_path):
    """sherjilozair/char-rnn's model: MultiRNNCell of LSTMCells under legacy_seq2seq.rnn_decoder,
    fixed batch; the script then rebuilt it for sampling in the same graph, twice, with reuse."""
    vocab, batch = 7, 4
    graph = tf.Graph()
    with graph.as_default():
        cell = R.MultiRNNCell([R.LSTMCell(UNITS) for _ in range(2)], state_is_tuple=True)

        def unroll(tokens, steps, size):
            with v1.variable_scope(v1.get_variable_scope(), reuse=v1.AUTO_REUSE):
                embedding = v1.get_variable("embedding", [vocab, FEATURES])
                inputs = [
                    tf.squeeze(i, [1])
                    for i in tf.split(tf.nn.embedding_lookup(embedding, tokens), steps, 1)
                ]
                return rnn_decoder(inputs, cell.zero_state(size, tf.float32), cell, scope="rnnlm")

        unroll(v1.placeholder(tf.int32, [batch, T], name="input_data"), T, batch)
        unroll(v1.placeholder(tf.int32, [1, 1], name="sample_input"), 1, 1)
        unroll(v1.placeholder(tf.int32, [1, 1], name="sample_input_2"), 1, 1)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    randomise(session, graph)
    with graph.as_default():
        values = {v.op.name: session.run(v) for v in v1.global_variables()}
        v1.train.Saver().save(session, str(tmp_path / "ckpt" / "model.ckpt"))
    return str(tmp_path / "ckpt" / "model.ckpt"), values


def rnn_decoder(inputs, state, cell, scope=None):
    """tf.contrib.legacy_seq2seq.rnn_decoder (gone since TF 2) without a loop function, as TF 1.x wrote it."""
    outputs = []
    with v1.variable_scope(scope or "rnn_decoder"):
        for k, inp in enumerate(inputs):
            if k > 0:
                v1.get_variable_scope().reuse_variables()
            output, state = cell(inp, state)
            outputs.append(output)
    return outputs, state


def test_a_char_rnn_with_sampling_unrolls_records_the_training_chains(tmp_path, capsys):
    path, values = char_rnn(tmp_path)
    assert main(["inspect", path, "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert len(cells) == 6 and len({c["name"] for c in cells}) == 6
    assert sorted(c["steps"] for c in cells) == [1, 1, 1, 1, T, T]
    # 6 rows: batches of 4, the last padded
    tokens = np.random.RandomState(0).randint(0, 7, (6, T)).astype(np.int32)
    np.save(tmp_path / "tokens.npy", tokens)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"input_data={tmp_path / 'tokens.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "recorded 2 cells on 6 sequences" in out
        and out.count("skipped cell ") == 4
        and "it needs placeholder sample_input" in out
    )
    manifest = json.loads((tmp_path / "rec" / "manifest.json").read_text())
    assert sorted(s["needs"] for s in manifest["skipped"]) == [
        "sample_input",
        "sample_input",
        "sample_input_2",
        "sample_input_2",
    ]
    rec = Recording(tmp_path / "rec")
    recorded = {c["name"]: c for c in manifest["cells"]}
    x = values["embedding"][tokens]
    for layer in range(2):
        scope = f"rnnlm/multi_rnn_cell/cell_{layer}/lstm_cell"
        name = next(n for n in recorded if n.startswith(scope))
        pre, act = lstm64(x, values[f"{scope}/kernel"], values[f"{scope}/bias"], 1.0)
        check_gates(rec, name, pre, act, np.ones((6, T), bool))
        h = (
            np.tanh(_cell_state(x, values[f"{scope}/kernel"], values[f"{scope}/bias"]))
            * act[:, :, 3]
        )
        x = h  # the next layer reads this one's h
    assert len(recorded) == 2


def _cell_state(x, kernel, bias):
    """c of the float64 LSTM above, at every step."""

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    n, steps, _ = x.shape
    c, h, cs = np.zeros((n, UNITS)), np.zeros((n, UNITS)), np.zeros((n, steps, UNITS))
    for t in range(steps):
        i, j, f, o = np.split(np.concatenate([x[:, t], h], axis=1) @ kernel + bias, 4, axis=1)
        c = c * sig(f + 1.0) + sig(i) * np.tanh(j)
        h = np.tanh(c) * sig(o)
        cs[:, t] = c
    return cs


def test_two_cells_can_never_write_one_folder(tmp_path):
    cells = [{"name": "rnn/basic_lstm_cell"}, {"name": "rnn/basic_lstm_cell"}]
    with pytest.raises(
        RecordingError,
        match=r"two cells are both named 'rnn/basic_lstm_cell': each cell is written to a folder of its own",
    ):
        RecordingWriter(tmp_path / "out", {"cells": cells}, examples=(0, 2))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kernel, bias", [("weights", "biases"), ("Linear/Matrix", "Linear/Bias")])
def test_cells_are_named_by_their_scope_in_every_era(kernel, bias, tmp_path, capsys):
    """A BasicLSTMCell as TF 1.0/1.1 (`weights`, `biases`) and TF 0.x (`Linear/Matrix`) built
    it: `_linear` on concat([x, h]), BiasAdd, split into i, j, f, o."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, T, FEATURES], name="x")
        with v1.variable_scope("rnn/basic_lstm_cell"):
            w = v1.get_variable(kernel, [FEATURES + UNITS, 4 * UNITS])
            b = v1.get_variable(bias, [4 * UNITS])
        c = h = tf.zeros([tf.shape(x)[0], UNITS])
        for step in tf.unstack(x, axis=1):
            i, j, f, o = tf.split(
                tf.nn.bias_add(tf.matmul(tf.concat([step, h], 1), w), b), 4, axis=1
            )
            c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
            h = tf.tanh(c) * tf.sigmoid(o)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    randomise(session, graph)
    with graph.as_default():
        kernel_value, bias_value = session.run([w, b])
        v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    xs = np.random.RandomState(4).uniform(-1, 1, (3, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert (
        main(
            [
                "record",
                str(tmp_path / "model.ckpt"),
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
    pre, act = lstm64(xs, kernel_value, bias_value, 1.0)
    check_gates(Recording(tmp_path / "rec"), "rnn/basic_lstm_cell", pre, act, np.ones((3, T), bool))


def test_a_shared_kernel_chain_is_named_by_the_shortest_part_of_its_scope_that_differs():
    from tracer.find.graph import _shortest

    assert _shortest(
        [
            "bidirectional_rnn/fw/fw/while/",
            "rnn/bidirectional_rnn/bw/bw/while/rnn/bidirectional_rnn/bw/bw/while/",
        ]
    ) == ["fw", "bw"]
    assert _shortest(
        [
            "rnnlm/rnn_decoder/rnn_decoder/multi_rnn_cell/cell_0/lstm_cell",
            "rnnlm_1/rnn_decoder/rnn_decoder/multi_rnn_cell/cell_0/lstm_cell",
        ]
    ) == ["rnnlm", "rnnlm_1"]
    # one has no part of its own: the whole scopes
    assert _shortest(["a/b/", "a/b/c"]) == ["a/b", "a/b/c"]

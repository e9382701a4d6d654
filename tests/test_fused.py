"""Fused RNN ops, built as tf.contrib's LSTMBlockCell, LSTMBlockFusedCell and GRUBlockCellV2
built them (those classes are gone; their ops remain, called here through tf.raw_ops):
every recorded value equals a float64 numpy recomputation written in this file."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from tests.conftest import randomise
from tracer._tf import tf, v1
from tracer.cli import main

D, U, T, N = 3, 4, 5, 6


def sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def lstm_block64(x, w, b, layout, forget_bias=0.0, peep=None, clip=None):
    """LSTMBlockCell / BlockLSTM(V2) in float64 from zero state: (preactivations, activations
    [N, T, i j f o, U], c, h), blocks of w in `layout` order ("icfo" or "ifco")."""
    x, w, b = (np.asarray(a, np.float64) for a in (x, w, b))
    c, h = np.zeros((len(x), U)), np.zeros((len(x), U))
    pre, act, cs, hs = np.zeros((len(x), T, 4, U)), np.zeros((len(x), T, 4, U)), np.zeros((len(x), T, U)), np.zeros((len(x), T, U))
    wci, wcf, wco = peep if peep is not None else (0.0, 0.0, 0.0)
    for t in range(T):
        blocks = dict(zip(layout, np.split(np.concatenate([x[:, t], h], 1) @ w + b, 4, axis=1)))
        i = sig(blocks["i"] + c * wci)
        f = sig(blocks["f"] + forget_bias + c * wcf)
        j = np.tanh(blocks["c"])
        c = j * i + c * f
        if clip:
            c = np.clip(c, -clip, clip)
        o = sig(blocks["o"] + c * wco)
        h = np.tanh(c) * o
        pre[:, t] = np.stack([blocks["i"], blocks["c"], blocks["f"], blocks["o"]], 1)
        act[:, t] = np.stack([i, j, f, o], 1)
        cs[:, t], hs[:, t] = c, h
    return pre, act, cs, hs


def gru_block64(x, w_ru, w_c, b_ru, b_c):
    x = np.asarray(x, np.float64)
    h = np.zeros((len(x), U))
    pre, act, hs = np.zeros((len(x), T, 3, U)), np.zeros((len(x), T, 3, U)), np.zeros((len(x), T, U))
    for t in range(T):
        z = np.concatenate([x[:, t], h], 1) @ w_ru + b_ru
        r, u = sig(z[:, :U]), sig(z[:, U:])
        zc = np.concatenate([x[:, t], r * h], 1) @ w_c + b_c
        c = np.tanh(zc)
        h = u * h + (1 - u) * c
        pre[:, t] = np.stack([z[:, :U], z[:, U:], zc], 1)
        act[:, t] = np.stack([r, u, c], 1)
        hs[:, t] = h
    return pre, act, hs


def build(kind):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, T, D], name="x")
        zeros = tf.zeros([tf.shape(x)[0], U])
        if kind == "GRUBlockCell":
            with v1.variable_scope("rnn/gru_cell"):
                w_ru, b_ru = v1.get_variable("gates/kernel", [D + U, 2 * U]), v1.get_variable("gates/bias", [2 * U])
                w_c, b_c = v1.get_variable("candidate/kernel", [D + U, U]), v1.get_variable("candidate/bias", [U])
            h = zeros
            for step in tf.unstack(x, axis=1):
                h = tf.raw_ops.GRUBlockCell(x=step, h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c).h
        elif kind == "LSTMBlockCell":  # with peepholes, forget bias and cell clip
            with v1.variable_scope("rnn/lstm_cell"):
                w, b = v1.get_variable("kernel", [D + U, 4 * U]), v1.get_variable("bias", [4 * U])
                peep = [v1.get_variable(n, [U]) for n in ("w_i_diag", "w_f_diag", "w_o_diag")]
            c = h = zeros
            for step in tf.unstack(x, axis=1):
                out = tf.raw_ops.LSTMBlockCell(x=step, cs_prev=c, h_prev=h, w=w, wci=peep[0], wcf=peep[1], wco=peep[2], b=b,
                                               forget_bias=0.6, cell_clip=0.8, use_peephole=True)
                c, h = out.cs, out.h
        else:  # LSTMBlockFusedCell: one op over the time-major sequence
            with v1.variable_scope("lstm_fused_cell"):
                w, b = v1.get_variable("kernel", [D + U, 4 * U]), v1.get_variable("bias", [4 * U])
            op = tf.raw_ops.BlockLSTMV2 if kind == "BlockLSTMV2" else tf.raw_ops.BlockLSTM
            extra = {} if kind == "BlockLSTMV2" else {"forget_bias": 1.0}
            z = tf.zeros([U])
            op(seq_len_max=tf.constant(T, tf.int64), x=tf.transpose(x, [1, 0, 2]), cs_prev=zeros, h_prev=zeros, w=w, wci=z, wcf=z, wco=z, b=b,
               cell_clip=-1.0, use_peephole=False, **extra)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    randomise(session, graph)
    with graph.as_default():
        values = {v.op.name: session.run(v) for v in v1.global_variables()}
    return graph, session, values


@pytest.mark.parametrize("kind", ["LSTMBlockCell", "BlockLSTM", "BlockLSTMV2", "GRUBlockCell"])
def test_fused_ops_are_recorded_exactly(kind, tmp_path, capsys):
    graph, session, values = build(kind)
    with graph.as_default():
        v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    xs = np.random.RandomState(2).uniform(-1, 1, (N, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    assert main(["inspect", str(tmp_path / "model.ckpt"), "--json"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert (cell["kind"], cell["path"], cell["steps"]) == (kind, "fused", T)
    assert main(["record", str(tmp_path / "model.ckpt"), "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "rec"), "--quiet", "--batch-size", "4"]) == 0
    rec = Recording(tmp_path / "rec")
    if kind == "GRUBlockCell":
        name = "rnn/gru_cell"
        v = {k.rpartition("gru_cell/")[2]: a for k, a in values.items()}
        pre, act, h = gru_block64(xs, v["gates/kernel"], v["candidate/kernel"], v["gates/bias"], v["candidate/bias"])
        states = {"h": h}
    else:
        name = "rnn/lstm_cell" if kind == "LSTMBlockCell" else "lstm_fused_cell"
        v = {k.rpartition("/")[2]: a for k, a in values.items()}
        peep = (v["w_i_diag"], v["w_f_diag"], v["w_o_diag"]) if kind == "LSTMBlockCell" else None
        layout = "ifco" if kind == "BlockLSTMV2" else "icfo"
        forget_bias = {"LSTMBlockCell": 0.6, "BlockLSTM": 1.0, "BlockLSTMV2": 0.0}[kind]
        pre, act, c, h = lstm_block64(xs, v["kernel"], v["bias"], layout, forget_bias, peep, 0.8 if kind == "LSTMBlockCell" else None)
        states = {"c": c, "h": h}
    gates = "ruc" if kind == "GRUBlockCell" else "ijfo"
    for g, gate in enumerate(gates):
        np.testing.assert_allclose(rec.gate_array(name, gate, "preactivation"), pre[:, :, g], atol=1e-5)
        np.testing.assert_allclose(rec.gate_array(name, gate, "activation"), act[:, :, g], atol=1e-5)
    for state, expected in states.items():
        np.testing.assert_allclose(rec.state_array(name, state), expected, atol=1e-5)
    weights = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    j = "c" if kind == "GRUBlockCell" else "j"
    got = weights[(weights["cell"] == name) & (weights["gate"] == j) & (weights["source"] == "input")].sort_values(["row", "unit"])
    block = {"GRUBlockCell": 0, "BlockLSTMV2": 2}.get(kind, 1)  # where j (ci) sits among w's column blocks
    kernel = v["candidate/kernel"] if kind == "GRUBlockCell" else v["kernel"]
    np.testing.assert_array_equal(got["value"].to_numpy().reshape(D, U), kernel[:D, block * U : (block + 1) * U])



def test_a_fused_cell_inside_a_while_loop_is_named_in_one_line(tmp_path, capsys):
    """LSTMBlockCell under dynamic_rnn (control flow v1): its outputs live inside the loop."""
    v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, T, D], name="x")
            with v1.variable_scope("rnn/lstm_cell"):
                w, b = v1.get_variable("kernel", [D + U, 4 * U]), v1.get_variable("bias", [4 * U])
            z = tf.zeros([U])

            def step(t, c, h):
                out = tf.raw_ops.LSTMBlockCell(x=x[:, 0] * tf.cast(t, tf.float32), cs_prev=c, h_prev=h, w=w, wci=z, wcf=z, wco=z, b=b)
                return t + 1, out.cs, out.h

            zeros = tf.zeros([tf.shape(x)[0], U])
            tf.while_loop(lambda t, c, h: t < T, step, [tf.constant(0), zeros, zeros])
            v1.train.export_meta_graph(str(tmp_path / "model.ckpt.meta"))
    finally:
        v1.enable_control_flow_v2()
    assert main(["inspect", str(tmp_path / "model.ckpt.meta")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(LSTMBlockCell) runs inside a while loop, where its outputs cannot be fetched" in err

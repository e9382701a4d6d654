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
    pre, act, cs, hs = (
        np.zeros((len(x), T, 4, U)),
        np.zeros((len(x), T, 4, U)),
        np.zeros((len(x), T, U)),
        np.zeros((len(x), T, U)),
    )
    wci, wcf, wco = peep if peep is not None else (0.0, 0.0, 0.0)
    for t in range(T):
        blocks = dict(
            zip(layout, np.split(np.concatenate([x[:, t], h], 1) @ w + b, 4, axis=1), strict=True)
        )
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
    pre, act, hs = (
        np.zeros((len(x), T, 3, U)),
        np.zeros((len(x), T, 3, U)),
        np.zeros((len(x), T, U)),
    )
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
                w_ru, b_ru = (
                    v1.get_variable("gates/kernel", [D + U, 2 * U]),
                    v1.get_variable("gates/bias", [2 * U]),
                )
                w_c, b_c = (
                    v1.get_variable("candidate/kernel", [D + U, U]),
                    v1.get_variable("candidate/bias", [U]),
                )
            h = zeros
            for step in tf.unstack(x, axis=1):
                h = tf.raw_ops.GRUBlockCell(
                    x=step, h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c
                ).h
        elif kind == "LSTMBlockCell":  # with peepholes, forget bias and cell clip
            with v1.variable_scope("rnn/lstm_cell"):
                w, b = v1.get_variable("kernel", [D + U, 4 * U]), v1.get_variable("bias", [4 * U])
                peep = [v1.get_variable(n, [U]) for n in ("w_i_diag", "w_f_diag", "w_o_diag")]
            c = h = zeros
            for step in tf.unstack(x, axis=1):
                out = tf.raw_ops.LSTMBlockCell(
                    x=step,
                    cs_prev=c,
                    h_prev=h,
                    w=w,
                    wci=peep[0],
                    wcf=peep[1],
                    wco=peep[2],
                    b=b,
                    forget_bias=0.6,
                    cell_clip=0.8,
                    use_peephole=True,
                )
                c, h = out.cs, out.h
        else:  # LSTMBlockFusedCell: one op over the time-major sequence
            with v1.variable_scope("lstm_fused_cell"):
                w, b = v1.get_variable("kernel", [D + U, 4 * U]), v1.get_variable("bias", [4 * U])
            op = tf.raw_ops.BlockLSTMV2 if kind == "BlockLSTMV2" else tf.raw_ops.BlockLSTM
            extra = {} if kind == "BlockLSTMV2" else {"forget_bias": 1.0}
            z = tf.zeros([U])
            op(
                seq_len_max=tf.constant(T, tf.int64),
                x=tf.transpose(x, [1, 0, 2]),
                cs_prev=zeros,
                h_prev=zeros,
                w=w,
                wci=z,
                wcf=z,
                wco=z,
                b=b,
                cell_clip=-1.0,
                use_peephole=False,
                **extra,
            )
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
                "--batch-size",
                "4",
            ]
        )
        == 0
    )
    rec = Recording(tmp_path / "rec")
    if kind == "GRUBlockCell":
        name = "rnn/gru_cell"
        v = {k.rpartition("gru_cell/")[2]: a for k, a in values.items()}
        pre, act, h = gru_block64(
            xs, v["gates/kernel"], v["candidate/kernel"], v["gates/bias"], v["candidate/bias"]
        )
        states = {"h": h}
    else:
        name = "rnn/lstm_cell" if kind == "LSTMBlockCell" else "lstm_fused_cell"
        v = {k.rpartition("/")[2]: a for k, a in values.items()}
        peep = (v["w_i_diag"], v["w_f_diag"], v["w_o_diag"]) if kind == "LSTMBlockCell" else None
        layout = "ifco" if kind == "BlockLSTMV2" else "icfo"
        forget_bias = {"LSTMBlockCell": 0.6, "BlockLSTM": 1.0, "BlockLSTMV2": 0.0}[kind]
        pre, act, c, h = lstm_block64(
            xs,
            v["kernel"],
            v["bias"],
            layout,
            forget_bias,
            peep,
            0.8 if kind == "LSTMBlockCell" else None,
        )
        states = {"c": c, "h": h}
    gates = "ruc" if kind == "GRUBlockCell" else "ijfo"
    for g, gate in enumerate(gates):
        np.testing.assert_allclose(
            rec.gate_array(name, gate, "preactivation"), pre[:, :, g], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array(name, gate, "activation"), act[:, :, g], atol=1e-5
        )
    for state, expected in states.items():
        np.testing.assert_allclose(rec.state_array(name, state), expected, atol=1e-5)
    weights = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    j = "c" if kind == "GRUBlockCell" else "j"
    got = weights[
        (weights["cell"] == name) & (weights["gate"] == j) & (weights["source"] == "input")
    ].sort_values(["row", "unit"])
    # where j (ci) sits among w's column blocks
    block = {"GRUBlockCell": 0, "BlockLSTMV2": 2}.get(kind, 1)
    kernel = v["candidate/kernel"] if kind == "GRUBlockCell" else v["kernel"]
    np.testing.assert_array_equal(
        got["value"].to_numpy().reshape(D, U), kernel[:D, block * U : (block + 1) * U]
    )


class _BlockCell(v1.nn.rnn_cell.RNNCell):
    """tf.contrib's LSTMBlockCell (peepholes, forget bias, cell clip) or GRUBlockCellV2, as an
    RNNCell whose step is the fused op, for dynamic_rnn."""

    def __init__(self, kind: str):
        super().__init__(name="lstm_cell" if kind == "LSTMBlockCell" else "gru_cell")
        self.kind = kind

    state_size = property(
        lambda self: v1.nn.rnn_cell.LSTMStateTuple(U, U) if self.kind == "LSTMBlockCell" else U
    )
    output_size = property(lambda self: U)

    def build(self, shape):
        if self.kind == "LSTMBlockCell":
            self.w, self.b = (
                self.add_weight("kernel", [D + U, 4 * U]),
                self.add_weight("bias", [4 * U]),
            )
            self.peep = [self.add_weight(n, [U]) for n in ("w_i_diag", "w_f_diag", "w_o_diag")]
        else:
            self.w_ru, self.b_ru = (
                self.add_weight("gates/kernel", [D + U, 2 * U]),
                self.add_weight("gates/bias", [2 * U]),
            )
            self.w_c, self.b_c = (
                self.add_weight("candidate/kernel", [D + U, U]),
                self.add_weight("candidate/bias", [U]),
            )
        self.built = True

    def call(self, x, state):
        if self.kind == "GRUBlockCell":
            h = tf.raw_ops.GRUBlockCell(
                x=x, h_prev=state, w_ru=self.w_ru, w_c=self.w_c, b_ru=self.b_ru, b_c=self.b_c
            ).h
            return h, h
        c, h = state
        out = tf.raw_ops.LSTMBlockCell(
            x=x,
            cs_prev=c,
            h_prev=h,
            w=self.w,
            wci=self.peep[0],
            wcf=self.peep[1],
            wco=self.peep[2],
            b=self.b,
            forget_bias=0.6,
            cell_clip=0.8,
            use_peephole=True,
        )
        return out.h, v1.nn.rnn_cell.LSTMStateTuple(out.cs, out.h)


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("kind", ["LSTMBlockCell", "GRUBlockCell"])
def test_a_fused_cell_inside_a_while_loop_is_recorded_from_the_loop(cf, kind, tmp_path, capsys):
    """LSTMBlockCell and GRUBlockCell under dynamic_rnn (control flow v1 and v2, as the DL4J
    graph `lstmblockcell_dynamic`): the loop, rewritten, emits the op's outputs and inputs."""
    if cf == "v1":
        v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, T, D], name="x")
            v1.nn.dynamic_rnn(_BlockCell(kind), x, dtype=tf.float32)
            session = v1.Session(graph=graph)
            session.run(v1.global_variables_initializer())
        randomise(session, graph)
        with graph.as_default():
            # by name inside the cell's scope: rnn/lstm_cell/kernel -> kernel, rnn/gru_cell/gates/kernel -> gates/kernel
            values = {v.op.name.split("/", 2)[2]: session.run(v) for v in v1.global_variables()}
            v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    finally:
        v1.enable_control_flow_v2()
    xs = np.random.RandomState(4).uniform(-1, 1, (N, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    # a fused op is checked by its own outputs: --verify has nothing more to replay
    argv = [
        "record",
        str(tmp_path / "model.ckpt"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
        "--verify",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    rec = Recording(tmp_path / "rec")
    (name,) = rec.cells
    assert {c["name"]: (c["kind"], c["path"]) for c in rec.manifest["cells"]} == {
        name: (kind, "loop")
    }
    if kind == "GRUBlockCell":
        pre, act, h = gru_block64(
            xs,
            values["gates/kernel"],
            values["candidate/kernel"],
            values["gates/bias"],
            values["candidate/bias"],
        )
        states = {"h": h}
    else:
        peep = (values["w_i_diag"], values["w_f_diag"], values["w_o_diag"])
        pre, act, c, h = lstm_block64(xs, values["kernel"], values["bias"], "icfo", 0.6, peep, 0.8)
        states = {"c": c, "h": h}
    for g, gate in enumerate(rec.gates(name)):
        np.testing.assert_allclose(
            rec.gate_array(name, gate, "preactivation"), pre[:, :, g], atol=1e-5, err_msg=gate
        )
        np.testing.assert_allclose(
            rec.gate_array(name, gate, "activation"), act[:, :, g], atol=1e-5, err_msg=gate
        )
    for state, expected in states.items():
        np.testing.assert_allclose(rec.state_array(name, state), expected, atol=1e-5, err_msg=state)

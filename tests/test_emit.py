"""Loops rewritten to emit their body's tensors (`tracer.values.emit`): a `dynamic_rnn` loop
(control flow v2) gives every step's gate tensors, bit for bit those of the same cells unrolled
by `static_rnn` with the same weights, and the model's outputs do not change.

The rewrite alone, on a GraphDef: `tests/test_loops.py` records through it. The values are
checked against TensorFlow's own unrolled tensors and against a float64 numpy LSTM.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracer._tf import function_def_to_graph, tf, v1
from tracer.load.import_check import check_before_import
from tracer.values.emit import emit_loops

T, B, F, U = 6, 4, 3, 5
CELLS = {
    "lstm": lambda: v1.nn.rnn_cell.BasicLSTMCell(U),
    "gru": lambda: v1.nn.rnn_cell.GRUCell(U),
    "two lstm layers": lambda: v1.nn.rnn_cell.MultiRNNCell(
        [v1.nn.rnn_cell.BasicLSTMCell(U), v1.nn.rnn_cell.BasicLSTMCell(U)]
    ),
}


def build(kind: str, dynamic: bool, prefix):
    """The model, saved with its meta graph: `dynamic_rnn` (control flow v2) or `static_rnn`."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(1)
        x = v1.placeholder(tf.float32, [None, T, F], name="x")
        cell = CELLS[kind]()
        if dynamic:  # control flow v2, TensorFlow 2's default
            out, _ = v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        else:
            out, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
            out = tf.stack(out, axis=1)
        tf.identity(out, name="y")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            v1.train.Saver().save(session, str(prefix))
    return graph


def splits(graph) -> list[tf.Operation]:
    """The cells' Split ops (their gate blocks) in the order of their names, step by step."""
    return sorted(
        (op for op in graph.get_operations() if op.type == "Split"), key=lambda op: op.name
    )


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_a_dynamic_rnn_loop_emits_its_gates_as_static_rnn_computes_them(kind, tmp_path):
    x = np.random.RandomState(0).uniform(-1, 1, (B, T, F)).astype(np.float32)
    # static_rnn with the same weights (the same variable names; the dynamic model's checkpoint restored)
    build(kind, True, tmp_path / "dynamic")
    static = build(kind, False, tmp_path / "static")

    meta_def = _meta_graph(tmp_path / "dynamic.meta")
    graph_def = meta_def.graph_def
    (loop,) = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")]
    library = {f.signature.name: f for f in graph_def.library.function}
    body = function_def_to_graph(library[loop.attr["body"].func.name])
    wanted = [t.name for op in splits(body) for t in op.outputs]
    assert wanted, "no Split in the loop body: the test would prove nothing"

    rewritten, emitted = emit_loops(graph_def, {loop.name: wanted})
    check_before_import(rewritten, "rewritten", allow_unsafe_ops=False)
    added = {n.op for n in rewritten.node} - {n.op for n in graph_def.node}
    assert added <= {"EmptyTensorList", "TensorListStack"}, added
    new_functions = [f for f in rewritten.library.function if f.signature.name not in library]
    assert {n.op for f in new_functions for n in f.node_def} - {
        n.op for f in library.values() for n in f.node_def
    } == {"TensorListPushBack"}

    meta_def.graph_def.CopyFrom(rewritten)
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        v1.train.import_meta_graph(meta_def).restore(session, str(tmp_path / "dynamic"))
        stacks = session.run([emitted[(loop.name, name)] for name in wanted], {"x:0": x})
        y = session.run("y:0", {"x:0": x})
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        v1.train.import_meta_graph(str(tmp_path / "dynamic.meta")).restore(
            session, str(tmp_path / "dynamic")
        )
        y_before = session.run("y:0", {"x:0": x})
    assert np.array_equal(y, y_before), "the rewrite changed the model's outputs"

    with v1.Session(graph=static) as session:
        v1.train.Saver().restore(session, str(tmp_path / "dynamic"))
        per_step = splits(static)  # T steps per layer, each with its Split's outputs
        values = session.run([t for op in per_step for t in op.outputs], {"x:0": x})
        weights = {
            v.op.name: session.run(v) for v in static.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
        }
    blocks = len(per_step[0].outputs)
    layers = len(wanted) // blocks
    for k, name in enumerate(wanted):
        layer, block = divmod(k, blocks)
        steps = [
            values[(layer * T + t) * blocks + block] if layers > 1 else values[t * blocks + block]
            for t in range(T)
        ]
        assert stacks[k].shape == (T, B, stacks[k].shape[2])
        assert np.array_equal(stacks[k], np.stack(steps)), (
            f"{name}: not bit for bit the unrolled cell's"
        )

    if kind == "lstm":  # and a float64 numpy LSTM agrees
        kernel, bias = weights["rnn/basic_lstm_cell/kernel"], weights["rnn/basic_lstm_cell/bias"]
        h = c = np.zeros((B, U))
        for t in range(T):
            z = np.concatenate([x[:, t], h], 1).astype(np.float64) @ kernel + bias
            for g in range(4):  # i, j, f, o
                np.testing.assert_allclose(stacks[g][t], z[:, g * U : (g + 1) * U], atol=1e-5)
            i, j, f, o = np.split(z, 4, axis=1)
            c = c * _sigmoid(f + 1.0) + _sigmoid(i) * np.tanh(j)  # BasicLSTMCell's forget_bias 1
            h = np.tanh(c) * _sigmoid(o)


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _meta_graph(meta_path):
    with tf.Graph().as_default() as graph:
        v1.train.import_meta_graph(str(meta_path), clear_devices=True)
        return v1.train.export_meta_graph(graph=graph)

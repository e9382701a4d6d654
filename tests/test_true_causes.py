"""Models gatetrace cannot record get one line that names the true cause: a cell whose input
passes through dropout drawn anew on every run (a TF1 training checkpoint's `DropoutWrapper`),
and a graph holding an op that is not TensorFlow's (a custom op compiled with the model's code).
Built as TF1 training scripts built them, in both control-flow versions.
"""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from tests.conftest import R, run_cli, session_model
from tracer._tf import tf, v1

STEPS, FEATURES = 5, 3


@pytest.mark.parametrize("control_flow", ["v1", "v2"])
def test_dropout_drawn_on_every_run_is_named_with_how_to_turn_it_off(control_flow, tmp_path):
    def body():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        cell = R.DropoutWrapper(R.GRUCell(4), input_keep_prob=0.5)  # a training script's
        v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)

    path, _ = session_model(body, tmp_path, control_flow=control_flow)
    done = run_cli("inspect", path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    line = done.stderr
    assert "a random draw made anew on every run (dropout" in line and "(RandomUniform)" in line
    assert "keep probabilities at 1.0" in line and "found a Mul op" not in line


def test_a_custom_compiled_op_is_named_as_such_not_as_incomplete_checkpoint_files(tmp_path):
    """A checkpoint whose graph holds `LinearRecurrenceNew`, an op its authors compiled and
    loaded with tf.load_op_library: its files are complete, the op is not TensorFlow's."""

    def body():
        x = v1.placeholder(tf.float32, [None, STEPS], name="x")
        tf.identity(x * v1.get_variable("w", [STEPS]), name="y")

    path, _ = session_model(body, tmp_path)
    meta = v1.MetaGraphDef()
    meta.ParseFromString(open(f"{path}.meta", "rb").read())
    node = meta.graph_def.node.add()
    text_format.Parse('name: "recurrence" op: "LinearRecurrenceNew" input: "x"', node)
    open(f"{path}.meta", "wb").write(meta.SerializeToString())
    done = run_cli("inspect", path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "its graph uses LinearRecurrenceNew, not an op of this TensorFlow" in done.stderr
    assert "tf.load_op_library" in done.stderr and "complete" not in done.stderr


def test_a_compat_v1_graph_with_cond_v2_is_recorded_as_tensorflow_computes_it(tmp_path):
    """TF1 code run on TF 2 (control flow v2): dropout and batch normalisation under `cond_v2`,
    whose branches hold `OptionalFromValue` and `OptionalNone` (the intermediates kept for the
    gradient). What the import accepts as only computing, the fetch accepts too: one rule,
    read from TensorFlow's definitions of the ops. Checked against TensorFlow's own tensors."""
    import numpy as np

    from tests.conftest import randomise, record_with_cli

    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        training = v1.placeholder_with_default(False, [], name="training")
        h = v1.layers.dropout(x, 0.3, training=training)
        h = v1.layers.batch_normalization(h, training=training)
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(4), tf.unstack(h, axis=1), dtype=tf.float32)
        loss = tf.reduce_mean(v1.layers.dense(outputs[-1], 1) ** 2)
        v1.train.AdamOptimizer().minimize(loss, global_step=v1.train.get_or_create_global_step())
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        randomise(session, graph)
        v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    kinds = {n.op for f in graph.as_graph_def().library.function for n in f.node_def}
    assert {"OptionalFromValue", "OptionalNone"} <= kinds
    xs = np.random.RandomState(1).randn(4, STEPS, FEATURES).astype(np.float32)
    rec = record_with_cli(tmp_path / "model.ckpt", {"x": xs}, tmp_path / "rec")
    (cell,) = rec.cells
    splits = [
        graph.get_tensor_by_name(f"{cell}/split{'' if k == 0 else f'_{k}'}:{g}")
        for k in range(STEPS)
        for g in range(4)
    ]
    want = np.array(session.run(splits, {x: xs})).reshape(STEPS, 4, len(xs), 4)
    for g, label in enumerate("ijfo"):
        np.testing.assert_array_equal(
            rec.gate_array(cell, label, "preactivation"), want[:, g].transpose(1, 0, 2)
        )
    np.testing.assert_array_equal(
        rec.state_array(cell, "h"), np.stack(session.run(outputs, {x: xs}), axis=1)
    )

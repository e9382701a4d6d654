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

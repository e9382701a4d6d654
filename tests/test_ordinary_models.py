"""Ordinary models are not refused: what TF1 training scripts save beside their cells.

A checkpoint holds the whole training graph: summaries of the loss and the weights (and of
a constant learning rate), the optimizer's update ops, the gradient stacks of a `while`
loop, and, in TF1 code run on TensorFlow 2, `If` ops whose branches hold `OptionalFromValue`
(dropout and batch normalization with `training=is_training`). None of it runs while the
graph is imported (TensorFlow evaluates only constant subgraphs), and none of it lies on
the path to the gates, so each records, and the gates equal a float64 numpy cell.
"""

from __future__ import annotations

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import CONFIGS, build, save
from tests.test_replay import control_flow, expected
from tracer._tf import tf, v1
from tracer.cli import main

X = np.random.RandomState(5).randn(6, 5, 4).astype(np.float32)


def _training(config, normalized: bool):
    """dynamic_rnn of `config`'s cell with a loss, summaries, and a clipped-SGD update, as
    TF1 tutorials wrote them; with `normalized`, dropout and batch normalization on the
    logits under `is_training` (a placeholder with default False)."""

    def body(x):
        outputs, final = v1.nn.dynamic_rnn(config.make(), x, dtype=tf.float32)
        logits = v1.layers.dense(outputs[:, -1], 2, name="readout")
        if normalized:
            training = v1.placeholder_with_default(False, [], name="is_training")
            logits = v1.layers.batch_normalization(
                v1.layers.dropout(logits, 0.5, training=training), training=training
            )
        loss = tf.reduce_mean(tf.square(logits))
        rate = tf.constant(0.1, name="learning_rate")
        v1.summary.scalar("loss", loss)
        # a summary of a constant: constant-evaluable, and harmless
        v1.summary.scalar("learning_rate", rate)
        for var in v1.trainable_variables():
            v1.summary.histogram(var.op.name, var)
        v1.summary.merge_all()
        grads, variables = zip(
            *v1.train.GradientDescentOptimizer(rate).compute_gradients(loss), strict=True
        )
        clipped, _ = tf.clip_by_global_norm(grads, 5.0)
        step = v1.train.get_or_create_global_step()
        v1.train.GradientDescentOptimizer(rate).apply_gradients(
            zip(clipped, variables, strict=True), global_step=step
        )
        return [outputs, *tf.nest.flatten(final)]

    return body


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("normalized", [False, True], ids=["summaries", "dropout-batchnorm"])
@pytest.mark.parametrize("name", ["BasicLSTMCell", "GRUCell"])
def test_a_training_checkpoint_with_summaries_and_its_optimizer_records(
    name, normalized, cf, tmp_path, capsys
):
    config = CONFIGS[name]
    with control_flow(cf):
        built = build(_training(config, normalized))
    path = save(built, "checkpoint", tmp_path)
    types = {op.type for op in built.graph.get_operations()}
    assert {"ScalarSummary", "HistogramSummary", "MergeSummary"} <= types
    assert ("StackV2" in types) == (cf == "v1") and ("If" in types or "StatelessIf" in types) == (
        normalized and cf == "v2"
    )
    np.save(tmp_path / "x.npy", X)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    rec = Recording(tmp_path / "rec")
    (cell,) = rec.cells
    weights = built.weights[next(k for k in built.weights if k.endswith(config.scope_name))]
    units = config.make().output_size
    zeros = {
        "h0": np.zeros((len(X), units), np.float32),
        **({"c0": np.zeros((len(X), units), np.float32)} if "LSTM" in name else {}),
    }
    ref = expected(config, weights, {"x": X, **zeros})
    for g, gate in enumerate(rec.gates(cell)):
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "activation"), ref["activation"][:, :, g], atol=1e-5
        )

"""Models that read their data through a queue or a tf.data iterator, as TF1 scripts built them.

TensorFlow's PTB word-LM tutorial kept the corpus as a constant and read batches through
`range_input_producer`'s queue and strided slices (`reader.ptb_producer`), with summaries and
clipped SGD beside; from TF 1.4 on, scripts and Estimator `input_fn`s read `(features, labels)`
from a `tf.data` iterator. Their checkpoints hold the pipeline. The user feeds the tensor the
pipeline produces; nothing upstream of it runs (no dequeue: no hang), `inspect` names it, and
without it `record` refuses in one line. Gates equal a float64 numpy cell on what was fed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import CONFIGS, randomise
from tests.test_replay import expected
from tracer._tf import tf, v1
from tracer.cli import main

BATCH, STEPS, VOCAB, EMBED = 4, 5, 11, 3
CONFIG = CONFIGS["BasicLSTMCell"]


def _lm(inputs, summaries: bool):
    """The PTB model's body: embedding, BasicLSTMCell under static_rnn, softmax loss, clipped SGD."""
    embedding = v1.get_variable("embedding", [VOCAB, EMBED])
    embedded = tf.nn.embedding_lookup(embedding, inputs)
    outputs, _ = v1.nn.static_rnn(CONFIG.make(), tf.unstack(embedded, axis=1), dtype=tf.float32)
    logits = v1.layers.dense(tf.stack(outputs, 1), VOCAB, name="softmax")
    loss = tf.reduce_mean(logits**2)
    if summaries:
        v1.summary.scalar("loss", loss)
    grads, _ = tf.clip_by_global_norm(tf.gradients(loss, v1.trainable_variables()), 5.0)
    v1.train.GradientDescentOptimizer(1.0).apply_gradients(
        zip(grads, v1.trainable_variables(), strict=True)
    )
    return embedding


def _build(how: str, root):
    """A checkpoint of the language model fed by `how`'s pipeline; (path, entry tensor name, weights)."""
    graph = tf.Graph()
    corpus = np.random.RandomState(0).randint(0, VOCAB, 400).astype(np.int32)
    with graph.as_default():
        if how.startswith("queue"):  # reader.ptb_producer
            data = tf.reshape(tf.convert_to_tensor(corpus[: BATCH * 100]), [BATCH, 100])
            i = v1.train.range_input_producer(100 // STEPS - 1, shuffle=False).dequeue()
            x = tf.strided_slice(data, [0, i * STEPS], [BATCH, (i + 1) * STEPS], name="input_x")
            x.set_shape([BATCH, STEPS])
            entry = x
        else:
            sequences = corpus[: 40 * STEPS].reshape(40, STEPS)
            if how == "one-shot":
                dataset = (
                    tf.data.Dataset.from_tensor_slices(sequences).shuffle(8).batch(BATCH).repeat()
                )
                entry = v1.data.make_one_shot_iterator(dataset).get_next()
            elif how == "initializable":  # its file name fed when it is initialized
                files = v1.placeholder(tf.string, [None], name="filenames")
                dataset = (
                    tf.data.TFRecordDataset(files)
                    .map(lambda r: tf.io.parse_tensor(r, tf.int32))
                    .batch(BATCH)
                )
                entry = v1.data.make_initializable_iterator(dataset).get_next()
                entry.set_shape([None, STEPS])
            else:  # an Estimator input_fn: features as a dict
                dataset = tf.data.Dataset.from_tensor_slices(
                    ({"tokens": sequences}, sequences[:, 0])
                ).batch(BATCH)
                features, _ = v1.data.make_one_shot_iterator(dataset).get_next()
                entry = features["tokens"]
        with v1.variable_scope("Model"):
            _lm(entry, summaries=how == "queue with summaries")
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        weights = randomise(session, graph)
        path = v1.train.Saver().save(session, str(root / "model.ckpt"))
    return path, entry.name, weights


@pytest.mark.parametrize(
    "how", ["queue", "queue with summaries", "one-shot", "initializable", "input_fn"]
)
def test_a_pipeline_model_records_with_the_pipelines_tensor_fed(how, tmp_path, capsys):
    path, entry, weights = _build(how, tmp_path)
    name = entry.removesuffix(":0")
    assert main(["inspect", path, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    (given,) = described["inputs"]
    assert (
        given["tensor"] == entry
        and ("queue" if how.startswith("queue") else "tf.data iterator") in given["from"]
    )
    assert "record" not in described.get("refused_without_allow_unsafe_ops", {}), described
    out = tmp_path / "rec"
    # no feed: one line, never a dequeue
    assert main(["record", path, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and f"the cells read their inputs from {entry} " in err
        and f"--feed {name}=FILE.npy" in err
    ), err
    assert not out.exists()
    # the queue fixes batches of 4: the last is padded
    tokens = np.random.RandomState(1).randint(0, VOCAB, (2 * BATCH - 1, STEPS)).astype(np.int32)
    np.save(tmp_path / "tokens.npy", tokens)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"{name}={tmp_path / 'tokens.npy'}",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    rec = Recording(out)
    (cell,) = rec.cells
    # what the cell reads: the embedded tokens
    x = tf.train.load_checkpoint(path).get_tensor("Model/embedding")[tokens]
    units = CONFIG.make().output_size
    ref = expected(
        CONFIG,
        weights[cell],
        {
            "x": x,
            "h0": np.zeros((len(x), units), np.float32),
            "c0": np.zeros((len(x), units), np.float32),
        },
    )
    for g, gate in enumerate(rec.gates(cell)):
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "activation"), ref["activation"][:, :, g], atol=1e-5
        )

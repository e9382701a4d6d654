"""Logging gates while a TF1 model trains (`tracer.GateLoggingHook`): the gates logged at global
step s are those of that step's batch under the weights read before its update (checked against
the same cells run in an inference graph with those weights), for `static_rnn` and `dynamic_rnn`,
in `MonitoredTrainingSession` and in a hand-written loop; a graph without a global step gets one
line.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from recorders import Series
from recorders.errors import SelectionError
from tracer._tf import tf, v1
from tracer.run.hook import run_with

pytestmark = pytest.mark.e2e

STEPS, FEATURES, UNITS = 5, 3, 4
BATCHES = [np.random.RandomState(k).randn(8, STEPS, FEATURES).astype(np.float32) for k in range(5)]
LABELS = [np.random.RandomState(10 + k).randint(0, 2, 8).astype(np.float32) for k in range(5)]


def network(x, loop: bool):
    cell = v1.nn.rnn_cell.LSTMCell(UNITS, name="lstm_cell")
    if loop:
        outputs, _ = v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        last = outputs[:, -1]
    else:
        last = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]
    return tf.squeeze(v1.layers.dense(last, 1, name="head"), 1)


def training_graph(loop: bool):
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        y = v1.placeholder(tf.float32, [None], name="y")
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=network(x, loop))
        )
        train = v1.train.AdamOptimizer(0.1).minimize(
            loss, global_step=v1.train.get_or_create_global_step()
        )
    return graph, x, y, train


def inference_gates(values: dict, x: np.ndarray, loop: bool):
    """The same cells in an inference graph holding `values` (variable name -> array): a trace."""
    graph = tf.Graph()
    with graph.as_default():
        inputs = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        network(inputs, loop)
        session = v1.Session(graph=graph)
        for var in v1.global_variables():
            var.load(values[var.op.name], session)
    return tracer.trace(tracer.from_session(session), {"x": x})


@pytest.mark.parametrize("loop", [False, True])
def test_the_gates_logged_are_those_of_the_step_batch_before_its_update(loop, tmp_path):
    graph, x, y, train = training_graph(loop)
    hook = tracer.GateLoggingHook(tmp_path / "log", every_n_steps=2)
    with graph.as_default():
        hook.begin()
        names = [v.op.name for v in v1.global_variables()]
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        before = {}
        for k, (bx, by) in enumerate(zip(BATCHES, LABELS, strict=True)):
            before[k] = dict(zip(names, session.run(v1.global_variables()), strict=True))
            run_with(hook, session, train, {x: bx, y: by})
    assert hook.logged == [0, 2, 4]
    series = Series(tmp_path / "log")
    assert (series.key, series.complete) == ("global_step", [0, 2, 4])
    for step in (0, 4):
        want = inference_gates(before[step], BATCHES[step], loop)
        rec = series.recording(step)
        (cell,) = rec.cells
        ct = want[cell]
        for g, gate in enumerate(ct.cell.gates):
            np.testing.assert_allclose(
                rec.gate_array(cell, gate, "activation"),
                ct.activation[:, :, g],
                rtol=1e-5,
                atol=1e-5,
            )
        for state in ct.cell.spec.states:
            np.testing.assert_allclose(
                rec.state_array(cell, state), ct.states[state], rtol=1e-5, atol=1e-5
            )


def test_monitored_training_session_and_a_graph_without_a_global_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    graph, x, y, train = training_graph(False)
    hook = tracer.GateLoggingHook(tmp_path / "log", every_n_steps=3, tensorboard=tmp_path / "tb")
    with graph.as_default():
        with v1.train.MonitoredTrainingSession(hooks=[hook], save_checkpoint_secs=None) as session:
            for bx, by in zip(BATCHES, LABELS, strict=True):
                session.run(train, {x: bx, y: by})
    assert hook.logged == [0, 3]
    assert Series(tmp_path / "log").complete == [0, 3]
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    cell = Series(tmp_path / "log").recording(0).cells[0]
    assert [e.step for e in events.Histograms(f"gatetrace/{cell}/f/activation")] == [0, 3]
    plain = tf.Graph()
    with plain.as_default():
        inputs = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        network(inputs, False)
        with pytest.raises(SelectionError, match="the graph has no global step"):
            tracer.GateLoggingHook(tmp_path / "other").begin()


def test_summaries_logged_in_the_training_run_match_the_full_gates(tmp_path):
    """Two hooks on the same runs, one logging every value, one summary statistics computed in
    the training graph: every statistic against numpy float64 over the full one's values."""
    from recorders import Bins
    from tests.test_summary import assert_matches

    graph, x, y, train = training_graph(False)
    full = tracer.GateLoggingHook(tmp_path / "full", every_n_steps=2)
    summary = tracer.GateLoggingHook(tmp_path / "summary", every_n_steps=2, summary=Bins())
    with graph.as_default():
        with v1.train.MonitoredTrainingSession(
            hooks=[full, summary], save_checkpoint_secs=None
        ) as session:
            for bx, by in zip(BATCHES, LABELS, strict=True):
                session.run(train, {x: bx, y: by})
    assert full.logged == summary.logged == [0, 2, 4]
    for step in (0, 4):
        a, b = (Series(tmp_path / n).recording(step) for n in ("full", "summary"))
        assert b.kind == "summary"
        assert assert_matches(a.path, b.path) > 0


def test_a_step_left_without_its_manifest_by_a_killed_run_is_logged_anew(tmp_path):
    graph, x, y, train = training_graph(False)
    (tmp_path / "log" / "global_step=0" / "gates").mkdir(
        parents=True
    )  # killed while writing step 0
    (tmp_path / "log" / "series.json").write_text(
        '{"kind": "series", "key": "global_step", "values": null, "source": "training"}'
    )
    (tmp_path / "log" / "global_step=0" / "gates" / "part-0.parquet").write_bytes(b"half")
    hook = tracer.GateLoggingHook(tmp_path / "log", every_n_steps=3)
    with graph.as_default():
        with v1.train.MonitoredTrainingSession(hooks=[hook], save_checkpoint_secs=None) as session:
            for bx, by in zip(BATCHES[:4], LABELS[:4], strict=True):
                session.run(train, {x: bx, y: by})
    assert hook.logged == [0, 3] and Series(tmp_path / "log").complete == [0, 3]
    assert not (tmp_path / "log" / "global_step=0" / "gates" / "part-0.parquet").exists()

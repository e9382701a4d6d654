"""Logging gates while a Keras model trains (`tracer.keras.GateLogger`), Keras 3 and tf-keras:
the gates logged at epoch k equal a recording of the model saved at epoch k on the same probe;
a restarted run logs after the epochs there and refuses one already logged; a failed write stops
training or is reported once; TensorBoard's own event reader reads back the summaries written.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from recorders import Bins, Recording, Series
from recorders.errors import FeedError, OutputExistsError, RecordingError, SelectionError
from recorders.read.analysis import saturation, saturation_across
from tests.test_keras import keras_module
from tracer.keras import GateLogger

pytestmark = pytest.mark.e2e

STEPS, FEATURES = 6, 3
RNG = np.random.RandomState(0)
X = RNG.randn(48, STEPS, FEATURES).astype(np.float32)
Y = RNG.randint(0, 2, 48).astype(np.float32)
PROBE = np.random.RandomState(1).randn(9, STEPS, FEATURES).astype(np.float32)


def model_of(keras):
    keras.utils.set_random_seed(0)
    x = keras.Input((STEPS, FEATURES), name="x")
    h = keras.layers.LSTM(4, return_sequences=True, name="lstm")(x)
    out = keras.layers.Dense(1)(keras.layers.GRU(3, name="gru")(h))
    model = keras.Model(x, out)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    return model


def same_gates(logged: Recording, alone: Recording) -> None:
    """Every gate of every cell logged equals the recording made apart, to float32 rounding."""
    for cell in alone.cells:
        for gate in alone.gates(cell):
            np.testing.assert_allclose(
                logged.gate_array(cell, gate), alone.gate_array(cell, gate), rtol=1e-6, atol=1e-7
            )


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_the_gates_logged_at_each_epoch_are_those_of_the_model_saved_then(framework, tmp_path):
    keras = keras_module(framework)
    model = model_of(keras)
    suffix = "keras" if framework == "keras3" else "h5"
    saved = keras.callbacks.ModelCheckpoint(str(tmp_path / f"model-{{epoch:02d}}.{suffix}"))
    logger = GateLogger(PROBE, tmp_path / "log")
    model.fit(X, Y, epochs=3, batch_size=16, verbose=0, callbacks=[saved, logger])
    assert logger.logged == [1, 2, 3]
    series = Series(tmp_path / "log")
    assert (series.key, series.complete) == ("epoch", [1, 2, 3])
    for epoch in (1, 3):
        with tracer.load_model(tmp_path / f"model-{epoch:02d}.{suffix}") as m:
            tracer.record(m, PROBE, tmp_path / f"alone{epoch}")
        same_gates(series.recording(epoch), Recording(tmp_path / f"alone{epoch}"))
    first, last = (series.recording(e).gate_array("lstm", "f") for e in (1, 3))
    assert not np.allclose(first, last)  # training moved them


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_the_gates_logged_by_batch_are_those_of_the_weights_after_that_batch(framework, tmp_path):
    keras = keras_module(framework)
    model = model_of(keras)
    weights = {}

    class Keep(keras.callbacks.Callback):
        """The weights after each batch (the logger records the same model at that moment)."""

        def on_train_batch_end(self, batch, logs=None):
            weights[int(np.asarray(self.model.optimizer.iterations))] = self.model.get_weights()

    logger = GateLogger(PROBE, tmp_path / "log", every=2, by="batch")
    # 48 sequences in batches of 16: 3 batches an epoch, 6 in all; every 2nd logged
    model.fit(X, Y, epochs=2, batch_size=16, verbose=0, callbacks=[logger, Keep()])
    assert logger.logged == [2, 4, 6] and sorted(weights) == [1, 2, 3, 4, 5, 6]
    series = Series(tmp_path / "log")
    assert (series.key, series.complete, series.epochs) == ("batch", [2, 4, 6], {2: 1, 4: 2, 6: 2})
    frame = series.gate_frame(cells=["lstm"], gates=["f"], columns=["activation"])
    assert list(frame.columns[:2]) == ["batch", "epoch"]
    assert frame.groupby("batch")["epoch"].first().to_dict() == {2: 1, 4: 2, 6: 2}
    for n in (2, 6):
        again = model_of(keras)
        again.set_weights(weights[n])
        tracer.record(again, PROBE, tmp_path / f"alone{n}")
        same_gates(series.recording(n), Recording(tmp_path / f"alone{n}"))
    assert not np.allclose(*(series.recording(n).gate_array("lstm", "f") for n in (2, 6)))
    sat = saturation_across(series)
    assert list(sat.columns[:2]) == ["batch", "epoch"] and sorted(sat["batch"].unique()) == [
        2,
        4,
        6,
    ]
    # a restarted run whose optimizer starts again at 0 would log batch 2 again: refused in one line
    with pytest.raises(OutputExistsError, match="batch 2 is already logged"):
        model_of(keras).fit(
            X,
            Y,
            epochs=1,
            batch_size=16,
            verbose=0,
            callbacks=[GateLogger(PROBE, tmp_path / "log", every=2, by="batch")],
        )


def test_a_restarted_run_logs_after_the_epochs_there_and_refuses_one_logged(tmp_path):
    keras = keras_module("keras3")
    model = model_of(keras)
    model.fit(
        X, Y, epochs=2, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "log", summary=Bins())]
    )
    model.fit(
        X,
        Y,
        initial_epoch=2,
        epochs=4,
        verbose=0,
        callbacks=[GateLogger(PROBE, tmp_path / "log", every=2, summary=Bins())],
    )
    series = Series(tmp_path / "log")
    assert series.complete == [1, 2, 4]
    assert series.recording(4).kind == "summary"
    with pytest.raises(OutputExistsError, match="epoch 1 is already logged"):
        model.fit(X, Y, epochs=1, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "log")])


def test_a_probe_the_model_cannot_take_is_refused_before_training(tmp_path):
    keras = keras_module("keras3")
    model = model_of(keras)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FeedError, match=r"expects shape \[None, 6, 3\], given \[5, 6, 4\]"):
        model.fit(
            X,
            Y,
            epochs=1,
            verbose=0,
            callbacks=[GateLogger(PROBE[:5, :, :2].repeat(2, axis=2), tmp_path / "log")],
        )
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert not (tmp_path / "log").exists()


def test_a_failed_write_stops_training_or_is_reported_once(tmp_path, monkeypatch, capsys):
    from tracer.run import training

    keras = keras_module("tf-keras")

    def full_disk(*args, **kwargs):
        raise RecordingError("cannot write: No space left on device")

    monkeypatch.setattr(training, "record", full_disk)
    model = model_of(keras)
    with pytest.raises(RecordingError, match="No space left"):
        model.fit(X, Y, epochs=2, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "a")])
    logger = GateLogger(PROBE, tmp_path / "b", on_error="warn")
    history = model.fit(X, Y, epochs=3, verbose=0, callbacks=[logger])
    assert len(history.history["loss"]) == 3 and logger.logged == []
    err = capsys.readouterr().err
    assert err.count("GateLogger could not log") == 1 and "training goes on" in err


def test_tensorboard_reads_back_the_gate_summaries(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    keras = keras_module("keras3")
    model = model_of(keras)
    logger = GateLogger(PROBE, tmp_path / "log", tensorboard=tmp_path / "tb")
    model.fit(X, Y, epochs=2, verbose=0, callbacks=[logger])
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0, "scalars": 0})
    events.Reload()
    series = Series(tmp_path / "log")
    for epoch in (1, 2):
        sat = saturation(series.recording(epoch))
        f = sat[(sat["cell"] == "lstm") & (sat["gate"] == "f")]
        right = {e.step: e.value for e in events.Scalars("gatetrace/lstm/f/right_saturated")}
        np.testing.assert_allclose(right[epoch], f["right"].mean(), rtol=1e-6)
        histo = {
            e.step: e.histogram_value for e in events.Histograms("gatetrace/lstm/f/activation")
        }[epoch]
        a = series.recording(epoch).gate_array("lstm", "f")
        assert histo.num == a.size and sum(histo.bucket) == a.size
        assert histo.min == a.min() and histo.max == a.max()
        want = np.histogram(a, np.linspace(0, 1, 21))[0]
        np.testing.assert_array_equal(histo.bucket[1:-1], want)


def test_an_epoch_left_unfinished_by_a_killed_run_is_logged_anew_not_continued(tmp_path):
    """A run killed while logging epoch 1 leaves its folder without a manifest (here: every part
    written, the manifest not yet); the restarted run, another model by then, logs epoch 1 from
    nothing: each key holds one model's gates."""
    import shutil

    keras = keras_module("keras3")
    killed = model_of(keras)
    killed.fit(X, Y, epochs=1, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "killed")])
    (tmp_path / "log").mkdir()
    shutil.copy(tmp_path / "killed" / "series.json", tmp_path / "log")
    shutil.copytree(tmp_path / "killed" / "epoch=1", tmp_path / "log" / "epoch=1")
    (tmp_path / "log" / "epoch=1" / "manifest.json").unlink()
    restarted = model_of(keras)
    restarted.fit(
        X[:16], Y[:16], epochs=1, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "log")]
    )
    tracer.record(restarted, PROBE, tmp_path / "alone")
    logged = Series(tmp_path / "log").recording(1)
    same_gates(logged, Recording(tmp_path / "alone"))
    other = Recording(tmp_path / "killed" / "epoch=1").gate_array("lstm", "f")
    assert not np.isclose(logged.gate_array("lstm", "f"), other).all(axis=(1, 2)).any()


def test_keys_no_reader_takes_are_refused_before_anything_is_written(tmp_path):
    from tracer.run.series import fresh_key

    with pytest.raises(SelectionError, match=r"whole numbers from 0 to 9,007,199,254,740,991"):
        fresh_key(str(tmp_path / "log"), "batch", 2**53, "GateLogger", "again")
    assert not (tmp_path / "log").exists()


def test_an_empty_probe_or_a_log_folder_that_is_a_link_before_training(tmp_path):
    keras = keras_module("keras3")
    model = model_of(keras)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FeedError, match="the probe holds no sequence"):
        model.fit(X, Y, epochs=1, verbose=0, callbacks=[GateLogger(PROBE[:0], tmp_path / "log")])
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert not (tmp_path / "log").exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")  # the user names a link to a new folder
    model.fit(X, Y, epochs=1, verbose=0, callbacks=[GateLogger(PROBE, tmp_path / "link")])
    assert Series(tmp_path / "empty").complete == [1]

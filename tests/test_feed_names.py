"""Feed names: `NAME:INDEX` must name an output the tensor or input has, and no input is fed twice."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS, build, run_cli, save, static_body

STEPS, FEATURES = 5, 3
# an index no placeholder or model input has: another, a negative one, 20 digits, a leading zero
WRONG = ("7", "-1", "12345678901234567890", "01")


def _one_line(done) -> str:
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gatetrace: error: ")
    return done.stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A checkpoint of an LSTMCell on placeholder x, a .tflite file of a Keras LSTM on input
    `seq` (its tensor `serving_default_seq`), and inputs for each."""
    from tests.test_keras import keras_module
    from tracer._tf import tf

    root = tmp_path_factory.mktemp("feeds")
    (root / "graph").mkdir()
    graph = save(
        build(static_body(CONFIGS["LSTMCell"]), steps=STEPS, features=FEATURES),
        "checkpoint",
        root / "graph",
    )
    keras = keras_module("tf-keras")
    seq = keras.Input((STEPS, FEATURES), batch_size=1, name="seq")
    model = keras.Model(seq, keras.layers.LSTM(4, return_sequences=True)(seq))
    lite = root / "lstm.tflite"
    lite.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    rng = np.random.RandomState(0)
    for name in ("a", "b"):
        np.save(root / f"{name}.npy", rng.randn(3, STEPS, FEATURES).astype(np.float32))
    return root, graph, lite


@pytest.mark.parametrize("index", WRONG)
def test_a_graph_feed_names_an_output_its_op_has(models, tmp_path, index):
    """`x:K` of a placeholder is refused in one line naming x and how to feed it (before: `x:-1`
    and `x:01` were taken as x:0, as TensorFlow reads them)."""
    root, graph, _ = models
    feed = f"x:{index}={root / 'a.npy'}"
    said = _one_line(run_cli("record", graph, "--feed", feed, "--out", str(tmp_path / "out")))
    assert f"feed 'x:{index}': " in said and "feed it as x (or x:0)" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["serving_default_seq", "seq"])
@pytest.mark.parametrize("index", WRONG)
def test_a_tflite_feed_names_its_input_or_its_input_0(models, tmp_path, name, index):
    """A .tflite input is one tensor: `serving_default_seq:7` (or `:-1`, or 20 digits, or the
    signature's `seq:01`) is refused in one line naming the input and how to feed it (before:
    each was taken as `:0`)."""
    root, _, lite = models
    feed = f"{name}:{index}={root / 'a.npy'}"
    said = _one_line(run_cli("record", str(lite), "--feed", feed, "--out", str(tmp_path / "out")))
    assert f"feed '{name}:{index}': " in said and f"feed it as {name} (or {name}:0)" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("second", ["x", "x:0"])
@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_an_input_fed_twice_is_refused_before_the_model_loads(
    models, tmp_path, monkeypatch, second, workers
):
    """`--feed x=a.npy --feed x=b.npy` (before: b.npy silently won), or x and x:0 (before:
    refused only once TensorFlow had loaded the model), is one line, before the model loads."""
    import tracer

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tracer, "load_model", loading)
    root, graph, _ = models
    a, b = root / "a.npy", root / "b.npy"
    feeds = ("--feed", f"x={a}", "--feed", f"{second}={b}")
    said = _one_line(run_cli("record", graph, *feeds, *workers, "--out", str(tmp_path / "out")))
    assert f"feed {second}={b} feeds the same input as x={a}: feed each input once" in said
    assert not (tmp_path / "out").exists()

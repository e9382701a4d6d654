"""`record --outputs` of Keras models (tf-keras and Keras 3, in memory and in their files) and
TensorFlow Lite files: the outputs named as Keras or the file names them, their values what the
model returned. Oracles: Keras' own call and `model.predict`, the Keras model whose weights no
longer read a held unit (as tests/test_hold_keras.py), and LiteRT's interpreter run on the file
one sequence at a time (`invoke`, `get_tensor`), a quantised output dequantised by the scale
and zero point the interpreter lists for it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import SelectionError
from tests.conftest import record_x
from tests.test_hold_keras import _edited
from tests.test_hold_keras import _model as held_model
from tests.test_keras import FRAMEWORKS, keras_module, randomise

T, FEATURES, VOCAB = 6, 3, 5


def _keras_model(framework: str, as_dict: bool = False):
    """LSTM -> GRU -> softmax: `logits` a dense layer at every step of the LSTM ([batch,
    steps, 5]), `probs` the softmax over the GRU's last state ([batch, 2])."""
    keras = keras_module(framework)
    x = keras.Input((T, FEATURES), name="x")
    lower = keras.layers.LSTM(4, return_sequences=True, name="lower")(x)
    upper = keras.layers.GRU(3, name="upper")(lower)
    probs = keras.layers.Dense(2, activation="softmax", name="probs")(upper)
    logits = keras.layers.Dense(VOCAB, name="logits")(lower)
    outputs = {"steps": logits, "p": probs} if as_dict else [logits, probs]
    model = keras.Model(x, outputs)
    randomise(model, seed=4)
    return model


def _x(n: int = 7, seed: int = 1) -> np.ndarray:
    return np.random.RandomState(seed).uniform(-1, 1, (n, T, FEATURES)).astype(np.float32)


def _values(rec: Recording, name: str) -> np.ndarray:
    """An output as [examples, steps, units] (steps left out where it is not a sequence)."""
    frame = rec.output_frame(name)
    keys = [k for k in ("example", "step", "unit") if k in frame.columns]
    frame = frame.sort_values(keys)
    shape = [frame[k].nunique() for k in keys]
    return frame["value"].to_numpy().reshape(shape)


@pytest.mark.parametrize(
    ("framework", "where"),
    [("keras3", "memory"), ("keras3", ".keras"), ("tf-keras", "memory"), ("tf-keras", ".h5")],
)
def test_a_keras_models_outputs_are_what_keras_returns(framework, where, tmp_path):
    model, x = _keras_model(framework), _x()
    out = tmp_path / "run"
    if where == "memory":
        tracer.record(model, {"x": x}, out, outputs=("logits", "probs"), batch_size=4)
    else:
        path = tmp_path / f"model{where}"
        model.save(path)
        done = record_x(path, x, out, "--outputs", "logits,probs", "--batch-size", "4")
        assert done.returncode == 0, done.stderr
    logits, probs = model.predict(x, verbose=0)
    rec = Recording(out)
    assert rec.outputs == ["logits", "probs"]
    # (batches of 4 against predict's one of 7: the kernels may round the last bit otherwise)
    np.testing.assert_allclose(_values(rec, "logits"), logits, atol=1e-6)
    np.testing.assert_allclose(_values(rec, "probs"), probs, atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outputs"] == [
        {"name": "logits", "units": VOCAB, "sequence": True, "dtype": "float32", "steps": T},
        {"name": "probs", "units": 2, "sequence": False, "dtype": "float32"},
    ]
    assert manifest["rows"]["outputs"] == len(x) * (T * VOCAB + 2)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_keras_model_returning_a_dict_names_its_outputs_by_its_keys_too(framework, tmp_path):
    model, x = _keras_model(framework, as_dict=True), _x()
    tracer.record(model, x, tmp_path / "run", outputs=("steps", "probs"))
    returned = model(x, training=False)
    rec = Recording(tmp_path / "run")
    np.testing.assert_allclose(_values(rec, "steps"), np.asarray(returned["steps"]), atol=1e-6)
    np.testing.assert_allclose(_values(rec, "probs"), np.asarray(returned["p"]), atol=1e-6)
    with pytest.raises(SelectionError, match="--outputs: steps and logits name the same output"):
        tracer.record(model, x, tmp_path / "twice", outputs=("steps", "logits"))
    assert not (tmp_path / "twice").exists()


def test_steps_cut_a_keras_output_along_the_cells_steps(tmp_path):
    """--steps 1:3 keeps steps 1 and 2 of the logits, as of the cells (both run 6 steps)."""
    model, x = _keras_model("keras3"), _x()
    steps = tracer.Selection(steps=(1, 3))
    tracer.record(model, x, tmp_path / "run", outputs=("logits",), selection=steps)
    rec = Recording(tmp_path / "run")
    assert sorted(set(rec.output_frame("logits")["step"])) == [1, 2]
    np.testing.assert_allclose(
        _values(rec, "logits"), model.predict(x, verbose=0)[0][:, 1:3], atol=1e-6
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_held_keras_models_outputs_are_those_of_the_model_whose_weights_no_longer_read_the_unit(
    framework, tmp_path
):
    """lower:h:1=0: the upper layer's outputs are those of the model with unit 1's rows of the
    lower layer's recurrent kernel and of the upper layer's kernel zeroed, run by Keras; the
    lower layer's are that model's but for unit 1, held at 0."""
    x = _x(5)
    model = held_model(framework, "LSTM")
    hold = tracer.parse_hold("lower:h:1=0")
    tracer.record(model, x, tmp_path / "held", outputs=("lower", "upper"), holds=(hold,))
    tracer.record(model, x, tmp_path / "plain", outputs=("upper",))
    plain = np.asarray(model(x, training=False)[1])
    lower, upper = (np.asarray(v) for v in _edited(model, 1)(x, training=False))
    rec = Recording(tmp_path / "held")
    np.testing.assert_allclose(_values(rec, "upper"), upper, atol=2e-6)
    held = _values(rec, "lower")
    assert (held[..., 1] == 0).all()
    others = [u for u in range(lower.shape[-1]) if u != 1]
    np.testing.assert_allclose(held[..., others], lower[..., others], atol=2e-6)
    np.testing.assert_allclose(_values(Recording(tmp_path / "plain"), "upper"), plain, atol=1e-6)
    assert np.abs(plain - upper).max() > 1e-3  # the hold matters


def _one_line(done, said: str) -> None:
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr, done.stderr


def test_a_keras_output_that_cannot_be_recorded_is_one_line_before_anything_is_written(
    tmp_path,
):
    keras = keras_module("keras3")
    x = keras.Input((T, FEATURES), name="x")
    sequence, h, _ = keras.layers.LSTM(4, return_sequences=True, return_state=True, name="lstm")(x)
    grid = keras.layers.Reshape((T, 2, 2), name="grid")(sequence)
    path = tmp_path / "model.keras"
    keras.Model(x, [sequence, h, grid]).save(path)
    for names, said in (
        (
            "nothing",
            f"--outputs nothing: {path} has no output of this name; its outputs are lstm, grid",
        ),
        ("lstm", "--outputs lstm: Keras lists 2 of the outputs of"),
        (
            "grid",
            "--outputs grid: expected numbers [batch], [batch, units] or [batch, steps, units]",
        ),
    ):
        _one_line(record_x(path, _x(), tmp_path / "run", "--outputs", names), said)
        assert not (tmp_path / "run").exists()


# TensorFlow Lite files: a tf-keras model of batch 1 (as recurrent layers are converted),
# converted as it is and for full-integer arithmetic with int8 inputs and outputs


def _lite_source():
    """`lower` [1, T, 4], `probs` [1, 2], and `by_step`, the lower layer's outputs time-major
    ([T, 1, 4])."""
    keras = keras_module("tf-keras")
    x = keras.Input((T, FEATURES), batch_size=1, name="x")
    lower = keras.layers.LSTM(4, return_sequences=True, name="lower")(x)
    upper = keras.layers.LSTM(3, name="upper")(lower)
    by_step = _time_major("tf-keras")(name="by_step")(lower)
    model = keras.Model(x, [lower, keras.layers.Dense(2, name="probs")(upper), by_step])
    randomise(model, seed=6)
    return model


@pytest.fixture(scope="module")
def lite_files(tmp_path_factory):
    from tracer._tf import tf

    root, model = tmp_path_factory.mktemp("lite_outputs"), _lite_source()
    (root / "float.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.RandomState(0)
    converter.representative_dataset = lambda: (
        [rng.uniform(-1, 1, (1, T, FEATURES)).astype(np.float32)] for _ in range(30)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    (root / "int8.tflite").write_bytes(converter.convert())
    return root


def _interpreter(path):
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    it.allocate_tensors()
    return it


def _run_each(path, x: np.ndarray) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The interpreter's outputs, each sequence invoked alone in an interpreter of its own (a
    fused op keeps its state between invocations), by tensor name, examples first (the
    time-major `by_step`, [T, 1, 4], transposed); its output details."""
    details = _interpreter(path).get_output_details()
    time_major = _signature_names(path)["by_step"]
    got: dict[str, list[np.ndarray]] = {d["name"]: [] for d in details}
    for row in x:
        it = _interpreter(path)
        it.set_tensor(it.get_input_details()[0]["index"], row[None])
        it.invoke()
        for d in details:
            value = it.get_tensor(d["index"])
            if d["name"] == time_major:
                assert value.shape == (T, 1, 4)
            got[d["name"]].append(value[:, 0] if d["name"] == time_major else value[0])
    return {k: np.stack(v) for k, v in got.items()}, details


def _signature_names(path) -> dict[str, str]:
    """Each output's tensor name by its signature's name."""
    it = _interpreter(path)
    runner = it.get_signature_runner()
    return {k: v["name"] for k, v in runner.get_output_details().items()}


def test_a_tflite_files_outputs_are_what_its_interpreter_returns(lite_files, tmp_path):
    """One output named by its signature's name, the other by its tensor's: the values are
    the interpreter's own, bit for bit."""
    path = lite_files / "float.tflite"
    signed = _signature_names(path)
    # (the layers' names, as the converter gives them)
    assert sorted(signed) == ["by_step", "lower", "probs"]
    lower, probs = signed["lower"], "probs"
    x = _x(3)
    done = record_x(path, x, tmp_path / "run", "--outputs", f"{lower},{probs}")
    assert done.returncode == 0, done.stderr
    own, _ = _run_each(path, x)
    rec = Recording(tmp_path / "run")
    assert rec.outputs == [lower, probs]
    np.testing.assert_array_equal(_values(rec, lower), own[lower])
    np.testing.assert_array_equal(_values(rec, probs), own[signed[probs]])
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [o["dtype"] for o in manifest["outputs"]] == ["float32", "float32"]
    assert manifest["outputs"][0]["steps"] == T and not manifest["outputs"][1]["sequence"]


def test_a_quantised_tflite_output_is_dequantised_by_its_scale_and_zero_point(lite_files, tmp_path):
    path = lite_files / "int8.tflite"
    signed = _signature_names(path)
    names = sorted(signed)  # by_step, lower, probs: the time-major one too
    codes = np.random.RandomState(2).randint(-100, 100, (3, T, FEATURES)).astype(np.int8)
    done = record_x(path, codes, tmp_path / "run", "--outputs", ",".join(names))
    assert done.returncode == 0, done.stderr
    own, details = _run_each(path, codes)
    rec = Recording(tmp_path / "run")
    described = json.loads((tmp_path / "run" / "manifest.json").read_text())["outputs"]
    for name, entry in zip(names, described, strict=True):
        d = next(d for d in details if d["name"] == signed[name])
        scale, zero = d["quantization"]
        assert d["dtype"] is np.int8 and scale > 0
        expected = (own[signed[name]].astype(np.float64) - zero) * scale
        np.testing.assert_allclose(_values(rec, name), expected, rtol=1e-6, atol=0)
        assert entry["dtype"] == (
            f"float32 dequantised from int8 (scale {float(np.float32(scale))!r}, zero point {zero})"
        )
    assert len(np.unique(_values(rec, names[0]))) > 3  # (not one value throughout)


def test_round_bits_leaves_a_dequantised_tflite_output_exact(lite_files, tmp_path):
    """--round-bits 3: an output dequantised from int8 codes is not rounded (at most 256
    exact values): each value is the interpreter's own code dequantised, in float32, and the
    code is recovered from it (was: rounded to 3 bits, codes lost)."""
    path = lite_files / "int8.tflite"
    signed = _signature_names(path)
    codes = np.random.RandomState(3).randint(-100, 100, (3, T, FEATURES)).astype(np.int8)
    done = record_x(path, codes, tmp_path / "run", "--outputs", "probs", "--round-bits", "3")
    assert done.returncode == 0, done.stderr
    own, details = _run_each(path, codes)
    d = next(d for d in details if d["name"] == signed["probs"])
    scale, zero = d["quantization"]
    rec = Recording(tmp_path / "run")
    assert rec.rounding is not None and rec.rounding.bits == 3
    got = _values(rec, "probs")
    want = (own[signed["probs"]].astype(np.int32) - zero).astype(np.float32) * np.float32(scale)
    np.testing.assert_array_equal(got, want)
    recovered = np.rint(got.astype(np.float64) / np.float32(scale)) + zero
    np.testing.assert_array_equal(recovered, own[signed["probs"]])
    assert len(np.unique(got)) > 3  # (not one value throughout)
    rec.check()


def test_a_tflite_output_that_is_not_there_is_one_line(lite_files, tmp_path):
    path = lite_files / "float.tflite"
    signed = _signature_names(path)
    done = record_x(path, _x(2), tmp_path / "run", "--outputs", "logits")
    _one_line(done, f"--outputs logits: {path} has no output of this name; its outputs are ")
    for name, tensor in signed.items():
        assert f"{name} ({tensor})" in done.stderr
    assert not (tmp_path / "run").exists()


# Time-major outputs, [steps, batch, units]: a layer of the test's own transposes the logits


def _time_major(framework: str):
    """The layer that puts an output's steps first: [batch, steps, units] -> [steps, batch, units]."""
    keras = keras_module(framework)
    if framework == "keras3":
        swap = keras.ops.transpose
    else:
        from tracer._tf import tf

        swap = tf.transpose

    class TimeMajor(keras.layers.Layer):
        def call(self, x):
            return swap(x, (1, 0, 2))

    return TimeMajor


def _time_major_model(framework: str, steps: int | None, batch: int | None = None):
    """LSTM -> dense at every step -> `by_step`, the logits time-major ([steps, batch, 5]);
    `probs` the softmax of the last step's, batch first."""
    keras = keras_module(framework)
    x = keras.Input((steps, FEATURES), batch_size=batch, name="x")
    lower = keras.layers.LSTM(4, return_sequences=True, name="lower")(x)
    logits = keras.layers.Dense(VOCAB, name="logits")(lower)
    by_step = _time_major(framework)(name="by_step")(logits)
    probs = keras.layers.Dense(2, activation="softmax", name="probs")(keras.layers.LSTM(3)(lower))
    model = keras.Model(x, [by_step, probs])
    randomise(model, seed=8)
    return model


@pytest.mark.parametrize(
    ("steps", "examples"),
    [(None, T), (None, T + 2), (T, T + 2)],
    ids=["steps-open-one-batch", "steps-open", "steps-fixed"],
)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_time_major_keras_output_as_long_as_the_batch_is_recorded_example_by_example(
    framework, steps, examples, tmp_path
):
    """[steps, batch, 5] recorded in batches of T, as many examples as steps (then a batch of
    2): each example's logits are the model's own call's, transposed (was: example and step
    swapped, silently, where the steps are as many as the batch; the steps fixed, refused)."""
    model, x = _time_major_model(framework, steps), _x(examples)
    tracer.record(model, x, tmp_path / "run", outputs=("by_step", "probs"), batch_size=T)
    by_step, probs = (np.asarray(v) for v in model(x, training=False))
    assert by_step.shape == (T, len(x), VOCAB)
    rec = Recording(tmp_path / "run")
    np.testing.assert_allclose(_values(rec, "by_step"), by_step.transpose(1, 0, 2), atol=1e-6)
    np.testing.assert_allclose(_values(rec, "probs"), probs, atol=1e-6)
    described = json.loads((tmp_path / "run" / "manifest.json").read_text())["outputs"][0]
    assert described["sequence"] and described.get("steps") == steps


def test_a_time_major_keras_output_of_a_fixed_batch_as_long_as_its_steps_is_one_line(tmp_path):
    """Inputs that fix the batch at T, the steps' number too: no other batch size can be fed
    to tell [steps, batch] from [batch, steps], so the output is refused, nothing written."""
    model = _time_major_model("keras3", T, batch=T)
    with pytest.raises(SelectionError) as refused:
        tracer.record(model, _x(T), tmp_path / "run", outputs=("by_step",))
    assert str(refused.value) == (
        f"--outputs by_step: its first two dimensions are both {T}, the batch size the model's "
        f"inputs fix, so which of them holds the examples cannot be told: name an output whose "
        f"steps are not {T}, or build the model with its inputs' batch size open (keras.Input "
        "without batch_size), which gatetrace feeds two batch sizes to tell them apart"
    )
    assert not (tmp_path / "run").exists()


def test_a_time_major_tflite_output_is_recorded_example_by_example(lite_files, tmp_path):
    """The file's interpreter runs one sequence at a time, its time-major output `by_step`
    [T, 1, 4]: the examples' dimension is the one of that size (was: refused, its first
    dimension not the batch). The values are the interpreter's own, transposed, bit for bit;
    the quantised file's, dequantised, are checked above."""
    path = lite_files / "float.tflite"
    x = _x(3)
    done = record_x(path, x, tmp_path / "run", "--outputs", "by_step")
    assert done.returncode == 0, done.stderr
    own, _ = _run_each(path, x)
    got = _values(Recording(tmp_path / "run"), "by_step")
    np.testing.assert_array_equal(got, own[_signature_names(path)["by_step"]])
    described = json.loads((tmp_path / "run" / "manifest.json").read_text())["outputs"][0]
    assert described["sequence"] and described["steps"] == T


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_telling_a_stateful_models_outputs_apart_leaves_the_state_it_carries(framework, tmp_path):
    """--carry-state: the call that tells which dimension holds the examples (on a batch of
    the first sequence) runs the stateful layer too; its state is put back, so the outputs
    are those of the model's own calls in order from the state it had, batch after batch."""
    keras = keras_module(framework)
    x = keras.Input(batch_shape=(2, T, FEATURES), name="x")
    gru = keras.layers.GRU(3, stateful=True, return_sequences=True, name="gru")
    model = keras.Model(x, gru(x))
    randomise(model, seed=5)
    xs = _x(6)
    own = [np.asarray(model(xs[k : k + 2], training=False)) for k in range(0, 6, 2)]
    gru.reset_states()  # (as the model was when it was first called)
    tracer.record(model, xs, tmp_path / "run", outputs=("gru",), carry_state=True)
    np.testing.assert_allclose(
        _values(Recording(tmp_path / "run"), "gru"), np.concatenate(own), atol=1e-6
    )


def test_a_tflite_output_whose_fixed_batch_is_as_long_as_its_steps_is_one_line(tmp_path):
    """A file converted with a batch of T, its steps T too: `lower` [T, T, 4] cannot be told
    [batch, steps] from [steps, batch] (its interpreter runs no other batch), so it is refused
    in one line and nothing is written; `probs` [T, 2] is recorded, each example's the
    interpreter's own."""
    from tracer._tf import tf

    keras = keras_module("tf-keras")
    x_in = keras.Input((T, FEATURES), batch_size=T, name="x")
    lower = keras.layers.LSTM(4, return_sequences=True, name="lower")(x_in)
    probs = keras.layers.Dense(2, name="probs")(keras.layers.LSTM(3, name="upper")(lower))
    model = keras.Model(x_in, [lower, probs])
    randomise(model, seed=7)
    path = tmp_path / "batch_t.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    x = _x(T)
    refused = record_x(path, x, tmp_path / "run", "--outputs", "lower")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("gatetrace: error: ")
    assert f"both {T}" in refused.stderr and "batch of 1" in refused.stderr, refused.stderr
    assert not (tmp_path / "run").exists()

    done = record_x(path, x, tmp_path / "probs", "--outputs", "probs")
    assert done.returncode == 0, done.stderr
    it = _interpreter(path)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    index = next(d["index"] for d in it.get_output_details() if d["shape"].tolist() == [T, 2])
    np.testing.assert_array_equal(
        _values(Recording(tmp_path / "probs"), "probs"), it.get_tensor(index)
    )

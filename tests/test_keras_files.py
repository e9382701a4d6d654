"""Hostile Keras files: refused before Keras reads them, and nothing they hold runs.

Each file is made by Keras itself (or is a real Keras file with one part changed) so
that loading it with Keras' own loader would run something: a Lambda, a module function
named in the config, a custom layer, a resource initializer stored in a SavedModel.
Each test proves the marker file that the code would write is absent and that the
answer is one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import Recording
from recorders.errors import ModelFormatError
from tests.conftest import record_with_cli, run_cli
from tests.test_keras import FEATURES, T, keras_module, masked_model, sequences, zero_mask

pytestmark = pytest.mark.e2e


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.strip()


def lambda_model(framework: str):
    keras = keras_module(framework)
    x = keras.Input((T, FEATURES), name="x")
    return keras.Model(x, keras.layers.LSTM(2)(keras.layers.Lambda(lambda v: v * 2)(x)))


@pytest.mark.parametrize(
    "framework, name",
    [("keras3", "m.keras"), ("tf-keras", "m.keras"), ("tf-keras", "m.h5"), ("tf-keras", "saved")],
)
def test_a_lambda_layer_is_refused_in_every_file_format(framework, name, tmp_path):
    model, path = lambda_model(framework), tmp_path / name
    model.save(str(path)) if name != "saved" else model.save(str(path), save_format="tf")
    msg = one_line_error(run_cli("inspect", str(path)))
    assert "loading it would build objects gatetrace does not check as safe: " in msg
    assert (
        "Lambda (runs a Python function named in the file)" in msg
        and "nothing was loaded" in msg
        and "--allow-unsafe-ops" in msg
    )


def _rewrite_keras(path, change) -> None:
    """Rewrite the config.json of the .keras archive at `path` with `change(config)`."""
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    change(config)
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_a_module_function_named_in_the_config_never_runs(framework, tmp_path):
    marker = tmp_path / "pwned.txt"
    path = tmp_path / "m.keras"
    masked_model(framework).save(str(path))

    def plant(config):
        layers = config["config"]["layers"]
        masking = next(layer for layer in layers if layer["class_name"] == "Masking")
        masking["class_name"] = "Lambda"
        masking["config"] = {
            "name": masking["config"]["name"],
            "function": "system",
            "module": "os",
            "function_type": "function",
            "output_shape": None,
            "arguments": {"command": f"touch {marker}"},
        }

    _rewrite_keras(path, plant)
    for command in (
        ["inspect", str(path)],
        ["weights", str(path), "--out", str(tmp_path / "w.parquet")],
    ):
        assert "Lambda (runs a Python function named in the file)" in one_line_error(
            run_cli(*command)
        )
        assert not marker.exists() and not (tmp_path / "w.parquet").exists()


def test_extra_archive_members_and_bombs_are_refused_before_anything_is_unpacked(
    tmp_path, monkeypatch
):
    import tempfile

    path = tmp_path / "m.keras"
    masked_model("keras3").save(str(path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    extra = tmp_path / "extra.keras"
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(extra, "w", zipfile.ZIP_DEFLATED) as out:
        for n in z.namelist():
            out.writestr(n, z.read(n))
        out.writestr("assets/blob.bin", b"\0" * (32 << 20))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where anything unpacked would go
    msg = one_line_error(run_cli("inspect", str(extra)))
    assert msg.endswith(
        "the archive holds members a Keras model file does not (assets/blob.bin); nothing was unpacked. If you trust this model, pass --allow-unsafe-ops"
    )
    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as out:
        for n in z.namelist():
            out.writestr(n, z.read(n) if n != "model.weights.h5" else b"\0" * (200 << 20))
    msg = one_line_error(run_cli("inspect", str(bomb)))
    assert (
        "its member model.weights.h5 unpacks to 209,715,200 bytes from " in msg
        and "nothing was unpacked" in msg
    )
    assert list(tmp.iterdir()) == []


def test_a_custom_layer_in_a_saved_model_runs_only_as_its_traced_functions(tmp_path):
    """A custom layer's class is not in a SavedModel folder: Keras cannot rebuild it, and its
    code is not run; the model is recorded through the folder's traced functions (TensorFlow
    ops, checked like any SavedModel's), exactly."""
    from tests.test_keras import randomise, reference

    keras = keras_module("tf-keras")
    calls = []

    class Doubler(keras.layers.Layer):
        def call(self, v):
            calls.append(1)
            return v * 2

    x = keras.Input((T, FEATURES), name="x")
    model = keras.Model(x, keras.layers.LSTM(2, name="lstm")(Doubler(name="doubler")(x)))
    randomise(model, seed=3)
    model.save(str(tmp_path / "saved"), save_format="tf")
    calls.clear()
    xs = sequences()
    with tracer.load_model(tmp_path / "saved") as loaded:
        assert any("names Doubler (not one of Keras' own layers)" in n for n in loaded.notes)
        trace = tracer.trace(loaded, {"x": xs})
    assert calls == []
    (ct,) = trace
    gates, _, _ = reference(model.get_layer("lstm"), 2 * xs, None, None, "tf-keras")
    for k, g in enumerate(ct.cell.gates):
        np.testing.assert_allclose(ct.activation[:, :, k], gates[g][1], atol=1e-5)


def test_a_resource_initializer_stored_in_a_saved_model_never_runs(tmp_path):
    """A standard tf-keras model carrying a resource whose initializer writes a file: Keras'
    loader (and TensorFlow's) run it; gatetrace builds the model from its config instead."""
    import tensorflow as tf

    marker = tmp_path / "pwned.txt"

    class Planted(tf.saved_model.experimental.TrackableResource):
        def _create_resource(self):
            return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[])

        def _initialize(self):
            return tf.io.write_file(str(marker), "pwned")

    keras = keras_module("tf-keras")
    x = keras.Input((T, FEATURES), name="x")
    # small: saving traces every layer
    model = keras.Model(x, keras.layers.LSTM(3, name="lstm")(keras.layers.Masking(0.0)(x)))
    model.planted = Planted()
    model.save(str(tmp_path / "saved"), save_format="tf")
    marker.unlink(missing_ok=True)  # saving ran it once, in this process
    x = sequences()
    np.save(tmp_path / "x.npy", x)
    assert run_cli("inspect", str(tmp_path / "saved")).returncode == 0 and not marker.exists()
    done = run_cli(
        "record",
        str(tmp_path / "saved"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    trace = tracer.trace(model, x)  # the in-memory model the file was saved from
    rec, valid = Recording(tmp_path / "rec"), zero_mask(x)
    for ct in trace:
        for k, g in enumerate(ct.cell.gates):
            np.testing.assert_allclose(
                rec.gate_array(ct.cell.name, g, "activation")[valid],
                ct.activation[:, :, k][valid],
                atol=1e-5,
            )
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import tensorflow as tf; tf.saved_model.load({str(tmp_path / 'saved')!r})",
        ],
        capture_output=True,
    )
    # the planted initializer is real: TensorFlow's loader runs it
    assert loaded.returncode == 0 and marker.exists()


def test_a_weights_only_h5_says_so(tmp_path):
    masked_model("tf-keras").save_weights(str(tmp_path / "w.h5"))
    with pytest.raises(
        ModelFormatError,
        match=r"holds weights only \(saved with save_weights\?\) and no architecture: save the model with model.save",
    ):
        tracer.load_model(tmp_path / "w.h5")


# what a damaged or hostile configuration may hold: (config.json, what the line says)
SHAPES = {
    "a list": ([], "its config.json is a list, not the JSON object"),
    "null": (None, "its config.json is null, not the JSON object"),
    "a string": ("model", "its config.json is a string, not the JSON object"),
    "a number": (3, "its config.json is a number, not the JSON object"),
    "a list of models": ([{"class_name": "Functional"}], "its config.json is a list"),
    "its config a list": (
        {"class_name": "Functional", "config": []},
        'model (Functional) gives its settings ("config") as a list, where Keras keeps them in a JSON '
        "object; the file is damaged or was not written by Keras: save the model again with Keras; "
        "nothing was loaded",
    ),
    "its config a string": (
        {"class_name": "Sequential", "config": "x"},
        'model (Sequential) gives its settings ("config") as a string',
    ),
    "its layers a dict": ({"class_name": "Functional", "config": {"layers": {"a": 1}}}, ""),
    "a layer's config a list": (
        {
            "class_name": "Functional",
            "config": {"layers": [{"class_name": "InputLayer", "config": []}]},
        },
        'model.config.layers[0] (InputLayer) gives its settings ("config") as a list',
    ),
    "input_layers of numbers": (
        {"class_name": "Functional", "config": {"layers": [], "input_layers": [[1, 2, 3]]}},
        "",
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("command", ["record", "inspect"])
def test_a_keras_configuration_of_another_shape_is_one_line(shape, command, tmp_path):
    """config.json of any JSON shape, at its top or inside: one line saying what was expected
    and found, exit 2 (before: a list, null, a string or a number gave AttributeError)."""
    config, said = SHAPES[shape]
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.10.0"}))
    np.save(tmp_path / "x.npy", np.zeros((2, T, FEATURES), np.float32))
    args = ["--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")]
    msg = one_line_error(run_cli(command, str(path), *(args if command == "record" else [])))
    assert msg.startswith(f"gatetrace: error: {path}: ") and said in msg, msg
    assert "AttributeError" not in msg and "GATETRACE_DEBUG" not in msg, msg


def test_what_keras_says_of_a_configuration_it_cannot_load_is_whole(tmp_path):
    """With --allow-unsafe-ops (the file unchecked), Keras' refusal of a model whose settings
    are a list is one line, whole (before: cut at its first line's comma, "Expected 'config'
    to be a dict for Functional,")."""
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps({"class_name": "Functional", "config": []}))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.10.0"}))
    msg = one_line_error(run_cli("inspect", str(path), "--allow-unsafe-ops"))
    assert msg == (
        f"gatetrace: error: {path}: cannot load it with keras3: Expected 'config' to be a dict for "
        "Functional, instead got <class 'list'>"
    )


def test_an_h5_model_config_of_another_shape_is_one_line(tmp_path):
    import h5py

    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.attrs["model_config"] = json.dumps(["Functional"])
    msg = one_line_error(run_cli("inspect", str(tmp_path / "m.h5")))
    assert "its model_config is a list, not the JSON object a Keras model's configuration is" in msg


def test_a_keras_2_0_gru_without_reset_after_is_read_as_it_was_meant(tmp_path):
    """Keras 2.0 and 2.1 wrote GRU configs without `reset_after` (their GRU had one bias):
    tf-keras alone refuses them; gatetrace reads them with reset_after=False, exactly."""
    import h5py

    from tests.test_keras import randomise, reference

    keras = keras_module("tf-keras")
    x = keras.Input((T, FEATURES), name="x")
    model = keras.Model(
        x, keras.layers.GRU(3, reset_after=False, return_sequences=True, name="gru")(x)
    )
    randomise(model, seed=5)
    model.save(str(tmp_path / "old.h5"))
    with h5py.File(tmp_path / "old.h5", "r+") as f:  # as Keras 2.0.8 wrote it
        config = json.loads(f.attrs["model_config"])
        for layer in config["config"]["layers"]:
            layer["config"].pop("reset_after", None)
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "2.0.8"
    with pytest.raises(ValueError, match="reset_after"):
        keras.models.load_model(str(tmp_path / "old.h5"), compile=False)
    xs = sequences()
    np.save(tmp_path / "x.npy", xs)
    done = run_cli(
        "record",
        str(tmp_path / "old.h5"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    expected, _, _ = reference(model.get_layer("gru"), xs, None, None, "tf-keras")
    rec = Recording(tmp_path / "rec")
    for g in "urc":
        np.testing.assert_allclose(
            rec.gate_array("gru", g, "preactivation"), expected[g][0], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array("gru", g, "activation"), expected[g][1], atol=1e-5
        )


def _kernel(f) -> str:
    """The path of the first 2-D dataset of an HDF5 file (an RNN layer's kernel)."""
    import h5py

    found = []
    f.visititems(
        lambda name, obj: (
            found.append(name) if isinstance(obj, h5py.Dataset) and obj.ndim == 2 else None
        )
    )
    return sorted(found)[0]


def _plant(h5_path, how: str, secret) -> None:
    """Make the kernel of the HDF5 file at `h5_path` read `secret` (a file outside it)."""
    import h5py

    with h5py.File(h5_path, "r+") as f:
        name = _kernel(f)
        shape, dtype = f[name].shape, f[name].dtype
        del f[name]
        size = int(np.prod(shape)) * dtype.itemsize
        if how == "external storage":
            f.create_dataset(name, shape, dtype, external=[(str(secret), 0, size)])
        elif how == "external link":
            with h5py.File(secret.with_suffix(".h5"), "w") as other:
                other.create_dataset(
                    "k", data=np.frombuffer(secret.read_bytes()[:size], dtype).reshape(shape)
                )
            f[name] = h5py.ExternalLink(str(secret.with_suffix(".h5")), "k")
        else:
            layout = h5py.VirtualLayout(shape, dtype)
            layout[...] = h5py.VirtualSource(str(secret.with_suffix(".h5")), "k", shape=shape)
            with h5py.File(secret.with_suffix(".h5"), "w") as other:
                other.create_dataset(
                    "k", data=np.frombuffer(secret.read_bytes()[:size], dtype).reshape(shape)
                )
            f.create_virtual_dataset(name, layout)


@pytest.mark.parametrize("how", ["external storage", "external link", "virtual dataset"])
@pytest.mark.parametrize("framework, name", [("tf-keras", "m.h5"), ("keras3", "m.keras")])
def test_hdf5_weights_stored_outside_the_file_are_refused(framework, name, how, tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----" * 64)
    path = tmp_path / name
    masked_model(framework).save(str(path))
    if name.endswith(".keras"):
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        (tmp_path / "w.h5").write_bytes(members["model.weights.h5"])
        _plant(tmp_path / "w.h5", how, secret)
        members["model.weights.h5"] = (tmp_path / "w.h5").read_bytes()
        with zipfile.ZipFile(path, "w") as z:
            for n, data in members.items():
                z.writestr(n, data)
    else:
        _plant(path, how, secret)
    out = tmp_path / "weights.parquet"
    for command in (["inspect", str(path)], ["weights", str(path), "--out", str(out)]):
        msg = one_line_error(run_cli(*command))
        assert (
            "its HDF5 weights would be read from outside the file (a Keras file holds its own): "
            in msg
            and "nothing was loaded" in msg
        ), msg
        assert {
            "external storage": "another file)",
            "external link": "a link to ",
            "virtual dataset": "a virtual dataset",
        }[how] in msg
    assert not out.exists()


@pytest.mark.parametrize(
    "framework, name",
    [("tf-keras", "saved"), ("tf-keras", "m.h5"), ("tf-keras", "m.keras"), ("keras3", "m.keras")],
)
def test_a_compiled_model_records_exactly_in_every_format(framework, name, tmp_path):
    """Nearly every trained model was compiled before it was saved: its optimizer, loss and
    metrics are in the file (a SavedModel even lists them as objects) but loading never
    builds them. An LSTM with relu, an Orthogonal initializer under the name each Keras gives
    it, and a weight constraint and regularizer of Keras' own."""
    from tests.test_keras import randomise, reference

    keras = keras_module(framework)
    orthogonal = (
        keras.initializers.OrthogonalInitializer()
        if framework == "keras3"
        else keras.initializers.Orthogonal()
    )
    x = keras.Input((T, FEATURES), name="x")
    lstm = keras.layers.LSTM(
        3,
        activation="relu",
        return_sequences=True,
        recurrent_initializer=orthogonal,
        kernel_constraint=keras.constraints.MaxNorm(3.0),
        kernel_regularizer=keras.regularizers.L2(1e-3),
        name="lstm",
    )
    model = keras.Model(x, keras.layers.Dense(1)(lstm(x)))
    model.compile(
        optimizer="adam", loss="mse", metrics=["mae", keras.metrics.RootMeanSquaredError()]
    )
    model.fit(
        np.ones((4, T, FEATURES), np.float32), np.ones((4, T, 1), np.float32), epochs=1, verbose=0
    )
    randomise(model, seed=3)
    path = tmp_path / name
    model.save(str(path)) if name != "saved" else model.save(str(path), save_format="tf")
    xs = sequences()
    np.save(tmp_path / "x.npy", xs)
    done = run_cli(
        "record",
        str(path),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    expected, _, _ = reference(model.get_layer("lstm"), xs, None, None, framework)
    rec = Recording(tmp_path / "rec")
    for g in "ifjo":
        np.testing.assert_allclose(
            rec.gate_array("lstm", g, "preactivation"), expected[g][0], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array("lstm", g, "activation"), expected[g][1], atol=1e-5
        )


def _beyond_the_recurrent_family(keras):
    """Convolution, normalization, attention, noise and pooling around an LSTM: Keras' own layers."""
    x = keras.Input((T, FEATURES), name="x")
    h = keras.layers.Conv1D(4, 3, padding="same")(x)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=2)(h, h)
    h = keras.layers.BatchNormalization()(keras.layers.GaussianNoise(0.1)(h))
    lstm = keras.layers.LSTM(3, return_sequences=True, name="lstm")
    y = keras.layers.GlobalMaxPooling1D()(keras.layers.SpatialDropout1D(0.2)(lstm(h)))
    return keras.Model(x, keras.layers.Dense(1)(y)), lstm


@pytest.mark.parametrize(
    "framework, name, era",
    [
        ("tf-keras", "m.h5", None),
        ("tf-keras", "m.keras", None),
        ("tf-keras", "saved", None),
        ("keras3", "m.keras", None),
        ("tf-keras", "m.keras", "tf.keras 2.15"),
    ],
)
def test_keras_own_layers_beyond_the_recurrent_family_record(framework, name, era, tmp_path):
    """Every layer Keras itself exports is Keras' own (read from its namespaces, not a list):
    the model records, and the LSTM's gates equal Keras' formulas in float64 on the input the
    layers before it give. A `.keras` file of tf.keras 2.15 names its modules `keras.src...`
    (that Keras is tf-keras today): written here by renaming tf-keras' modules as 2.15 had them."""
    from tests.test_keras import randomise, reference

    keras = keras_module(framework)
    model, lstm = _beyond_the_recurrent_family(keras)
    randomise(model, seed=3)
    path = tmp_path / name
    model.save(str(path)) if name != "saved" else model.save(str(path), save_format="tf")
    if era == "tf.keras 2.15":
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        config = members["config.json"].decode()
        assert '"module": "tf_keras.src.engine.functional"' in config or '"tf_keras.src' in config
        members["config.json"] = config.replace('"tf_keras.', '"keras.').encode()
        with zipfile.ZipFile(path, "w") as z:
            for n, data in members.items():
                z.writestr(n, data)
    xs = sequences()
    np.save(tmp_path / "x.npy", xs)
    done = run_cli(
        "record",
        str(path),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    below = np.asarray(keras.Model(model.input, lstm.input)(xs, training=False))
    expected, _, _ = reference(lstm, below, None, None, framework)
    rec = Recording(tmp_path / "rec")
    for g in "ifjo":
        np.testing.assert_allclose(
            rec.gate_array("lstm", g, "preactivation"), expected[g][0], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array("lstm", g, "activation"), expected[g][1], atol=1e-5
        )


@pytest.mark.parametrize("layer", ["TextVectorization", "StringLookup"])
def test_a_vocabulary_read_from_a_path_outside_the_file_is_refused(layer, tmp_path):
    """A lookup layer whose vocabulary is a file name reads that file when Keras builds it: the
    file is outside the model, so it is refused in one line, naming the path."""
    keras = keras_module("keras3")
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("a\nb\nc\n")
    x = keras.Input((), dtype="string")
    made = (
        keras.layers.TextVectorization(output_sequence_length=T)
        if layer == "TextVectorization"
        else keras.layers.StringLookup()
    )
    model = keras.Model(x, made(x))
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    (own,) = [entry for entry in config["config"]["layers"] if entry["class_name"] == layer]
    own["config"]["vocabulary"] = str(vocabulary)
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(tmp_path / "m.keras", "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    msg = one_line_error(run_cli("inspect", str(tmp_path / "m.keras")))
    assert (
        f"{layer} (reads {vocabulary}, a file outside the model)" in msg
        and "nothing was loaded" in msg
    )


def test_a_keras_3_text_classifier_with_its_vocabulary_in_the_archive_records_its_strings(tmp_path):
    """TextVectorization -> Embedding(mask_zero) -> Bidirectional(LSTM) -> GlobalMaxPooling1D ->
    Dropout -> Dense, saved by Keras 3: the vocabulary is an asset inside the archive, read by
    Keras from there. Fed a .npy of strings, both directions record where the text has words,
    equal to Keras' formulas in float64 on the embedded tokens, and nowhere else."""
    from tests.test_keras import randomise, reference

    keras = keras_module("keras3")
    texts = np.array(["the cat sat on the mat", "a dog ran", "the dog and the cat", "hello"])
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=T)
    vectorize.adapt(texts)
    x = keras.Input((), dtype="string", name="text")
    embedded = keras.layers.Embedding(20, 3, mask_zero=True, name="embedding")(vectorize(x))
    both = keras.layers.Bidirectional(
        keras.layers.LSTM(2, return_sequences=True, name="lstm"), name="bi"
    )
    y = keras.layers.Dense(1)(
        keras.layers.Dropout(0.2)(keras.layers.GlobalMaxPooling1D()(both(embedded)))
    )
    model = keras.Model(x, y)
    randomise(model, seed=5)
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        assert any(n.startswith("assets/layers/text_vectorization/") for n in z.namelist())
    np.save(tmp_path / "texts.npy", texts)
    done = run_cli(
        "record",
        str(tmp_path / "m.keras"),
        "--feed",
        f"text={tmp_path / 'texts.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    tokens = np.asarray(vectorize(texts))
    valid = tokens != 0
    inputs = np.asarray(keras.Model(x, embedded)(texts)).astype(np.float32)
    rec = Recording(tmp_path / "rec")
    assert rec.cells == ["bi/forward_lstm", "bi/backward_lstm"]
    for name, layer in (
        ("bi/forward_lstm", both.forward_layer),
        ("bi/backward_lstm", both.backward_layer),
    ):
        expected, _, _ = reference(layer, inputs, valid, None, "keras3")
        for g in "ifjo":
            got = rec.gate_array(name, g, "activation")
            np.testing.assert_array_equal(np.isnan(got[..., 0]), ~valid)
            np.testing.assert_allclose(
                got[valid], expected[g][1][valid], atol=1e-5, err_msg=f"{name} {g}"
            )


@pytest.mark.parametrize("name", ["m.h5", "m.keras"])
def test_an_hdf5_dataset_declaring_far_more_than_the_file_holds_is_refused_before_it_is_read(
    name, tmp_path
):
    """A chunked dataset whose chunks were never written declares 4 TB in a few kilobytes: reading
    it would allocate it all. Its declared size is checked against what the file stores first."""
    import h5py

    keras = keras_module("tf-keras" if name == "m.h5" else "keras3")
    x = keras.Input((T, FEATURES), name="x")
    model = keras.Model(x, keras.layers.LSTM(2, name="lstm")(x))
    path = tmp_path / name
    model.save(str(path))
    if name == "m.h5":
        with h5py.File(path, "a") as f:
            group = f["model_weights"]["lstm"]
            group.create_dataset(
                "bomb", shape=(1 << 20, 1 << 20), dtype="float32", chunks=(1024, 1024)
            )
    else:
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        (tmp_path / "w.h5").write_bytes(members["model.weights.h5"])
        with h5py.File(tmp_path / "w.h5", "a") as f:
            f.create_dataset(
                "layers/lstm/bomb", shape=(1 << 20, 1 << 20), dtype="float32", chunks=(1024, 1024)
            )
        members["model.weights.h5"] = (tmp_path / "w.h5").read_bytes()
        with zipfile.ZipFile(path, "w") as z:
            for n, data in members.items():
                z.writestr(n, data)
    assert path.stat().st_size < 1 << 20
    msg = one_line_error(run_cli("inspect", str(path)))
    assert (
        "its HDF5 weights declare far more than the file holds or memory takes (" in msg
        and "bomb (declares 4,398,046,511,104 bytes of [1048576, 1048576], stores 0)" in msg
    )
    assert "nothing was loaded" in msg


def test_an_hdf5_kernel_stored_in_a_sparse_file_is_refused_before_it_is_allocated(tmp_path):
    """A contiguous dataset of 16 GiB whose bytes are a hole in a sparse file: stored in full as
    far as HDF5 knows, a few kilobytes on disk. Loading would allocate all of it."""
    import h5py

    keras = keras_module("tf-keras")
    x = keras.Input((T, FEATURES), name="x")
    model = keras.Model(x, keras.layers.LSTM(2, name="lstm")(x))
    path = tmp_path / "m.h5"
    model.save(str(path))
    with h5py.File(path, "a") as f:  # contiguous, allocated on creation, never filled
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        space = h5py.h5s.create_simple((1 << 17, 1 << 15))
        group = f["model_weights"]["lstm"]
        h5py.h5d.create(group.id, b"kernel_big", h5py.h5t.IEEE_F32LE, space, dcpl=plist)
    with h5py.File(path, "r") as f:
        assert f["model_weights"]["lstm"]["kernel_big"].id.get_storage_size() == 16 << 30
    assert os.stat(path).st_blocks * 512 < 64 << 20  # a hole on disk
    msg = one_line_error(run_cli("inspect", str(path)))
    assert (
        "declare 17,179," in msg
        and "more than the memory budget" in msg
        and "nothing was loaded" in msg
    )


def cudnn_params(layer) -> np.ndarray:
    """The flat vector a Keras 2 cuDNN layer hands cuDNN, built by Keras' own
    `canonical_to_params` from the blocks in the order the layer's `_process_batch` lists them
    (LSTM: kernel i, f, c, o, recurrent i, f, c, o, then the 8 biases; GRU: cuDNN's r, z, h,
    i.e. the layer's blocks 1, 0, 2, and its biases 1, 0, 2, 4, 3, 5), not transposed."""
    from tf_keras.src.layers.rnn import gru_lstm_utils

    K, R, b = (w.numpy() for w in (layer.kernel, layer.recurrent_kernel, layer.bias))
    u = R.shape[0]
    order = (0, 1, 2, 3) if type(layer).__name__ == "CuDNNLSTM" else (1, 0, 2)
    bias_order = range(8) if len(order) == 4 else (1, 0, 2, 4, 3, 5)
    params = gru_lstm_utils.canonical_to_params(
        weights=[m[:, k * u : (k + 1) * u] for m in (K, R) for k in order],
        biases=[b[k * u : (k + 1) * u] for k in bias_order],
        shape=[-1],
    )
    return np.asarray(params.numpy(), np.float64)


def cudnn_reference(layer, x: np.ndarray, misread: bool = False) -> tuple[dict, np.ndarray]:
    """cuDNN's documented equations in float64 over the flat vector the layer hands it
    (`cudnn_params`), read as cuDNN reads it: the input matrices W, the recurrent matrices R,
    each `[units, rows]` row-major, then the input and recurrent biases; LSTM gates i, f, c, o,
    GRU r, z, h; from zero state. `misread` takes each stored block for the matrix cuDNN
    multiplies by (as gatetrace once did), to show this reference tells the two apart. Returns
    {gate: (pre, act)} in gatetrace's labels, [examples, steps, units] by input position, and h
    by input position."""
    lstm = type(layer).__name__ == "CuDNNLSTM"
    n_gates, u, rows = (4 if lstm else 3), layer.units, x.shape[-1]
    flat = cudnn_params(layer)
    W, R = [], []
    for matrices, cols in ((W, rows), (R, u)):
        for _ in range(n_gates):
            block, flat = flat[: u * cols], flat[u * cols :]
            matrices.append(block.reshape(cols, u).T if misread else block.reshape(u, cols))
    bW, bR = flat[: n_gates * u].reshape(n_gates, u), flat[n_gates * u :].reshape(n_gates, u)
    n, steps, _ = x.shape
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    labels = "ifjo" if lstm else "urc"
    gates = {g: (np.zeros((n, steps, u)), np.zeros((n, steps, u))) for g in labels}
    hs = np.zeros((n, steps, u))
    h, c = np.zeros((n, u)), np.zeros((n, u))
    for t in range(steps)[::-1] if layer.go_backwards else range(steps):
        xt = x[:, t].astype(np.float64)
        if lstm:  # W_k x + b_Wk + R_k h + b_Rk, k = i, f, c, o
            pre = [xt @ W[k].T + bW[k] + h @ R[k].T + bR[k] for k in range(4)]
            i, f, g, o = sig(pre[0]), sig(pre[1]), np.tanh(pre[2]), sig(pre[3])
            c = f * c + i * g
            h = o * np.tanh(c)
            acts = [i, f, g, o]
        else:  # r, z (update), h: h~ = tanh(W_h x + b_Wh + r * (R_h h + b_Rh))
            zr = xt @ W[0].T + bW[0] + h @ R[0].T + bR[0]
            zz = xt @ W[1].T + bW[1] + h @ R[1].T + bR[1]
            r, z = sig(zr), sig(zz)
            zh = xt @ W[2].T + bW[2] + r * (h @ R[2].T + bR[2])
            hh = np.tanh(zh)
            h = (1 - z) * hh + z * h
            pre, acts = [zz, zr, zh], [z, r, hh]
        for label, p, a in zip(labels, pre, acts, strict=True):
            gates[label][0][:, t], gates[label][1][:, t] = p, a
        hs[:, t] = h
    return gates, hs


def cudnn_model(lstm_units: int = 4):
    """Two layers as a TF1-era or Keras 2 GPU script wrote them, with tf.compat.v1.keras:
    CuDNNLSTM (return_sequences), then Bidirectional(CuDNNGRU); random weights and biases."""
    from tests.test_keras import randomise

    keras = keras_module("tf-keras")
    from tracer._tf import tf

    v1 = tf.compat.v1.keras.layers
    x = keras.Input((T, FEATURES), name="x")
    a = v1.CuDNNLSTM(lstm_units, return_sequences=True, name="cu_dnnlstm_1")(x)
    b = keras.layers.Bidirectional(
        v1.CuDNNGRU(3, return_sequences=True, name="cu_dnngru_1"), name="bidirectional_1"
    )(a)
    model = keras.Model(x, b)
    randomise(model, seed=11)
    return model


def keras_converted(path, lstm_units: int):
    """The same network with Keras' LSTM and GRU(reset_after=True), its weights loaded from the
    cuDNN model's `.h5` by Keras' own legacy loader, which converts them (`_convert_rnn_weights`)."""
    keras = keras_module("tf-keras")
    x = keras.Input((T, FEATURES), name="x")
    a = keras.layers.LSTM(lstm_units, return_sequences=True)(x)
    b = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True, reset_after=True))(a)
    model = keras.Model(x, b)
    model.load_weights(str(path))
    return model


def as_keras_2_2_4_wrote_it(path) -> None:
    """The .h5 file's attributes and configuration as Keras 2.2.4 wrote them: its version, a
    `Model`, layer configurations without the keys later versions added, initializers by
    class name only."""
    import h5py

    def old(obj):
        if isinstance(obj, dict):
            obj = {
                k: old(v)
                for k, v in obj.items()
                if k not in ("module", "registered_name", "time_major", "dtype")
            }
        return [old(v) for v in obj] if isinstance(obj, list) else obj

    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        config["class_name"] = "Model"
        config["config"]["layers"] = [
            {
                **layer,
                "config": old(layer["config"])
                if layer["class_name"] != "InputLayer"
                else layer["config"],
            }
            for layer in config["config"]["layers"]
        ]
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "2.2.4"
        f.attrs["backend"] = "tensorflow"


@pytest.mark.parametrize("saved", ["tf.compat.v1.keras .h5", "Keras 2.2.4 .h5"])
@pytest.mark.parametrize(
    "lstm_units", [4, FEATURES], ids=["input_size_not_units", "input_size_units"]
)
def test_keras_2_cudnn_layers_are_recorded_on_a_cpu_as_cudnn_computed_them(
    saved, lstm_units, tmp_path
):
    """A CuDNNLSTM and a CuDNNGRU (inside Bidirectional) cannot run on a CPU as they are: they
    are recorded as the LSTM and GRU they equal. Checked against two oracles gatetrace did not
    build: cuDNN's documented equations over the flat vector Keras hands cuDNN (which tell the
    right reading of the blocks from the wrong one), and Keras' own conversion of the file (its
    legacy loader into LSTM and GRU layers, run by Keras). W, U, b per gate as Keras converts
    them."""
    model = cudnn_model(lstm_units)
    path = tmp_path / "m.h5"
    model.save(str(path))
    if saved.startswith("Keras 2.2.4"):
        as_keras_2_2_4_wrote_it(path)
    shown = run_cli("inspect", str(path))
    assert shown.returncode == 0, shown.stderr
    assert (
        "note: cu_dnnlstm_1 (CuDNNLSTM), forward_cu_dnngru_1 (CuDNNGRU), backward_cu_dnngru_1 (CuDNNGRU) run "
        "cuDNN's fused op, which has no CPU kernel: recorded as the LSTM and GRU(reset_after=True) they equal"
    ) in shown.stdout
    x = np.random.RandomState(2).uniform(-1, 1, (5, T, FEATURES)).astype(np.float32)
    rec = record_with_cli(path, {"x": x}, tmp_path / "rec")
    assert rec.cells == [
        "cu_dnnlstm_1",
        "bidirectional_1/forward_cu_dnngru_1",
        "bidirectional_1/backward_cu_dnngru_1",
    ]
    lstm = model.get_layer("cu_dnnlstm_1")
    gates, h = cudnn_reference(lstm, x)
    wrong, _ = cudnn_reference(lstm, x, misread=True)
    assert np.abs(wrong["i"][0] - gates["i"][0]).max() > 0.05  # the oracle tells the readings apart
    for g, (pre, act) in gates.items():
        np.testing.assert_allclose(
            rec.gate_array("cu_dnnlstm_1", g, "preactivation"), pre, atol=1e-5
        )
        np.testing.assert_allclose(rec.gate_array("cu_dnnlstm_1", g, "activation"), act, atol=1e-5)
    np.testing.assert_allclose(rec.state_array("cu_dnnlstm_1", "h"), h, atol=1e-5)
    bi = model.get_layer("bidirectional_1")
    outputs = []
    for half, layer in (("forward", bi.forward_layer), ("backward", bi.backward_layer)):
        gru, h_gru = cudnn_reference(layer, h.astype(np.float32))
        cell = f"bidirectional_1/{half}_cu_dnngru_1"
        for g, (pre, act) in gru.items():
            np.testing.assert_allclose(
                rec.gate_array(cell, g, "preactivation"), pre, atol=1e-5, err_msg=f"{cell} {g}"
            )
            np.testing.assert_allclose(
                rec.gate_array(cell, g, "activation"), act, atol=1e-5, err_msg=f"{cell} {g}"
            )
        outputs.append(h_gru)
    # Keras' own conversion of the file, run by Keras, returns what cuDNN's equations return
    converted = keras_converted(path, lstm_units)
    np.testing.assert_allclose(converted(x).numpy(), np.concatenate(outputs, -1), atol=1e-5)
    # W, U, b per gate, as Keras converts them: the LSTM's b both biases added; the GRU's two
    # biases apart (the recurrent one inside the reset gate's product, as cuDNN applies it)
    weights = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    mine = weights[weights["cell"] == "cu_dnnlstm_1"]
    cell, u = converted.layers[1].cell, lstm_units
    for gate, k in (("i", 0), ("f", 1), ("j", 2), ("o", 3)):
        for source, matrix in (("input", cell.kernel), ("recurrent", cell.recurrent_kernel)):
            got = mine[(mine["gate"] == gate) & (mine["source"] == source)]
            np.testing.assert_array_equal(
                got.pivot(index="row", columns="unit", values="value").to_numpy(),
                matrix.numpy()[:, k * u : (k + 1) * u],
            )
        b = mine[(mine["gate"] == gate) & (mine["source"] == "bias")].sort_values("unit")
        np.testing.assert_array_equal(b["value"], cell.bias.numpy()[k * u : (k + 1) * u])
    gb = converted.layers[2].forward_layer.cell.bias.numpy()  # [2, 3 units]: input, recurrent
    c = weights[
        (weights["cell"] == "bidirectional_1/forward_cu_dnngru_1") & (weights["gate"] == "c")
    ]
    for source, want in (("bias", gb[0, 6:9]), ("recurrent_bias", gb[1, 6:9])):
        got = c[c["source"] == source].sort_values("unit")["value"]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "depth, says",
    [
        (40, "StackedRNNCells (nested more than 32 objects deep"),
        (1000, "its configuration nests its objects deeper than Python's JSON reader goes"),
    ],
)
def test_a_configuration_nested_a_thousand_deep_is_refused_before_keras_builds_it(
    tmp_path, depth, says
):
    """StackedRNNCells inside StackedRNNCells, 40 and 1,000 deep, in a `.keras` file's
    config.json: one line naming the nesting, before Keras' recursion would build it (before:
    a RecursionError)."""
    import zipfile

    keras = keras_module("keras3")
    x = keras.Input((T, FEATURES), name="x")
    model = keras.Model(
        x, keras.layers.RNN(keras.layers.StackedRNNCells([keras.layers.LSTMCell(2)]))(x)
    )
    path = tmp_path / "ok.keras"
    model.save(path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    (rnn,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "RNN"]
    stacked = rnn["config"]["cell"]
    for _ in range(depth):
        stacked = {**stacked, "config": {**stacked["config"], "cells": [stacked]}}
    rnn["config"]["cell"] = stacked
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # (json.dumps recurses)
    try:
        members["config.json"] = json.dumps(config).encode()
    finally:
        sys.setrecursionlimit(limit)
    deep = tmp_path / "deep.keras"
    with zipfile.ZipFile(deep, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    done = run_cli("inspect", str(deep))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr
    assert run_cli("inspect", str(path)).returncode == 0  # the same model as saved
